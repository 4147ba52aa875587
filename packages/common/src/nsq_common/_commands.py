"""Commands, client to server (protocol V2): the encoders a client uses.

::

    NAME[ param]...\\n                         (no body)
    NAME[ param]...\\n[ size: uint32 BE ][ body ]   IDENTIFY, AUTH, PUB, DPUB
    MPUB topic\\n[ size ][ count: uint32 BE ]([ size ][ message ])*count
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from ._gostr import go_json

_SIZE = struct.Struct(">I")
NOP = b"NOP\n"
CLS = b"CLS\n"


def _text(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _with_body(line: bytes, body: bytes) -> bytes:
    return line + _SIZE.pack(len(body)) + body


def identify(data: Mapping[str, Any]) -> bytes:
    return _with_body(b"IDENTIFY\n", go_json(dict(data)))


def auth(secret: str | bytes) -> bytes:
    return _with_body(b"AUTH\n", _text(secret))


def sub(topic: str, channel: str) -> bytes:
    return b"SUB %s %s\n" % (_text(topic), _text(channel))


def pub(topic: str, body: bytes) -> bytes:
    return _with_body(b"PUB %s\n" % _text(topic), body)


def dpub(topic: str, delay_ms: int, body: bytes) -> bytes:
    return _with_body(b"DPUB %s %d\n" % (_text(topic), delay_ms), body)


def mpub_body(bodies: Iterable[bytes]) -> bytes:
    items = list(bodies)
    parts = [_SIZE.pack(len(items))]
    for body in items:
        parts.append(_SIZE.pack(len(body)))
        parts.append(body)
    return b"".join(parts)


def mpub(topic: str, bodies: Iterable[bytes]) -> bytes:
    return _with_body(b"MPUB %s\n" % _text(topic), mpub_body(bodies))


def rdy(count: int) -> bytes:
    return b"RDY %d\n" % count


def fin(message_id: bytes) -> bytes:
    return b"FIN %s\n" % message_id


def req(message_id: bytes, delay_ms: int) -> bytes:
    return b"REQ %s %d\n" % (message_id, delay_ms)


def touch(message_id: bytes) -> bytes:
    return b"TOUCH %s\n" % message_id


def nop() -> bytes:
    return NOP


def cls() -> bytes:
    return CLS
