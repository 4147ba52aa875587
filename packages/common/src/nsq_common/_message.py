"""The message format, as sent in a message frame and stored on disk.

::

    [ timestamp: int64 BE, ns since the epoch ][ attempts: uint16 BE ][ id: 16 ASCII hex ][ body ]
      0                                          8                       10                  26

The message frame is the 8-byte frame header (size, type 2) followed by these 26 bytes and
the body, so a server can emit a whole frame with one ``struct.pack`` plus the id and body.
"""

from __future__ import annotations

import struct

import attrs

MESSAGE_HEADER = struct.Struct(">qH")
MESSAGE_HEADER_SIZE = 26
MESSAGE_ID_LENGTH = 16
# size, frame type, timestamp, attempts: everything of a message frame before its id.
MESSAGE_FRAME_PREFIX = struct.Struct(">iiqH")
FRAME_TYPE_MESSAGE = 2


@attrs.frozen
class Message:
    """A decoded message: what a consumer receives."""

    timestamp: int
    attempts: int
    id: bytes
    body: bytes


def encode_message(timestamp: int, attempts: int, message_id: bytes, body: bytes) -> bytes:
    """The 26-byte header and the body (the frame payload and the disk record)."""
    return MESSAGE_HEADER.pack(timestamp, attempts) + message_id + body


def encode_message_frame(timestamp: int, attempts: int, message_id: bytes, body: bytes) -> bytes:
    """A whole message frame, ready for the socket."""
    return (MESSAGE_FRAME_PREFIX.pack(30 + len(body), FRAME_TYPE_MESSAGE, timestamp, attempts)
            + message_id + body)


def decode_message(data: bytes) -> Message:
    """Parse a message frame's payload.

    Raises:
        ValueError: fewer than 26 bytes.
    """
    if len(data) < MESSAGE_HEADER_SIZE:
        raise ValueError(f"not enough data to decode valid message ({len(data)} bytes)")
    timestamp, attempts = MESSAGE_HEADER.unpack_from(data)
    return Message(timestamp, attempts, bytes(data[10:26]), bytes(data[26:]))
