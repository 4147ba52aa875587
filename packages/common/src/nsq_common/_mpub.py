"""MPUB bodies: ``[count: int32 BE]`` then ``count`` times ``[size: int32 BE][message]``.

The same layout is the binary mode of nsqd's HTTP ``/mpub``.
"""

from __future__ import annotations

import struct

from ._errors import ErrorCode, ProtocolError

_INT = struct.Struct(">i")


def decode_mpub_body(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    """Split an MPUB body into message bodies, checking it as nsqd does.

    Raises:
        ProtocolError: E_BAD_BODY for the count, E_BAD_MESSAGE for a message (NSQ's texts).
    """
    total = len(body)
    if total < 4:
        raise ProtocolError(ErrorCode.E_BAD_BODY, "MPUB failed to read message count")
    (count,) = _INT.unpack_from(body, 0)
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise ProtocolError(ErrorCode.E_BAD_BODY, f"MPUB invalid message count {count}")
    unpack = _INT.unpack_from
    out = []
    append = out.append
    pos = 4
    for i in range(count):
        if total - pos < 4:
            raise ProtocolError(ErrorCode.E_BAD_MESSAGE, f"MPUB failed to read message({i}) body size")
        (size,) = unpack(body, pos)
        pos += 4
        if size <= 0:
            raise ProtocolError(ErrorCode.E_BAD_MESSAGE, f"MPUB invalid message({i}) body size {size}")
        if size > max_msg_size:
            raise ProtocolError(ErrorCode.E_BAD_MESSAGE, f"MPUB message too big {size} > {max_msg_size}")
        end = pos + size
        if end > total:
            raise ProtocolError(ErrorCode.E_BAD_MESSAGE, "MPUB failed to read message body")
        append(body[pos:end])
        pos = end
    return out
