import struct
from typing import Any

import pytest
import trio
import trio.testing
from nsq_client import ConnectError, ConnectionClosed, Producer, PublishError

A, B = "10.0.0.1:4150", "10.0.0.2:4150"


async def test_pub_mpub_dpub_put_nsqs_bytes_on_the_wire(fake_cluster: Any) -> None:
    async with Producer(A, connector=fake_cluster.connector) as p:
        await p.pub("t", b"hello")
        await p.mpub("t", [b"a", b"bc"])
        await p.dpub("t", 1.5, b"later")
    published = fake_cluster[A].published
    assert published[0] == (b"PUB", [b"t"], b"hello")
    assert published[1] == (b"MPUB", [b"t"], struct.pack(">I", 2) + b"\0\0\0\x01a\0\0\0\x02bc")
    assert published[2] == (b"DPUB", [b"t", b"1500"], b"later")
    assert fake_cluster[A].conn.names()[0] == b"IDENTIFY"


async def test_connects_lazily_once(fake_cluster: Any) -> None:
    async with Producer(A, connector=fake_cluster.connector) as p:
        assert fake_cluster[A].conns == []
        await p.pub("t", b"1")
        await p.pub("t", b"2")
    assert len(fake_cluster[A].conns) == 1


async def test_concurrent_publishes_share_one_round_trip(fake_cluster: Any) -> None:
    nsqd = fake_cluster[A]
    nsqd.hold_responses = True
    done = []
    async with Producer(A, connector=fake_cluster.connector) as p, trio.open_nursery() as nursery:
        for i in range(50):
            async def one(i: int = i) -> None:
                await p.pub("t", b"%d" % i)
                done.append(i)
            nursery.start_soon(one)
        # all fifty are on the wire before nsqd has answered any
        await fake_cluster.wait_for(lambda: len(nsqd.published) == 50)
        assert done == []
        await nsqd.conn.release()
    assert sorted(done) == list(range(50))
    assert len(nsqd.conns) == 1


async def test_pipeline_keeps_at_most_max_pending_unanswered(fake_cluster: Any) -> None:
    nsqd = fake_cluster[A]
    nsqd.hold_responses = True
    async with Producer(A, connector=fake_cluster.connector) as p, trio.open_nursery() as nursery:
        async def publish() -> None:
            async with p.pipeline(max_pending=10) as pl:
                for i in range(25):
                    await pl.pub("t", b"%d" % i)
        nursery.start_soon(publish)
        for expected in (10, 20, 25):
            await fake_cluster.wait_for(lambda e=expected: len(nsqd.published) == e)
            await trio.testing.wait_all_tasks_blocked()  # the publisher can go no further
            assert len(nsqd.published) == expected
            await nsqd.conn.release()
    assert len(nsqd.published) == 25


async def test_error_frame_raises_publish_error_with_the_code(fake_cluster: Any) -> None:
    nsqd = fake_cluster[A]
    nsqd.pub_error = lambda name, params, body: (
        b"E_BAD_MESSAGE PUB invalid message body size 0" if body == b"bad" else None)
    async with Producer(A, connector=fake_cluster.connector) as p:
        with pytest.raises(PublishError) as info:
            await p.pub("t", b"bad")
        assert info.value.code == "E_BAD_MESSAGE"
        assert info.value.description == "PUB invalid message body size 0"
        # the connection was closed by nsqd (fatal error): the next publish reconnects
        await p.pub("t", b"good")
    assert len(nsqd.conns) == 2


async def test_pipelined_requests_behind_a_fatal_error_are_sent_again(fake_cluster: Any) -> None:
    nsqd = fake_cluster[A]
    nsqd.pub_error = lambda name, params, body: b"E_BAD_TOPIC bad topic" if params == [b"bad"] else None
    async with Producer(A, connector=fake_cluster.connector) as p:
        pl = p.pipeline(100)
        await pl.pub("good", b"1")
        await pl.pub("bad", b"2")
        await pl.pub("good", b"3")
        with pytest.raises(PublishError) as info:
            await pl.flush()
        assert info.value.code == "E_BAD_TOPIC"
        await fake_cluster.wait_for(lambda: [b for _, _, b in nsqd.published].count(b"3") == 1)
    assert [b for _, params, b in nsqd.published if params == [b"good"]] == [b"1", b"3"]


