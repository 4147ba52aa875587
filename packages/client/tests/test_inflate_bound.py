"""The client bounds what it inflates from nsqd's deflate stream, as nsqd bounds its own: a
server whose stream compresses enormously (deflate reaches about 1000:1) gets bounded pieces
out of each read, and a frame beyond the cap fails the connection with a clear error instead
of growing without end."""

import struct
import zlib
from typing import Any

import pytest
import trio
from nsq_client import Config
from nsq_client._compression import INFLATE_LIMIT, CompressionError, Deflate
from nsq_client._conn import Connection

A = "10.0.0.1:4150"


def deflated(data: bytes) -> bytes:
    out = zlib.compressobj(9, zlib.DEFLATED, -15)
    return out.compress(data) + out.flush(zlib.Z_SYNC_FLUSH)


def test_one_call_inflates_at_most_the_limit_and_the_rest_comes_out_of_pending():
    total = 64 * INFLATE_LIMIT  # 64 MiB of zeros: about 64 KiB on the wire
    bomb = deflated(bytes(total))
    assert len(bomb) < total // 500
    codec = Deflate(6)
    got = len(codec.decompress(bomb))
    assert got == INFLATE_LIMIT
    while more := codec.pending():
        assert len(more) <= INFLATE_LIMIT
        got += len(more)
    assert got == total
    # the stream goes on after the held-back part
    assert codec.decompress(deflated(b"")) == b""


def test_small_pieces_come_out_whole_at_once():
    codec = Deflate(6)
    out = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = b"hello nsq" * 100
    wire = out.compress(data) + out.flush(zlib.Z_SYNC_FLUSH)
    assert codec.decompress(wire[:10]) + codec.decompress(wire[10:]) == data
    assert codec.pending() == b""


def test_garbage_is_a_compression_error():
    with pytest.raises(CompressionError, match=r"^deflate: "):
        Deflate(6).decompress(b"\xff" * 64)
    finished = zlib.compressobj(6, zlib.DEFLATED, -15)
    codec = Deflate(6)
    codec.decompress(finished.compress(b"x") + finished.flush())  # Z_FINISH: the stream ends
    with pytest.raises(CompressionError, match="after the end"):
        codec.decompress(b"more")


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.closed = trio.Event()

    def on_messages(self, conn: Any, messages: list[Any]) -> None:
        self.bodies.extend(m.body for m in messages)

    def on_response(self, conn: Any, data: bytes) -> None:
        pass

    def on_ok(self, conn: Any, count: int) -> None:
        pass

    def on_error(self, conn: Any, error: Any) -> None:
        pass

    def on_answered(self, conn: Any, signal: Any) -> None:
        pass

    def on_finished(self, conn: Any) -> None:
        pass

    def on_close(self, conn: Any) -> None:
        self.closed.set()


async def deflate_connection(fake_cluster: Any, nursery: trio.Nursery, **options: Any):
    fake_cluster[A].deflate = True
    handler = Recorder()
    conn = Connection(A, Config(deflate=True, **options), handler, fake_cluster.connector)
    await conn.connect()
    await nursery.start(conn.run)
    return conn, handler, fake_cluster[A].conn


async def test_a_frame_beyond_the_cap_fails_the_connection(fake_cluster: Any, nursery):
    conn, handler, server = await deflate_connection(fake_cluster, nursery)
    # a message frame that claims 2 GB, then zeros that compress 1000:1
    await server.send(struct.pack(">ii", 0x7FFFFFF0, 2) + bytes(8 * INFLATE_LIMIT))
    with trio.fail_after(10):
        await handler.closed.wait()
    assert "frame size 2147483632 out of range (at most 67108864)" in str(conn.error)
    assert handler.bodies == []


async def test_max_msg_size_sets_the_cap(fake_cluster: Any, nursery):
    conn, handler, server = await deflate_connection(fake_cluster, nursery, max_msg_size=1000)
    await server.send_message(b"0" * 16, b"x" * 1000)
    await server.send_message(b"1" * 16, b"y" * 1001)
    with trio.fail_after(10):
        await handler.closed.wait()
    assert handler.bodies == [b"x" * 1000]
    assert "frame size 1031 out of range (at most 1030)" in str(conn.error)


async def test_large_compressible_messages_still_arrive_whole(fake_cluster: Any, nursery):
    conn, handler, server = await deflate_connection(fake_cluster, nursery)
    bodies = [bytes(5 * INFLATE_LIMIT), b"a" * (3 * INFLATE_LIMIT + 7), b"small"]
    for i, body in enumerate(bodies):
        await server.send_message(b"%016d" % i, body)
    with trio.fail_after(10):
        while len(handler.bodies) < 3:
            await trio.sleep(0.01)
    assert handler.bodies == bodies
    assert conn.error is None
    conn.close()
