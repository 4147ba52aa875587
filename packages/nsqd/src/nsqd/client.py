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

    # -- the session, as the protocol and the connection change it --------------------------
    def attach(self, wake: Callable[[], None], disconnect: Callable[[], None]) -> None:
        """The connection's writer is woken with ``wake``; ``disconnect`` closes it."""
        self.output.wake_with(wake)
        self.disconnect = disconnect

    def identified_as(self, client_id: str, hostname: str, user_agent: str, *,
                      heartbeat_interval: float, output_buffer_size: int,
                      output_buffer_timeout: float, sample_rate: int,
                      msg_timeout: float) -> None:
        """IDENTIFY: who the client says it is, and the settings negotiated (seconds)."""
        self.client_id = client_id
        self.hostname = hostname
        self.user_agent = user_agent
        self.identified = True
        self.heartbeat_interval = heartbeat_interval
        self.output.configure(output_buffer_size, output_buffer_timeout)
        self.sample_rate = sample_rate
        self.msg_timeout = msg_timeout

    def tls_established(self, version: str, cipher_suite: str, common_name: str) -> None:
        self.tls = True
        self.tls_version = version
        self.tls_cipher_suite = cipher_suite
        self.tls_common_name = common_name

    def compressed(self, *, snappy: bool = False, deflate: bool = False) -> None:
        """A compression layer is on (snappy or deflate)."""
        self.snappy = self.snappy or snappy
        self.deflate = self.deflate or deflate

    def authenticate(self, secret: str) -> None:
        """AUTH's secret (the auth servers are asked with it: ``authorized``)."""
        self.auth_secret = secret

    def authorized(self, auth: AuthState) -> None:
        self.auth = auth

    def move_to(self, state: State) -> None:
        """The connection's state (state.py decides which)."""
        self.state = state

    def set_rdy(self, count: int) -> None:
        self.rdy = count

    def close_wait(self, state: State) -> None:
        """CLS: no more messages (RDY 0), in ``state``."""
        self.rdy = 0
        self.state = state

    def joined(self, channel: Channel | None) -> None:
        """Subscribed to ``channel`` (None: left it)."""
        self.channel = channel

    def count_published(self, topic: str, count: int) -> None:
        """``count`` messages published to ``topic`` (/stats' ``pub_counts``)."""
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count

    # -- in flight, as its channel's delivery counts it ------------------------------------
    def took(self, count: int) -> None:
        """``count`` messages delivered to this client, now in flight to it."""
        self.in_flight += count
        self.message_count += count

    def finished(self, count: int) -> None:
        """``count`` of its messages in flight FINished."""
        self.in_flight -= count
        self.finish_count += count

    def requeued(self) -> None:
        """One of its messages in flight REQueued."""
        self.in_flight -= 1
        self.requeue_count += 1

    def timed_out(self, count: int) -> None:
        """``count`` of its messages in flight timed out: as many slots free again."""
        self.in_flight -= count

    def nothing_in_flight(self) -> None:
        """Its channel forgot what was in flight to it (it left, or the channel was emptied)."""
        self.in_flight = 0

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
