"""Delivery semantics on a real nsqd over raw sockets: RDY windows, REQ, sharing between
consumers, fan-out to channels, pause, ephemeral, disconnects, heartbeats. (REQ with a delay,
DPUB, timeouts and TOUCH run on the virtual clock: packages/nsqd/tests/test_tcp.py.)"""

import httpx
import pytest
import trio
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient, until


async def stats(daemon, **params):
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        r = await http.get(f"http://{daemon.http_address}/stats", params={"format": "json", **params})
        return r.json()


def channel_of(doc, topic, channel):
    t = next(t for t in doc["topics"] if t["topic_name"] == topic)
    return next(c for c in t["channels"] if c["channel_name"] == channel)


class Clients:
    """Opens WireClients for one test and closes every one of them at its end, pass or fail."""

    def __init__(self):
        self.opened = []

    async def connect(self, daemon):
        client = await WireClient.connect(daemon.tcp_address)
        self.opened.append(client)
        return client

    async def consumer(self, daemon, topic, channel, rdy=0, **identify):
        client = await self.connect(daemon)
        if identify:
            await client.identify(**identify)
        await client.subscribe(topic, channel, rdy)
        return client


@pytest.fixture
async def clients():
    opened = Clients()
    try:
        yield opened
    finally:
        for client in opened.opened:
            await client.aclose()


async def test_rdy_is_a_window_and_rdy_0_stops(shared_nsqd, clients):
    pub = await clients.connect(shared_nsqd)
    c = await clients.consumer(shared_nsqd, "d-rdy", "c", rdy=2)
    for i in range(5):
        await pub.pub("d-rdy", b"%d" % i)
    first = await c.messages(2)
    await c.nothing_for(0.3)  # two in flight = RDY 2: no more
    await c.send(commands.fin(first[0].id))
    third = await c.message()
    await c.send(commands.rdy(0) + commands.fin(first[1].id) + commands.fin(third.id))
    await c.nothing_for(0.4)
    await c.send(commands.rdy(10))
    rest = await c.messages(2)
    assert sorted(m.body for m in [*first, third, *rest]) == [b"0", b"1", b"2", b"3", b"4"]
    assert all(m.attempts == 1 for m in [*first, third, *rest])


async def test_two_consumers_share_two_channels_copy(shared_nsqd, clients):
    pub = await clients.connect(shared_nsqd)
    a = await clients.consumer(shared_nsqd, "d-share", "one", rdy=100)
    b = await clients.consumer(shared_nsqd, "d-share", "one", rdy=100)
    other = await clients.consumer(shared_nsqd, "d-share", "two", rdy=200)
    bodies = [b"%d" % i for i in range(100)]
    for i in range(0, 100, 10):
        await pub.send(commands.mpub("d-share", bodies[i:i + 10]))
        assert await pub.response() == b"OK"
    got_other = await other.messages(100)
    assert sorted(m.body for m in got_other) == sorted(bodies)
    got_a, got_b = [], []
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as n:
            async def take(client, into):
                while True:
                    into.append(await client.message())
                    if len(got_a) + len(got_b) >= 100:
                        n.cancel_scope.cancel()
            n.start_soon(take, a, got_a)
            n.start_soon(take, b, got_b)
    assert sorted(m.body for m in got_a + got_b) == sorted(bodies)  # each exactly once
    assert got_a and got_b  # spread across both


async def test_disconnect_requeues_in_flight_at_once(shared_nsqd, clients):
    pub = await clients.connect(shared_nsqd)
    quitter = await clients.consumer(shared_nsqd, "d-quit", "c", rdy=10)
    for i in range(3):
        await pub.pub("d-quit", b"%d" % i)
    await quitter.messages(3)
    await quitter.aclose()
    stayer = await clients.consumer(shared_nsqd, "d-quit", "c", rdy=10)
    got = await stayer.messages(3, timeout=30)  # far sooner than the 60 s msg timeout
    assert sorted(m.body for m in got) == [b"0", b"1", b"2"]
    assert all(m.attempts == 2 for m in got)


async def test_pause_channel_and_topic(shared_nsqd, clients):
    pub = await clients.connect(shared_nsqd)
    c = await clients.consumer(shared_nsqd, "d-pause", "c", rdy=10)
    base = f"http://{shared_nsqd.http_address}"
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        r = await http.post(f"{base}/channel/pause", params={"topic": "d-pause", "channel": "c"})
        assert r.status_code == 200
        await pub.pub("d-pause", b"held")
        await c.nothing_for(0.4)
        await http.post(f"{base}/channel/unpause", params={"topic": "d-pause", "channel": "c"})
        assert (await c.message()).body == b"held"
        await http.post(f"{base}/topic/pause", params={"topic": "d-pause"})
        await pub.pub("d-pause", b"held2")
        await c.nothing_for(0.4)
        doc = await stats(shared_nsqd, topic="d-pause")
        assert doc["topics"][0]["paused"] is True and doc["topics"][0]["depth"] == 1
        await http.post(f"{base}/topic/unpause", params={"topic": "d-pause"})
        assert (await c.message()).body == b"held2"


async def test_ephemeral_channel_and_topic_go_with_last_client(shared_nsqd, clients):
    c = await clients.consumer(shared_nsqd, "d-eph#ephemeral", "c#ephemeral")
    doc = await stats(shared_nsqd, topic="d-eph#ephemeral")
    assert doc["topics"][0]["channels"][0]["channel_name"] == "c#ephemeral"
    await c.aclose()
    async def gone():
        return (await stats(shared_nsqd, topic="d-eph#ephemeral"))["topics"] is None

    await until(gone, what="d-eph#ephemeral removed with its last client")


