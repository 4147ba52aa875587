import itertools
from typing import Any

import pytest
import trio
from nsq_client import Consumer, Message, MessageResponded

A, B, C = "10.0.0.1:4150", "10.0.0.2:4150", "10.0.0.3:4150"


def mid(i: int) -> bytes:
    return b"%016d" % i


async def delivered(fake_cluster: Any, count: int, rdy: int = 10) -> Any:
    """The fake nsqd's connection once the consumer's RDY is ``rdy``, after sending it
    ``count`` messages (ids ``mid(0)``...)."""
    conn = fake_cluster[A].conn
    await fake_cluster.wait_for(lambda: conn.rdy == rdy)
    for i in range(count):
        await conn.send_message(mid(i), b"x")
    return conn


def consumer(fake_cluster: Any, *addresses: str, **options: Any) -> Consumer:
    return Consumer("t", "c", nsqd_tcp_addresses=list(addresses) or [A],
                    connector=fake_cluster.connector, **options)


def sent(conn: Any, name: bytes) -> list[list[bytes]]:
    return [params for n, params, _ in conn.commands if n == name]


async def test_subscribes_then_gives_rdy(fake_cluster: Any) -> None:
    async with consumer(fake_cluster, max_in_flight=7):
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdys() == [7])
        assert conn.names()[:3] == [b"IDENTIFY", b"SUB", b"RDY"]
        assert sent(conn, b"SUB") == [[b"t", b"c"]]
        assert conn.identify["feature_negotiation"] is True


async def test_max_in_flight_is_divided_over_connections(fake_cluster: Any) -> None:
    async with consumer(fake_cluster, A, B, max_in_flight=10) as c:
        await fake_cluster.wait_for(lambda: fake_cluster[A].conn.rdy == 5 == fake_cluster[B].conn.rdy)
        # sent once: RDY is a standing window, not refilled per message
        for i in range(8):
            await fake_cluster[A].conn.send_message(mid(i), b"x")
        async for msg in c:
            if msg.id == mid(7):
                break
        await fake_cluster.wait_for(lambda: len(sent(fake_cluster[A].conn, b"FIN")) == 7)
        assert fake_cluster[A].conn.rdys() == [5]
        c.change_max_in_flight(4)
        await fake_cluster.wait_for(lambda: fake_cluster[B].conn.rdys() == [5, 2])
        assert fake_cluster[A].conn.rdys() == [5, 2]


async def test_a_lost_connection_gives_its_share_to_the_others(fake_cluster: Any,
                                                               autojump_clock: Any) -> None:
    async with consumer(fake_cluster, A, B, max_in_flight=10, lookupd_poll_interval=60.0):
        await fake_cluster.wait_for(lambda: fake_cluster[B].conn.rdy == 5)
        fake_cluster[A].down = True
        await fake_cluster[A].conn.close()
        await fake_cluster.wait_for(lambda: fake_cluster[B].conn.rdys() == [5, 10])


async def test_direct_connections_are_redialled(fake_cluster: Any, autojump_clock: Any) -> None:
    async with consumer(fake_cluster, max_in_flight=3, lookupd_poll_interval=2.0) as c:
        await fake_cluster[A].conn.close()
        start = trio.current_time()
        await fake_cluster.wait_for(lambda: len(fake_cluster[A].conns) == 2, within=10)
        assert trio.current_time() - start == pytest.approx(2.0, abs=0.1)
        await fake_cluster.wait_for(lambda: fake_cluster[A].conn.rdys() == [3])
        assert c.connections == [A]


async def test_an_unreachable_nsqd_is_retried(fake_cluster: Any, autojump_clock: Any) -> None:
    fake_cluster[A].down = True
    async with consumer(fake_cluster, max_in_flight=3, lookupd_poll_interval=1.0) as c:
        assert c.connections == []
        fake_cluster[A].down = False
        await fake_cluster.wait_for(lambda: bool(fake_cluster[A].conns) and fake_cluster[A].conn.rdy == 3)


async def test_iteration_finishes_each_message_when_the_next_is_asked(fake_cluster: Any) -> None:
    async with consumer(fake_cluster, max_in_flight=10) as c:
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdy == 10)
        for i in range(3):
            await conn.send_message(mid(i), b"body%d" % i, attempts=2)
        bodies = []
        async for msg in c:
            assert isinstance(msg, Message)
            assert msg.attempts == 2 and msg.nsqd_address == A
            bodies.append(msg.body)
            if len(bodies) == 3:
                break
        await fake_cluster.wait_for(lambda: len(sent(conn, b"FIN")) == 2)
    # leaving normally finishes the last one too, then CLS
    assert sent(conn, b"FIN") == [[mid(0)], [mid(1)], [mid(2)]]
    assert bodies == [b"body0", b"body1", b"body2"]
    assert b"CLS" in conn.names()


