"""The plain-TCP path of a connection (raw socket reads and writes, a lone publish reading
its own answer) against the scripted nsqd over real loopback sockets."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from nsq_client import ConnectionClosed, Consumer, Producer, PublishError
from nsq_common import encode_message_frame

A, B = "10.0.0.1:4150", "10.0.0.2:4150"


def link_conn(producer: Producer, address: str = A) -> Any:
    conn = producer.connection(address)
    assert conn is not None and conn.raw_socket, "not on the plain-socket path"
    return conn


@asynccontextmanager
async def answers_held(tcp_cluster: Any, first: bytes) -> AsyncIterator[tuple[Any, Producer]]:
    """A producer connected to A by publishing ``first``; A then holds its answers."""
    nsqd = tcp_cluster[A]
    async with Producer(A, connector=tcp_cluster.connector) as p:
        await p.pub("t", first)
        nsqd.hold_responses = True
        yield nsqd, p


async def test_stop_and_wait_publishes_are_answered_in_order(tcp_cluster: Any) -> None:
    async with Producer(A, connector=tcp_cluster.connector) as p:
        for i in range(200):
            await p.pub("t", b"%d" % i)
            await p.mpub("t", [b"a%d" % i, b"b%d" % i])
        conn = link_conn(p)
        assert not conn.caller_reading and not p.unanswered(A)
    published = tcp_cluster[A].published
    assert len(published) == 400
    assert published[-2] == (b"PUB", [b"t"], b"199")


async def test_a_heartbeat_while_the_caller_reads_is_answered(tcp_cluster: Any) -> None:
    async with answers_held(tcp_cluster, b"connect") as (nsqd, p):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(p.pub, "t", b"held")
            await tcp_cluster.wait_for(lambda: len(nsqd.published) == 2)
            assert link_conn(p).caller_reading  # the publishing task is reading the socket
            await nsqd.conn.heartbeat()
            await tcp_cluster.wait_for(lambda: b"NOP" in nsqd.conn.names())
            await nsqd.conn.release()
        assert not link_conn(p).caller_reading


async def test_a_cancelled_caller_leaves_its_answer_to_the_reader(tcp_cluster: Any) -> None:
    async with answers_held(tcp_cluster, b"connect") as (nsqd, p):
        caller = trio.CancelScope()

        async def give_up() -> None:
            with caller:
                await p.pub("t", b"given up")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(give_up)
            # nsqd has the publish and holds its answer; the caller reads the socket for it
            await tcp_cluster.wait_for(lambda: len(nsqd.published) == 2 and link_conn(p).caller_reading)
            caller.cancel()
        assert caller.cancelled_caught
        conn = link_conn(p)
        assert p.unanswered(A) == 1 and not conn.caller_reading
        await nsqd.conn.release()  # the reader task takes this OK
        await tcp_cluster.wait_for(lambda: not p.unanswered(A))
        nsqd.hold_responses = False
        await p.pub("t", b"after")
        assert conn is p.connection(A) and not p.unanswered(A)
    assert [body for _, _, body in nsqd.published] == [b"connect", b"given up", b"after"]


async def test_an_error_frame_read_by_the_caller_raises_its_code(tcp_cluster: Any) -> None:
    nsqd = tcp_cluster[A]
    nsqd.pub_error = lambda name, params, body: (
        b"E_BAD_TOPIC PUB topic name \"t!\" is not valid" if params[0] == b"t!" else None)
    async with Producer(A, connector=tcp_cluster.connector) as p:
        await p.pub("t", b"ok")
        with pytest.raises(PublishError) as caught:
            await p.pub("t!", b"x")
        assert caught.value.code == "E_BAD_TOPIC"


async def test_nsqd_closing_while_the_caller_reads_fails_over(tcp_cluster: Any) -> None:
    a, b = tcp_cluster[A], tcp_cluster[B]
    async with Producer([A, B], strategy="failover", connector=tcp_cluster.connector) as p:
        await p.pub("t", b"first")
        a.hold_responses = True
        async with trio.open_nursery() as nursery:
            nursery.start_soon(p.pub, "t", b"second")
            await tcp_cluster.wait_for(lambda: len(a.published) == 2)
            assert link_conn(p).caller_reading
            a.down = True
            await a.conn.close()
        # Sent again to B once A's connection was gone; answered there.
    assert [body for _, _, body in b.published] == [b"second"]


async def test_nsqd_closing_while_the_only_caller_reads_raises(tcp_cluster: Any) -> None:
    async with answers_held(tcp_cluster, b"first") as (nsqd, p), trio.open_nursery() as nursery:
        async def close_soon() -> None:
            await tcp_cluster.wait_for(lambda: len(nsqd.published) == 2)
            assert link_conn(p).caller_reading
            nsqd.down = True
            await nsqd.conn.close()
        nursery.start_soon(close_soon)
        with pytest.raises(ConnectionClosed):
            await p.pub("t", b"lost")


async def test_concurrent_publishers_share_the_connection(tcp_cluster: Any) -> None:
    done: list[int] = []
    async with Producer(A, connector=tcp_cluster.connector) as p:
        async with trio.open_nursery() as nursery:
            for i in range(100):
                async def one(i: int = i) -> None:
                    for j in range(5):
                        await p.pub("t", b"%d.%d" % (i, j))
                    done.append(i)
                nursery.start_soon(one)
        assert not p.unanswered(A)
    assert sorted(done) == list(range(100))
    assert len(tcp_cluster[A].published) == 500


async def test_frames_split_across_reads_are_put_together(tcp_cluster: Any) -> None:
    nsqd = tcp_cluster[A]
    big = bytes(range(256)) * 1024  # larger than one 64 KiB read
    frames = (encode_message_frame(1, 1, b"1" * 16, b"small")
              + encode_message_frame(2, 1, b"2" * 16, big)
              + encode_message_frame(3, 1, b"3" * 16, b"last"))
    # Pieces cut inside a frame header, inside a message header and inside the big body.
    cuts = [3, 40, 50, 70_000, len(frames) - 5, len(frames)]
    received = []
    async with Consumer("t", "c", nsqd_tcp_addresses=[A], connector=tcp_cluster.connector,
                        max_in_flight=10) as c:
        await tcp_cluster.wait_for(lambda: nsqd.conns and nsqd.conn.rdy == 10)
        start = 0
        for cut in cuts:
            await nsqd.conn.send(frames[start:cut])
            start = cut
            await trio.testing.wait_all_tasks_blocked()  # this piece read before the next is sent
        async for msg in c:
            received.append((msg.id, msg.body))
            if len(received) == 3:
                break
    assert received == [(b"1" * 16, b"small"), (b"2" * 16, big), (b"3" * 16, b"last")]
