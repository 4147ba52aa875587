"""One client's output buffer: what is waiting to be sent, and when it is due.

The buffer follows nsqd: message frames collect until the buffer reaches the client's
``output_buffer_size``, the client stops being ready for more (in flight has reached RDY), or
the ``output_buffer_timeout`` passes since the first unflushed frame; responses, errors and
heartbeats go out at once. The connection's writer task (``tcp.py``) does the sending; this
class only decides, and calls ``wake`` when the writer has something to look at.

A message frame goes in as three pieces, never copied until the send joins them::

    [ size: int32 ][ type: int32 = 2 ][ timestamp: int64 ][ attempts: uint16 ][ id: 16 ][ body ]
    \\_________________ MESSAGE_FRAME_PREFIX.pack(...) _________________/        piece 2   piece 3
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from nsq_common import append_message_frames

if TYPE_CHECKING:
    from .message import QueuedMessage


def _no_wake() -> None:
    pass


class OutputBuffer:
    def __init__(self, size: int, timeout: float, clock: Callable[[], float]) -> None:
        self.size = size  # output_buffer_size (IDENTIFY may change it)
        self.timeout = timeout  # output_buffer_timeout in seconds; 0: every frame at once
        self.clock = clock
        self.out: list[bytes] = []
        self.out_bytes = 0
        self.urgent = False  # flush now, whatever the timeout says
        self.flush_at = 0.0  # when the oldest unflushed message frame is due
        self.wake: Callable[[], None] = _no_wake  # set by the connection's writer

    def send_frame(self, frame: bytes) -> None:
        """Queue a response or error frame; it is flushed at once with whatever is buffered."""
        self.out.append(frame)
        self.out_bytes += len(frame)
        self.urgent = True
        self.wake()

    def add_messages(self, msgs: list[QueuedMessage], client_full: bool) -> None:
        """Queue message frames; ``client_full``: the client can take no more (in flight has
        reached RDY), so waiting for more frames would only delay these."""
        # nsq_common's append_message_frames packs each frame's head and appends it, the id
        # and the body as they are (one join per send, not one bytes object per frame);
        # measured as fast as packing here (about 250 ns a message either way).
        first = not self.out
        self.out_bytes += append_message_frames(self.out, msgs)
        if self.out_bytes >= self.size or client_full or not self.timeout:
            self.urgent = True
            self.wake()
        elif first:
            self.flush_at = self.clock() + self.timeout
            self.wake()

    def take(self) -> bytes:
        """Everything buffered, as one ``bytes`` for one send; the buffer is then empty."""
        data = b"".join(self.out)
        self.out.clear()
        self.out_bytes = 0
        self.urgent = False
        return data

    def flush_due(self, now: float) -> bool:
        return bool(self.out) and (self.urgent or now >= self.flush_at)
