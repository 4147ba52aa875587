"""One TCP client's state: identity, negotiated settings, RDY and counters, and its output
buffer.

The output buffer follows nsqd: message frames collect until the buffer reaches the client's
output_buffer_size, the client stops being ready for more (in flight has reached RDY), or the
output_buffer_timeout passes since the first unflushed frame; responses, errors and heartbeats
go out at once. The connection's writer task (``tcp.py``) does the sending; this class only
decides, and calls ``wake`` when the writer has something to look at.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from nsq_common import MESSAGE_FRAME_PREFIX

from .state import INIT, SUBSCRIBED, State

if TYPE_CHECKING:
    from .auth import AuthState
    from .channel import Channel
    from .message import Message

_pack_prefix = MESSAGE_FRAME_PREFIX.pack


def _no_wake() -> None:
    pass


class Client:
    def __init__(self, client_id: int, remote_address: str, *, msg_timeout: float,
                 heartbeat_interval: float, output_buffer_size: int,
                 output_buffer_timeout: float, clock: Callable[[], float]) -> None:
        host = remote_address.rsplit(":", 1)[0]
        self.id = client_id
        self.remote_address = remote_address
        self.client_id = host
        self.hostname = host
        self.user_agent = ""
        self.connect_ts = int(time.time())
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
        self.output_buffer_size = output_buffer_size
        self.output_buffer_timeout = output_buffer_timeout
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
        self.clock = clock
        # output buffer
        self.out: list[bytes] = []
        self.out_bytes = 0
        self.urgent = False
        self.flush_at = 0.0
        self.wake: Callable[[], None] = _no_wake
        # set by the connection: close it (channel deleted, shutdown)
        self.disconnect: Callable[[], None] = _no_wake

    # -- readiness -------------------------------------------------------------------------
    def ready_slots(self) -> int:
        """How many more messages this client may take now."""
        if self.state is not SUBSCRIBED:
            return 0
        return self.rdy - self.in_flight

    # -- output ------------------------------------------------------------------------------
    def send_frame(self, frame: bytes) -> None:
        """Queue a response or error frame; it is flushed at once with whatever is buffered."""
        self.out.append(frame)
        self.out_bytes += len(frame)
        self.urgent = True
        self.wake()

    def send_messages(self, msgs: list[Message]) -> None:
        out = self.out
        append = out.append
        pack = _pack_prefix
        first = not out
        size = 0
        for msg in msgs:
            body = msg.body
            append(pack(30 + len(body), 2, msg.timestamp, msg.attempts))
            append(msg.id)
            append(body)
            size += 34 + len(body)
        self.out_bytes += size
        if (self.out_bytes >= self.output_buffer_size or self.rdy <= self.in_flight
                or not self.output_buffer_timeout):
            self.urgent = True
            self.wake()
        elif first:
            self.flush_at = self.clock() + self.output_buffer_timeout
            self.wake()

    def take_output(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        self.out_bytes = 0
        self.urgent = False
        return data

    def flush_due(self, now: float) -> bool:
        return bool(self.out) and (self.urgent or now >= self.flush_at)