async def test_leaving_by_an_exception_requeues_the_current_message(fake_cluster: Any) -> None:
    with pytest.raises(KeyError):
        async with consumer(fake_cluster, max_in_flight=10) as c:
            conn = fake_cluster[A].conn
            await fake_cluster.wait_for(lambda: conn.rdy == 10)
            await conn.send_message(mid(1), b"x", attempts=3)
            async for _ in c:
                raise KeyError("boom")
    assert sent(conn, b"REQ") == [[mid(1), b"270000"]]  # 90 s x 3 attempts
    assert sent(conn, b"FIN") == []


async def test_handler_return_finishes_and_raise_requeues(fake_cluster: Any) -> None:
    seen = []

    async def handler(msg: Message) -> None:
        seen.append(msg.id)
        if msg.body == b"fail":
            raise ValueError("nope")

    async with consumer(fake_cluster, max_in_flight=10, max_requeue_delay=100.0,
                        backoff_multiplier=0.001) as c:
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdy == 10)
        await conn.send_message(mid(1), b"ok")
        await conn.send_message(mid(2), b"fail", attempts=2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run, handler)
            await fake_cluster.wait_for(lambda: len(seen) == 2)
            await fake_cluster.wait_for(lambda: sent(conn, b"REQ") != [])
            c.stop()
    assert sent(conn, b"FIN") == [[mid(1)]]
    assert sent(conn, b"REQ") == [[mid(2), b"100000"]]  # 180 s capped at max_requeue_delay


async def test_sync_handlers_and_manual_answers(fake_cluster: Any) -> None:
    def handler(msg: Message) -> None:
        if msg.body == b"touch":
            msg.touch()
            msg.requeue(2.5, backoff=False)
            with pytest.raises(MessageResponded):
                msg.finish()
        elif msg.body == b"later":
            msg.disable_auto_response()
            held.append(msg)

    held: list[Message] = []
    async with consumer(fake_cluster, max_in_flight=10) as c:
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdy == 10)
        await conn.send_message(mid(1), b"touch")
        await conn.send_message(mid(2), b"later")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run, handler)
            await fake_cluster.wait_for(lambda: len(held) == 1)
            assert sent(conn, b"FIN") == []
            held[0].finish()
            await fake_cluster.wait_for(lambda: sent(conn, b"FIN") == [[mid(2)]])
            c.stop()
    assert sent(conn, b"TOUCH") == [[mid(1)]]
    assert sent(conn, b"REQ") == [[mid(1), b"2500"]]


async def test_messages_past_max_attempts_are_given_up(fake_cluster: Any) -> None:
    given_up = []

    async def give_up(msg: Message) -> None:
        given_up.append(msg.id)

    async with consumer(fake_cluster, max_in_flight=10, max_attempts=3, on_give_up=give_up) as c:
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdy == 10)
        await conn.send_message(mid(1), b"x", attempts=4)
        await conn.send_message(mid(2), b"y", attempts=3)
        async for msg in c:
            assert msg.id == mid(2)
            break
    assert given_up == [mid(1)]
    assert sent(conn, b"FIN") == [[mid(1)], [mid(2)]]


async def test_heartbeats_are_answered(fake_cluster: Any) -> None:
    async with consumer(fake_cluster):
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdy == 1)
        await conn.heartbeat()
        await fake_cluster.wait_for(lambda: conn.names()[-1] == b"NOP")


async def test_backoff_sends_rdy_0_then_rdy_1_and_success_resumes(fake_cluster: Any,
                                                                   autojump_clock: Any) -> None:
    """Five failures in a row: RDY 0, a pause, RDY 1 each time; then successes climb back."""
    outcomes = iter([False] * 5 + [True] * 5)
    handled = []

    async def handler(msg: Message) -> None:
        handled.append(trio.current_time())
        if not next(outcomes):
            raise RuntimeError("downstream is down")

    async with consumer(fake_cluster, max_in_flight=8, default_requeue_delay=0.0,
                        max_attempts=0) as c:
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdy == 8)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run, handler)
            for i in range(10):
                # nsqd sends one message whenever RDY allows it
                await fake_cluster.wait_for(lambda: conn.rdy > 0, within=100)
                await conn.send_message(mid(i), b"x")
                await fake_cluster.wait_for(lambda i=i: len(handled) == i + 1, within=100)
            await fake_cluster.wait_for(lambda: conn.rdy == 8, within=100)
            c.stop()
    assert conn.rdys() == [8] + [0, 1] * 9 + [8]
    gaps = [round(b - a) for a, b in itertools.pairwise(handled)]
    assert gaps == [2, 4, 8, 16, 32, 16, 8, 4, 2]
    assert len(sent(conn, b"REQ")) == 5 and len(sent(conn, b"FIN")) == 5
    assert c.backoff_level == 0


