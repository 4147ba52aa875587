"""The message format, as sent in a message frame and stored on disk.

::

    [ timestamp: int64 BE, ns since the epoch ][ attempts: uint16 BE ][ id: 16 ASCII hex ][ body ]
      0                                          8                       10                  26

A message frame is the 8-byte frame header (size, type 2) followed by these 26 bytes and the
body, so a server emits a whole frame with one ``struct.pack`` plus the id and body, and a
client reads everything but the body with one ``unpack_from`` (``MESSAGE_FRAME_HEAD``)::

    [ size: int32 ][ type: int32 = 2 ][ timestamp ][ attempts ][ id ][ body ]
      0              4                  8            16          18    34
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Protocol

import attrs

MESSAGE_HEADER = struct.Struct(">qH")
MESSAGE_HEADER_SIZE = 26
MESSAGE_ID_LENGTH = 16
# size, frame type, timestamp, attempts: everything of a message frame before its id.
MESSAGE_FRAME_PREFIX = struct.Struct(">iiqH")
# ... and with its id: everything before the body.
MESSAGE_FRAME_HEAD = struct.Struct(">iiqH16s")
FRAME_TYPE_MESSAGE = 2
# A frame's size field counts its type (4 bytes) and the message header before the body.
_FRAME_OVERHEAD = 4 + MESSAGE_HEADER_SIZE


@attrs.frozen
class WireMessage:
    """A message decoded from the wire or a disk record: its four fields, no behaviour.

    (The client's ``nsq_client.Message`` is a delivered message that can be answered; nsqd's
    own message object carries its delivery state.)
    """

    timestamp: int
    attempts: int
    id: bytes
    body: bytes


class MessageFields(Protocol):
    """Anything with a message's four fields (nsqd's messages, ``WireMessage``)."""

    @property
    def timestamp(self) -> int: ...
    @property
    def attempts(self) -> int: ...
    @property
    def id(self) -> bytes: ...
    @property
    def body(self) -> bytes: ...


def encode_message(timestamp: int, attempts: int, message_id: bytes, body: bytes) -> bytes:
    """The 26-byte header and the body (the frame payload and the disk record)."""
    return MESSAGE_HEADER.pack(timestamp, attempts) + message_id + body


def encode_message_frame(timestamp: int, attempts: int, message_id: bytes, body: bytes) -> bytes:
    """A whole message frame, ready for the socket."""
    return (MESSAGE_FRAME_PREFIX.pack(_FRAME_OVERHEAD + len(body), FRAME_TYPE_MESSAGE,
                                      timestamp, attempts)
            + message_id + body)


def append_message_frames(out: list[bytes | bytearray], messages: Iterable[MessageFields]) -> int:
    """Append each message's frame to ``out`` as three pieces (the packed prefix, the id, the
    body: no copy of the body) and return the frames' total size in bytes.

    For a server's output buffer: the pieces leave in one ``b"".join`` or ``writelines``.
    """
    append = out.append
    pack = MESSAGE_FRAME_PREFIX.pack
    size = 0
    for msg in messages:
        body = msg.body
        append(pack(_FRAME_OVERHEAD + len(body), FRAME_TYPE_MESSAGE, msg.timestamp, msg.attempts))
        append(msg.id)
        append(body)
        size += 4 + _FRAME_OVERHEAD + len(body)
    return size


def decode_message(data: bytes) -> WireMessage:
    """Parse a message frame's payload (or a disk record).

    Raises:
        ValueError: fewer than 26 bytes.
    """
    if len(data) < MESSAGE_HEADER_SIZE:
        raise ValueError(f"not enough data to decode valid message ({len(data)} bytes)")
    timestamp, attempts = MESSAGE_HEADER.unpack_from(data)
    return WireMessage(timestamp, attempts, bytes(data[10:26]), bytes(data[26:]))
