"""The two stream compressions nsqd can negotiate after IDENTIFY.

* deflate: raw DEFLATE (RFC 1951, no zlib header: ``wbits=-15``) in both directions; every
  write ends with a sync flush (``00 00 ff ff``) so nsqd can decode it without waiting.
* snappy: the snappy *framing* format (stream identifier, then checksummed chunks), as
  python-snappy's ``StreamCompressor`` / ``StreamDecompressor`` speak it. python-snappy is
  optional; asking for snappy without it fails at connect time.

Both keep state across calls, so one codec object serves one connection for its life.

Inflating is bounded, as nsqd bounds its own: deflate reaches about 1000:1, so a hostile or
broken server could turn one read of 64 KiB into 64 MB. One ``decompress`` call gives at most
``INFLATE_LIMIT`` bytes; the rest of what was received stays inside zlib and comes out of
``pending()``, which the connection calls before it reads the socket again (after it parsed
what came before). With the connection's cap on one frame, what a compressed connection
holds stays bounded however well the stream compresses.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

# The most one inflate call gives (a multiple of the 64 KiB the connection reads at a time).
INFLATE_LIMIT = 1 << 20


class CompressionError(ValueError):
    """nsqd's compressed stream cannot be decoded: the connection is failed."""


class Codec(Protocol):
    name: str

    def compress(self, data: bytes) -> bytes: ...

    def decompress(self, data: bytes) -> bytes: ...

    def pending(self) -> bytes:
        """More of what was already received, held back by the inflate limit (or b"")."""
        ...


class Deflate:
    name = "deflate"

    def __init__(self, level: int) -> None:
        self._out = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._in = zlib.decompressobj(-15)
        self._more = False  # the last call stopped at the limit: zlib may hold more output

    def compress(self, data: bytes) -> bytes:
        return self._out.compress(data) + self._out.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes) -> bytes:
        """At most INFLATE_LIMIT bytes; the rest waits in zlib for ``pending()``.

        Raises:
            CompressionError: not a raw deflate stream, or data after its end.
        """
        inflate = self._in
        if inflate.eof:
            raise CompressionError("deflate: data after the end of the compressed stream")
        tail = inflate.unconsumed_tail
        try:
            out = inflate.decompress(tail + data if tail else data, INFLATE_LIMIT)
        except zlib.error as exc:
            raise CompressionError(f"deflate: {exc}") from None
        self._more = len(out) == INFLATE_LIMIT
        return out

    def pending(self) -> bytes:
        return self.decompress(b"") if self._more else b""


class Snappy:
    name = "snappy"

    def __init__(self) -> None:
        snappy = _import_snappy()
        self._out: Any = snappy.StreamCompressor()
        self._in: Any = snappy.StreamDecompressor()

    def compress(self, data: bytes) -> bytes:
        return bytes(self._out.add_chunk(bytes(data)))

    def decompress(self, data: bytes) -> bytes:
        # snappy's framing caps a chunk at 64 KiB and its ratio at about 20:1: no bomb
        try:
            return bytes(self._in.decompress(data))
        except Exception as exc:  # python-snappy's own error types
            raise CompressionError(f"snappy: {exc}") from None

    def pending(self) -> bytes:
        return b""


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