async def test_backoff_probes_one_connection_of_several(fake_cluster: Any, autojump_clock: Any) -> None:
    async with consumer(fake_cluster, A, B, max_in_flight=4, default_requeue_delay=0.0) as c:
        await fake_cluster.wait_for(lambda: fake_cluster[A].conn.rdy == 2 == fake_cluster[B].conn.rdy)
        await fake_cluster[A].conn.send_message(mid(1), b"x")
        async for msg in c:
            msg.requeue()
            break
        await fake_cluster.wait_for(lambda: fake_cluster[A].conn.rdy == 0 == fake_cluster[B].conn.rdy)
        await trio.sleep(2.5)
        total = fake_cluster[A].conn.rdy + fake_cluster[B].conn.rdy
        assert total == 1


async def test_rdy_rotates_when_max_in_flight_is_below_connections(fake_cluster: Any,
                                                                   autojump_clock: Any) -> None:
    async with consumer(fake_cluster, A, B, C, max_in_flight=1):
        nsqds = [fake_cluster[a] for a in (A, B, C)]
        await fake_cluster.wait_for(lambda: sum(n.conn.rdy for n in nsqds) == 1)
        holders = set()
        for _ in range(12):
            await trio.sleep(5.0)
            assert sum(n.conn.rdy for n in nsqds) <= 1
            holders |= {n.address for n in nsqds if n.conn.rdy}
        assert len(holders) >= 2  # idle holders give RDY up after low_rdy_idle_timeout


async def test_stop_sends_cls_and_requeues_what_was_not_handed_out(fake_cluster: Any) -> None:
    async with consumer(fake_cluster, max_in_flight=10) as c:
        conn = await delivered(fake_cluster, 4)
        first = None
        async for msg in c:
            first = msg
            break
        await fake_cluster.wait_for(lambda: c.stats.messages_received == 4)
    assert first is not None and first.id == mid(0)
    assert sent(conn, b"FIN") == [[mid(0)]]
    assert sent(conn, b"REQ") == [[mid(i), b"0"] for i in (1, 2, 3)]
    assert conn.names().index(b"CLS") < conn.names().index(b"REQ")
    assert c.stats.connections == 0
    assert conn.closed or c.connections == []


async def test_close_waits_for_handed_out_messages(fake_cluster: Any) -> None:
    release = trio.Event()

    async def slow(msg: Message) -> None:
        await release.wait()

    async with consumer(fake_cluster, max_in_flight=10) as c:
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdy == 10)
        await conn.send_message(mid(1), b"x")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run, slow)
            await fake_cluster.wait_for(lambda: c.stats.messages_received == 1)
            c.stop()
            await fake_cluster.wait_for(lambda: b"CLS" in conn.names())
            assert c.connections == [A]  # still draining
            release.set()
        await c.wait_stopped()
        assert sent(conn, b"FIN") == [[mid(1)]]
        assert c.connections == []


async def test_bad_names_and_missing_addresses_are_refused() -> None:
    with pytest.raises(ValueError):
        Consumer("bad topic", "c", nsqd_tcp_addresses=[A])
    with pytest.raises(ValueError):
        Consumer("t", "c" * 70, nsqd_tcp_addresses=[A])
    with pytest.raises(ValueError):
        Consumer("t", "c")


async def test_sub_refused_is_logged_and_retried(fake_cluster: Any, autojump_clock: Any,
                                                 caplog: Any) -> None:
    fake_cluster[A].sub_error = b"E_BAD_TOPIC SUB topic name is not valid"
    async with consumer(fake_cluster, lookupd_poll_interval=5.0) as c:
        assert c.connections == []
        assert "E_BAD_TOPIC" in caplog.text
        fake_cluster[A].sub_error = None
        await trio.sleep(6)
        assert c.connections == [A]


async def test_each_task_answers_its_own_previous_message(fake_cluster: Any) -> None:
    async with consumer(fake_cluster, max_in_flight=10) as c:
        conn = await delivered(fake_cluster, 4)
        got: dict[str, list[bytes]] = {"a": [], "b": []}
        first_taken = trio.Event()
        b_asks_again = trio.Event()

        async def take(name: str) -> None:
            async for msg in c:
                got[name].append(msg.id)
                if name == "a":
                    first_taken.set()
                    await b_asks_again.wait()  # "b" takes and answers meanwhile
                break

        async with trio.open_nursery() as nursery:
            nursery.start_soon(take, "a")
            await first_taken.wait()
            async for msg in c:  # this task, twice: the first is FINished by the second ask
                got["b"].append(msg.id)
                break
            async for msg in c:
                got["b"].append(msg.id)
                break
            await fake_cluster.wait_for(lambda: len(sent(conn, b"FIN")) == 1)
            assert sent(conn, b"FIN") == [[got["b"][0]]]  # not "a"'s message
            b_asks_again.set()
    # leaving: the last message of each task is finished too
    assert sorted(p[0] for p in sent(conn, b"FIN")) == sorted(got["a"] + got["b"])
    assert len(got["a"]) == 1 and len(got["b"]) == 2


async def test_iteration_outside_async_with_is_refused(fake_cluster: Any) -> None:
    c = consumer(fake_cluster)
    with pytest.raises(RuntimeError, match="async with"):
        async for _ in c:
            pass
