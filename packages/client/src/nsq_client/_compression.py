"""The two stream compressions nsqd can negotiate after IDENTIFY.

* deflate: raw DEFLATE (RFC 1951, no zlib header: ``wbits=-15``) in both directions; every
  write ends with a sync flush (``00 00 ff ff``) so nsqd can decode it without waiting.
* snappy: the snappy *framing* format (stream identifier, then checksummed chunks), as
  python-snappy's ``StreamCompressor`` / ``StreamDecompressor`` speak it. python-snappy is
  optional; asking for snappy without it fails at connect time.

Both keep state across calls, so one codec object serves one connection for its life.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol


class Codec(Protocol):
    name: str

    def compress(self, data: bytes) -> bytes: ...

    def decompress(self, data: bytes) -> bytes: ...


class Deflate:
    name = "deflate"

    def __init__(self, level: int) -> None:
        self._out = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._in = zlib.decompressobj(-15)

    def compress(self, data: bytes) -> bytes:
        return self._out.compress(data) + self._out.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes) -> bytes:
        return self._in.decompress(data)


class Snappy:
    name = "snappy"

    def __init__(self) -> None:
        snappy = _import_snappy()
        self._out: Any = snappy.StreamCompressor()
        self._in: Any = snappy.StreamDecompressor()

    def compress(self, data: bytes) -> bytes:
        return bytes(self._out.add_chunk(bytes(data)))

    def decompress(self, data: bytes) -> bytes:
        return bytes(self._in.decompress(data))


def _import_snappy() -> Any:
    try:
        import snappy  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("snappy compression needs the python-snappy package") from exc
    return snappy


def snappy_available() -> bool:
    try:
        _import_snappy()
    except RuntimeError:
        return False
    return True
