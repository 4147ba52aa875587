"""Frames, server to client (protocol V2).

::

    [ size: uint32 BE ][ frame type: int32 BE ][ data: size - 4 bytes ]
                         0 = response, 1 = error, 2 = message

Responses and errors carry text (``OK``, ``_heartbeat_``, ``CLOSE_WAIT``, JSON, or
``<CODE> <description>``); message frames carry an encoded message (see ``_message``).
"""

from __future__ import annotations

import enum
import struct

FRAME_HEADER = struct.Struct(">ii")
MAGIC_V2 = b"  V2"
HEARTBEAT = b"_heartbeat_"


class FrameType(enum.IntEnum):
    RESPONSE = 0
    ERROR = 1
    MESSAGE = 2


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """One frame: size, type, data."""
    return FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def encode_response(data: bytes) -> bytes:
    return encode_frame(FrameType.RESPONSE, data)


def encode_error(text: bytes) -> bytes:
    return encode_frame(FrameType.ERROR, text)


OK_FRAME = encode_response(b"OK")
HEARTBEAT_FRAME = encode_response(HEARTBEAT)
CLOSE_WAIT_FRAME = encode_response(b"CLOSE_WAIT")


class FrameTooBig(Exception):
    """A frame declared larger than the decoder's limit."""


class FrameDecoder:
    """Incremental frame parser for the client side: feed bytes, take whole frames.

    Partial frames stay buffered; several frames in one chunk come out one by one.
    """

    def __init__(self, max_size: int = 0) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._max_size = max_size

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next complete ``(frame type, data)``, or None when more bytes are needed.

        Raises:
            FrameTooBig: the declared size exceeds ``max_size`` (when set) or is below 4.
        """
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 8:
            return None
        size, frame_type = FRAME_HEADER.unpack_from(buf, pos)
        if size < 4 or (self._max_size and size > self._max_size):
            raise FrameTooBig(f"frame size {size} out of range")
        end = pos + 4 + size
        if len(buf) < end:
            return None
        data = bytes(buf[pos + 8 : end])
        self._pos = end
        return frame_type, data

    def frames(self) -> list[tuple[int, bytes]]:
        """Every complete frame buffered now."""
        out = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out