async def test_heartbeats_and_client_timeout(shared_nsqd, clients):
    c = await clients.connect(shared_nsqd)
    await c.identify(heartbeat_interval=1000)
    frame = await c.read_frame(skip_heartbeats=False)
    assert frame == (0, b"_heartbeat_")
    await c.send(b"NOP\n")
    # answering heartbeats (NOP) keeps it open past two intervals...
    for _ in range(3):
        assert await c.read_frame(skip_heartbeats=False) == (0, b"_heartbeat_")
        await c.send(b"NOP\n")
    # ...silence closes it after missed heartbeats: one comes first, and the close is no
    # sooner than two intervals after our last NOP (taken before nsqd can have seen it)
    start = trio.current_time()
    heartbeats = 0
    with trio.fail_after(DEADLINE):
        while True:
            try:
                frame = await c.read_frame(skip_heartbeats=False)
            except (EOFError, trio.BrokenResourceError):
                break
            assert frame == (0, b"_heartbeat_")
            heartbeats += 1
    assert heartbeats >= 1
    assert trio.current_time() - start >= 1.5


async def test_stats_counts_per_channel_and_client(shared_nsqd, clients):
    pub = await clients.connect(shared_nsqd)
    c = await clients.consumer(shared_nsqd, "d-stats", "c", rdy=10, msg_timeout=1000)
    await pub.send(commands.mpub("d-stats", [b"a", b"b", b"c", b"d", b"e"]))
    assert await pub.response() == b"OK"
    await pub.send(commands.dpub("d-stats", 60000, b"f"))
    assert await pub.response() == b"OK"
    msgs = await c.messages(5)
    await c.send(commands.fin(msgs[0].id) + commands.fin(msgs[1].id) + commands.req(msgs[2].id, 0))
    requeued = await c.message()
    await c.send(commands.fin(requeued.id))
    # msgs[3] and msgs[4] are never answered: they time out after 1 s and come back
    redelivered = await c.messages(2)
    assert {m.id for m in redelivered} == {msgs[3].id, msgs[4].id}
    # redelivered[1] stays in flight: TOUCH it every 0.1 s (its timeout is 1 s) until we looked
    await c.send(commands.fin(redelivered[0].id) + commands.touch(redelivered[1].id))
    await c.pub("d-stats-sync", b"x")  # answered in order: the FIN has been handled
    async with trio.open_nursery() as keep_alive:
        async def touch():
            while True:
                await c.send(commands.touch(redelivered[1].id))
                await trio.sleep(0.1)
        keep_alive.start_soon(touch)
        doc = await stats(shared_nsqd, topic="d-stats")
        keep_alive.cancel_scope.cancel()
    topic = doc["topics"][0]
    assert topic["message_count"] == 6 and topic["depth"] == 0
    ch = topic["channels"][0]
    assert {k: ch[k] for k in ("depth", "in_flight_count", "deferred_count", "message_count",
                               "requeue_count", "timeout_count", "client_count")} == {
        "depth": 0, "in_flight_count": 1, "deferred_count": 1, "message_count": 6,
        "requeue_count": 1, "timeout_count": 2, "client_count": 1}
    client = ch["clients"][0]
    assert {k: client[k] for k in ("ready_count", "in_flight_count", "message_count", "finish_count",
                                   "requeue_count", "state")} == {
        "ready_count": 10, "in_flight_count": 1, "message_count": 8, "finish_count": 4,
        "requeue_count": 1, "state": 3}
    producer = next(p for p in doc["producers"] if p["pub_counts"][0]["topic"] == "d-stats")
    assert producer["pub_counts"] == [{"topic": "d-stats", "count": 6}]


async def test_message_ids_unique_and_never_repeat_after_restart(run_daemon, tmp_path, clients):
    data = tmp_path / "ids"
    data.mkdir()
    seen = []
    for _ in range(2):
        daemon = run_daemon("nsqd", f"--data-path={data}")
        c = await clients.consumer(daemon, "d-ids", "c", rdy=1000)
        pub = await clients.connect(daemon)
        await pub.send(commands.mpub("d-ids", [b"x"] * 500))
        assert await pub.response() == b"OK"
        msgs = await c.messages(500)
        await c.send(b"".join(commands.fin(m.id) for m in msgs))
        await c.pub("d-ids-sync", b"x")  # answered only after the FINs were handled
        seen.extend(int(m.id, 16) for m in msgs)
        await pub.aclose()
        await c.aclose()
        daemon.stop()
    assert len(set(seen)) == 1000
    assert all(len(f"{i:016x}") == 16 for i in seen)
    assert min(seen[500:]) > max(seen[:500])


async def test_a_deferred_message_due_with_no_consumer_goes_to_the_next_one(shared_nsqd,
                                                                           clients):
    """DPUB to a channel nobody consumes, the message comes due (waiting again), then a SUB:
    it is delivered (the storage model's soak found it never was when nothing followed it in
    the log, and the channel had been read past it)."""
    await clients.consumer(shared_nsqd, "d-due", "c")  # the channel, then no consumer
    await clients.opened[-1].aclose()
    clients.opened.pop()
    pub = await clients.connect(shared_nsqd)
    await pub.send(commands.dpub("d-due", 50, b"late"))
    assert await pub.response() == b"OK"

    async def come_due() -> bool:
        c = channel_of(await stats(shared_nsqd, topic="d-due"), "d-due", "c")
        return c["deferred_count"] == 0 and c["depth"] == 1 and c["client_count"] == 0
    await until(come_due, what="the deferral come due, waiting again")
    c = await clients.consumer(shared_nsqd, "d-due", "c", rdy=1)
    msg = await c.message()
    assert msg.body == b"late"
