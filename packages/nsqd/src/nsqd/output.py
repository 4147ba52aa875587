"""One client's output buffer: what is waiting to be sent, and when it is due.

The buffer follows nsqd: message frames collect until the buffer reaches the client's
``output_buffer_size``, the client stops being ready for more (in flight has reached RDY), or
the ``output_buffer_timeout`` passes since the first unflushed frame; responses, errors and
heartbeats go out at once. The connection's writer task (``tcp.py``) does the sending; this
class only decides, and calls ``wake`` when the writer has something to look at.

A message frame goes in as three pieces, never copied until the send joins them::

    [ size: int32 ][ type: int32 = 2 ][ timestamp: int64 ][ attempts: uint16 ][ id: 16 ][ body ]
    \\_________________ MESSAGE_FRAME_PREFIX.pack(...) _________________/        piece 2   piece 3

A message delivered as its plain record (``record``: the frame's payload, with the attempts
before this delivery) is copied once instead, into one ``bytearray`` for the batch
(``record_frames``), its attempts written in place.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from nsq_common import FrameType, append_message_frames

from .packed import PackedBySize

if TYPE_CHECKING:
    from .message import QueuedMessage


def _no_wake() -> None:
    pass


_FRAME_HEAD = struct.Struct(">ii")  # size, frame type
_ATTEMPTS = struct.Struct(">H")
#: The head of a message frame whose payload (a record) is ``size`` bytes, by size.
_heads = PackedBySize(lambda size: _FRAME_HEAD.pack(size + 4, FrameType.MESSAGE))


#: Each byte value plus one (255: 0, never used: a carry is left to the loop).
_PLUS_ONE = bytes(range(1, 256)) + b"\0"


def record_frames(records: Sequence[bytes]) -> bytearray:
    """The message frames of plain records delivered once more: each frame's head, then the
    record with its attempts field one higher (65535 stays), all in one buffer.

    Records of one size (a producer's messages often are) form a grid: joined behind one
    head each, their attempts are read and written a column at a time, in C (the low byte
    through a table, when none of them is 255). Otherwise a loop per record, its head from a
    table by size. In process, 2,500 records of 100 bytes with their in-flight entries:
    385 ns a message by the loop, where making each ``QueuedMessage`` and packing its frame
    took 840; the grid takes the frames from about 230 ns a message to 150.
    """
    n = len(records)
    if n > 1:
        size = len(records[0])
        if min(map(len, records)) == size == max(map(len, records)):
            parts = [_heads[size]] * (2 * n)
            parts[1::2] = records
            grid = bytearray().join(parts)
            low = grid[17 :: size + 8]  # the low byte of each frame's attempts
            if 255 not in low:
                grid[17 :: size + 8] = low.translate(_PLUS_ONE)
                return grid
    out = bytearray()
    heads = _heads
    write_attempts = _ATTEMPTS.pack_into
    at = 16  # the first record's attempts: after the head (8) and the timestamp (8)
    for record in records:
        size = len(record)
        out += heads[size]
        out += record
        attempts = record[8] << 8 | record[9]
        if attempts < 65535:
            write_attempts(out, at, attempts + 1)
        at += size + 8
    return out


class OutputBuffer:
    def __init__(self, size: int, timeout: float, clock: Callable[[], float]) -> None:
        self.size = size  # output_buffer_size (IDENTIFY may change it)
        self.timeout = timeout  # output_buffer_timeout in seconds; 0: every frame at once
        self.clock = clock
        self.out: list[bytes | bytearray] = []
        self.out_bytes = 0
        self.urgent = False  # flush now, whatever the timeout says
        self.flush_at = 0.0  # when the oldest unflushed message frame is due
        self.wake: Callable[[], None] = _no_wake  # set by the connection's writer

    def configure(self, size: int, timeout: float) -> None:
        """The output_buffer_size and output_buffer_timeout (seconds) IDENTIFY negotiated."""
        self.size = size
        self.timeout = timeout

    def wake_with(self, wake: Callable[[], None]) -> None:
        """The connection's writer is woken with ``wake`` when there is something to send."""
        self.wake = wake

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
        self._wake_for_messages(first, client_full)

    def add_records(self, records: Sequence[bytes], client_full: bool) -> None:
        """``add_messages`` of plain records (see ``record_frames``)."""
        first = not self.out
        frames = record_frames(records)
        self.out.append(frames)  # joined with the rest by ``take``
        self.out_bytes += len(frames)
        self._wake_for_messages(first, client_full)

    def _wake_for_messages(self, first: bool, client_full: bool) -> None:
        if self.out_bytes >= self.size or client_full or not self.timeout:
            self.urgent = True
            self.wake()
        elif first:
            self.flush_at = self.clock() + self.timeout
            self.wake()

    def take(self) -> bytes | bytearray:
        """Everything buffered, as one buffer for one send; the buffer is then empty. A
        single piece (the frames of one delivery, usually) is sent as it is, not copied."""
        out = self.out
        data = out[0] if len(out) == 1 else b"".join(out)
        self.out.clear()
        self.out_bytes = 0
        self.urgent = False
        return data

    def flush_due(self, now: float) -> bool:
        return bool(self.out) and (self.urgent or now >= self.flush_at)