async def test_round_robin_spreads_over_the_pool(fake_cluster: Any) -> None:
    async with Producer([A, B], connector=fake_cluster.connector) as p:
        for i in range(10):
            await p.pub("t", b"%d" % i)
    assert len(fake_cluster[A].published) == 5
    assert len(fake_cluster[B].published) == 5


async def test_failover_skips_an_unreachable_nsqd(fake_cluster: Any, autojump_clock: Any) -> None:
    fake_cluster[A].down = True
    async with Producer([A, B], strategy="failover", connector=fake_cluster.connector) as p:
        for i in range(4):
            await p.pub("t", b"%d" % i)
        assert len(fake_cluster[B].published) == 4
        # A comes back; failover sticks with B until B fails
        fake_cluster[A].down = False
        await trio.sleep(5)
        await p.pub("t", b"x")
        assert len(fake_cluster[B].published) == 5
        fake_cluster[B].down = True
        await fake_cluster[B].conn.close()
        await p.pub("t", b"y")
    assert [b for _, _, b in fake_cluster[A].published] == [b"y"]


async def test_round_robin_returns_to_a_recovered_nsqd(fake_cluster: Any, autojump_clock: Any) -> None:
    fake_cluster[A].down = True
    async with Producer([A, B], connector=fake_cluster.connector) as p:
        for _ in range(4):
            await p.pub("t", b"x")
        assert len(fake_cluster[B].published) == 4
        fake_cluster[A].down = False
        await trio.sleep(2)  # past the 1 s retry delay
        for _ in range(4):
            await p.pub("t", b"x")
    assert len(fake_cluster[A].published) == 2


async def test_publishes_lost_with_a_connection_go_to_another_nsqd(fake_cluster: Any) -> None:
    fake_cluster[A].hold_responses = True
    async with (Producer([A, B], strategy="failover", connector=fake_cluster.connector) as p,
                trio.open_nursery() as nursery):
        for i in range(3):
            nursery.start_soon(p.pub, "t", b"%d" % i)
        await fake_cluster.wait_for(lambda: len(fake_cluster[A].published) == 3)
        fake_cluster[A].down = True
        await fake_cluster[A].conn.close()
    assert sorted(b for _, _, b in fake_cluster[B].published) == [b"0", b"1", b"2"]


async def test_pub_failed_is_retried_elsewhere(fake_cluster: Any) -> None:
    fake_cluster[A].pub_error = lambda *_: b"E_PUB_FAILED PUB failed exiting"
    async with Producer([A, B], strategy="failover", connector=fake_cluster.connector) as p:
        await p.pub("t", b"x")
    assert [b for _, _, b in fake_cluster[B].published] == [b"x"]


async def test_no_reachable_nsqd_is_a_connect_error(fake_cluster: Any) -> None:
    fake_cluster[A].down = True
    async with Producer(A, connector=fake_cluster.connector) as p:
        with pytest.raises(ConnectError):
            await p.pub("t", b"x")


async def test_closing_fails_what_is_still_unanswered(fake_cluster: Any) -> None:
    fake_cluster[A].hold_responses = True
    errors = []
    async with trio.open_nursery() as nursery, Producer(A, connector=fake_cluster.connector) as p:
        async def publish() -> None:
            try:
                await p.pub("t", b"x")
            except ConnectionClosed as exc:
                errors.append(exc)
        nursery.start_soon(publish)
        await fake_cluster.wait_for(lambda: len(fake_cluster[A].published) == 1)
    assert len(errors) == 1


async def test_heartbeats_are_answered_with_nop(fake_cluster: Any) -> None:
    async with Producer(A, connector=fake_cluster.connector) as p:
        await p.pub("t", b"x")
        await fake_cluster[A].conn.heartbeat()
        await fake_cluster.wait_for(lambda: b"NOP" in fake_cluster[A].conn.names())


async def test_use_outside_async_with_is_refused() -> None:
    with pytest.raises(Exception, match="async with"):
        await Producer(A).pub("t", b"x")
    with pytest.raises(ValueError):
        Producer([])
    with pytest.raises(ValueError):
        Producer(A, strategy="random")
