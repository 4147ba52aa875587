"""A FIN is applied before nsqd answers the next HTTP request that arrives after it, as Go's
nsqd does: a consumer FINs over TCP and at once asks ``/stats`` on another connection, a
thousand times, over a plain connection and over deflate and snappy (where the FIN comes
through a decompressing layer); ``/stats`` shows every FIN every time (the client's
``finish_count``, the channel's ``in_flight_count``).

The consumer side compresses with zlib and python-snappy directly, not with nsqd's code."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
import snappy  # type: ignore[import-untyped]
import trio
from nsq_common import FrameType, commands, split_address
from nsq_testing import HttpConnection, WireClient

ROUNDS = 1000


class Compressed(trio.abc.Stream):
    """The consumer's end of a deflate (raw, sync-flushed) or snappy (framed) stream."""

    def __init__(self, inner: trio.abc.Stream, kind: str, level: int = 6) -> None:
        self.inner = inner
        if kind == "deflate":
            deflate, inflate = zlib.compressobj(level, zlib.DEFLATED, -15), zlib.decompressobj(-15)
            self.compress = lambda data: deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH)
            self.decompress = inflate.decompress
        else:
            out, into = snappy.StreamCompressor(), snappy.StreamDecompressor()
            self.compress, self.decompress = out.add_chunk, into.decompress

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(self.compress(bytes(data)))

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            raw = await self.inner.receive_some(65536)
            if not raw:
                return b""
            data: bytes = self.decompress(raw)
            if data:
                return data

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def exactly(stream: trio.abc.Stream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = await stream.receive_some(n - len(data))
        if not chunk:
            raise EOFError("nsqd closed the connection")
        data += chunk
    return data


async def consumer(address: str, compression: str) -> WireClient:
    """A consumer connection, compressed as asked once IDENTIFY has said so."""
    client = await WireClient.connect(address)
    if compression == "plain":
        return client
    fields = {"deflate": True, "deflate_level": 6} if compression == "deflate" else {
        "snappy": True}
    await client.send(commands.identify({"feature_negotiation": True, **fields}))
    # the reply comes in the clear and the OK after it compressed: read no byte past the reply
    (size,) = struct.unpack(">l", await exactly(client.stream, 4))
    frame = await exactly(client.stream, size)
    assert struct.unpack(">l", frame[:4])[0] == FrameType.RESPONSE
    assert json.loads(frame[4:])[compression] is True
    client.stream = Compressed(client.stream, compression)  # type: ignore[assignment]
    assert await client.response() == b"OK"
    return client


@pytest.mark.parametrize("compression", ["plain", "deflate", "snappy"])
async def test_a_fin_shows_in_the_stats_asked_right_after_it(run_daemon, compression):
    nsqd = run_daemon("nsqd")
    http = await HttpConnection.open(*split_address(nsqd.http_address))
    client = await consumer(nsqd.tcp_address, compression)
    try:
        await client.subscribe("fin_stats", "c", rdy=1)
        late = []
        for n in range(1, ROUNDS + 1):
            assert await http.request("POST", "/pub?topic=fin_stats", b"m%d" % n) == (200, b"OK")
            msg = await client.message()
            assert msg.body == b"m%d" % n
            await client.send(commands.fin(msg.id))  # in nsqd's socket when this returns
            status, body = await http.request(
                "GET", "/stats?format=json&topic=fin_stats&channel=c")
            assert status == 200
            (channel,) = json.loads(body)["topics"][0]["channels"]
            (seen,) = channel["clients"]
            if (seen["finish_count"], seen["in_flight_count"],
                    channel["in_flight_count"]) != (n, 0, 0):
                late.append((n, seen["finish_count"], channel["in_flight_count"]))
        assert late == []
    finally:
        await client.aclose()
        await http.aclose()
