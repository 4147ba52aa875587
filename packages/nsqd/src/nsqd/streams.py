"""Stream wrappers for the connection upgrades IDENTIFY negotiates: snappy and deflate
compression, and the bytes a client sent ahead of an upgrade.

Compression follows nsqd exactly: snappy is the *framed* stream format (a stream identifier,
then chunks with masked CRC-32C), deflate is raw DEFLATE (no zlib header) with a sync flush
each time nsqd flushes its buffer, both in both directions. The codecs come from well-kept
libraries (python-snappy over cramjam, zlib); nothing here encodes a bit by hand.

A peer that sends bytes the decoder cannot take has its connection closed
(``CorruptStream``), and nobody else notices.
"""

from __future__ import annotations

import zlib

import snappy  # type: ignore[import-untyped]  # python-snappy ships no types
import trio

# Never inflate more than this from one read: a small "deflate bomb" cannot blow up memory.
MAX_INFLATE = 1024 * 1024


class CorruptStream(Exception):
    """The compressed stream could not be decoded."""


class PrefixedStream(trio.abc.Stream):
    """``inner`` with ``prefix`` (bytes already read past an upgrade point) handed out first."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self.inner = inner
        self.prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.prefix:
            data, self.prefix = self.prefix, b""
            await trio.lowlevel.checkpoint()
            return data
        return await self.inner.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CompressedStream(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    def _compress(self, data: bytes) -> bytes:
        raise NotImplementedError

    def _decompress(self, data: bytes | bytearray) -> bytes:
        raise NotImplementedError

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if not data:  # an empty flush would put an empty block on the wire
            await trio.lowlevel.checkpoint()
            return
        await self.inner.send_all(self._compress(bytes(data)))

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            out = self._pending()
            if out:
                return out
            raw = await self.inner.receive_some(max_bytes)
            if not raw:
                return b""
            try:
                out = self._decompress(raw)
            except Exception as exc:  # each codec has its own error types
                raise CorruptStream(f"{type(self).__name__}: {exc}") from None
            if out:
                return out

    def _pending(self) -> bytes:
        return b""

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class SnappyStream(_CompressedStream):
    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner)
        self._compressor = snappy.StreamCompressor()
        self._decompressor = snappy.StreamDecompressor()

    def _compress(self, data: bytes) -> bytes:
        out: bytes = self._compressor.add_chunk(data)
        return out

    def _decompress(self, data: bytes | bytearray) -> bytes:
        out: bytes = self._decompressor.decompress(data)
        return out


class DeflateStream(_CompressedStream):
    def __init__(self, inner: trio.abc.Stream, level: int) -> None:
        super().__init__(inner)
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)

    def _compress(self, data: bytes) -> bytes:
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)

    def _decompress(self, data: bytes | bytearray) -> bytes:
        d = self._decompressor
        if d.eof:
            raise CorruptStream("data after the end of the deflate stream")
        return d.decompress(d.unconsumed_tail + data, MAX_INFLATE)

    def _pending(self) -> bytes:
        d = self._decompressor
        if d.unconsumed_tail:
            try:
                return d.decompress(d.unconsumed_tail, MAX_INFLATE)
            except zlib.error as exc:
                raise CorruptStream(f"DeflateStream: {exc}") from None
        return b""
