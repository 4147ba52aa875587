"""One TCP client's session: identity, negotiated settings, state, RDY and counters.

What it has to send is its ``output`` (``output.OutputBuffer``); the connection (``tcp.py``)
owns the socket, and the protocol (``protocol.py``) changes the session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .output import OutputBuffer
from .state import INIT, SUBSCRIBED, State

if TYPE_CHECKING:
    from .auth import AuthState
    from .channel import Channel
    from .message import QueuedMessage


def _no_disconnect() -> None:
    pass


class Client:
    def __init__(self, client_id: int, remote_address: str, *, msg_timeout: float,
                 heartbeat_interval: float, output_buffer_size: int,
                 output_buffer_timeout: float, clock: Callable[[], float],
                 connect_ts: int) -> None:
        """``clock``: the broker's monotonic clock (the output buffer's flush deadlines);
        ``connect_ts``: when the client connected, in seconds since the epoch (its wall clock)."""
        host = remote_address.rsplit(":", 1)[0]
        self.id = client_id
        self.remote_address = remote_address
        self.client_id = host
        self.hostname = host
        self.user_agent = ""
        self.connect_ts = connect_ts
        self.state: State = INIT  # see state.py
        self.channel: Channel | None = None
        self.rdy = 0
        self.in_flight = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.pub_counts: dict[str, int] = {}
        self.msg_timeout = msg_timeout
        self.heartbeat_interval = heartbeat_interval
        self.sample_rate = 0
        self.tls = False
        self.tls_common_name = ""
        self.auth: AuthState | None = None
        self.auth_secret = ""
        self.tls_version = ""
        self.tls_cipher_suite = ""
        self.snappy = False
        self.deflate = False
        self.identified = False
        self.output = OutputBuffer(output_buffer_size, output_buffer_timeout, clock)
        # responses and errors go straight to the buffer (a bound method: no call in between)
        self.send_frame: Callable[[bytes], None] = self.output.send_frame
        # set by the connection: close it (channel deleted, shutdown)
        self.disconnect: Callable[[], None] = _no_disconnect

    # -- readiness -------------------------------------------------------------------------
    def ready_slots(self) -> int:
        """How many more messages this client may take now."""
        if self.state is not SUBSCRIBED:
            return 0
        return self.rdy - self.in_flight

    # -- output ------------------------------------------------------------------------------
    def send_messages(self, msgs: list[QueuedMessage]) -> None:
        """Deliver ``msgs`` (already counted in flight) to the output buffer."""
        self.output.add_messages(msgs, self.rdy <= self.in_flight)

    def send_records(self, records: Sequence[bytes]) -> None:
        """``send_messages`` of plain records (see ``record``), already counted in flight."""
        self.output.add_records(records, self.rdy <= self.in_flight)
