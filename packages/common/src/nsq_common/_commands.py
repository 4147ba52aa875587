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

from ._gojson import go_json

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


# PUB and MPUB are on a publisher's hot path: the ``PUB <topic>\n`` / ``MPUB <topic>\n`` line is
# made once per topic, and an MPUB's size prefixes without a Python-level loop over its messages.
_LINES_KEPT = 1024  # topics whose command lines are kept (and body sizes whose prefixes are)
_pub_lines: dict[str | bytes, bytes] = {}
_mpub_lines: dict[str | bytes, bytes] = {}


class _SizePrefixes(dict[int, bytes]):
    """Body size -> its 4-byte prefix, made on first use (a lookup is cheaper than a pack)."""

    def __missing__(self, size: int) -> bytes:
        if len(self) >= _LINES_KEPT:
            self.clear()
        prefix = self[size] = _SIZE.pack(size)
        return prefix


_size_prefixes = _SizePrefixes()


def _line(cache: dict[str | bytes, bytes], topic: str | bytes, line: bytes) -> bytes:
    if len(cache) >= _LINES_KEPT:
        cache.clear()
    cache[topic] = line
    return line


def pub(topic: str | bytes, body: bytes) -> bytes:
    line = _pub_lines.get(topic) or _line(_pub_lines, topic, b"PUB %s\n" % _text(topic))
    return line + _SIZE.pack(len(body)) + body


def dpub(topic: str, delay_ms: int, body: bytes) -> bytes:
    return _with_body(b"DPUB %s %d\n" % (_text(topic), delay_ms), body)


def mpub_body(bodies: Iterable[bytes]) -> bytes:
    """``[count]`` then ``[size][message]`` for each message."""
    items = bodies if type(bodies) is list else list(bodies)
    n = len(items)
    if not n:
        return _SIZE.pack(0)
    sizes = list(map(len, items))
    if sizes.count(sizes[0]) == n:
        # All the same size (common for batches): the prefixes are one separator.
        prefix = _SIZE.pack(sizes[0])
        return _SIZE.pack(n) + prefix + prefix.join(items)
    parts: list[bytes] = [b""] * (2 * n)
    parts[0::2] = map(_size_prefixes.__getitem__, sizes)
    parts[1::2] = items
    return _SIZE.pack(n) + b"".join(parts)


def mpub(topic: str | bytes, bodies: Iterable[bytes]) -> bytes:
    line = _mpub_lines.get(topic) or _line(_mpub_lines, topic, b"MPUB %s\n" % _text(topic))
    body = mpub_body(bodies)
    return line + _SIZE.pack(len(body)) + body


def rdy(count: int) -> bytes:
    return b"RDY %d\n" % count


def fin(message_id: bytes) -> bytes:
    return b"FIN %s\n" % message_id


def fins(message_ids: list[bytes]) -> bytes:
    """``FIN`` of each id (at least one), one C-level join for a batch."""
    return b"FIN " + b"\nFIN ".join(message_ids) + b"\n"


def req(message_id: bytes, delay_ms: int) -> bytes:
    return b"REQ %s %d\n" % (message_id, delay_ms)


def touch(message_id: bytes) -> bytes:
    return b"TOUCH %s\n" % message_id


def nop() -> bytes:
    return NOP


def cls() -> bytes:
    return CLS
