"""A replicated topic's channels' dead letters and own queues across a failover, with real
processes: etcd and three nsqd (docs/design/replication.md, "What of a channel is
replicated"). The leader ships each durable channel's internal logs (records at its offsets,
then their cursors) to its followers in the fetch's ``DATA``; after a ``kill -9`` of the
leader the new one holds every dead letter and every own-queue record the old one had, and
what was respawned or done with from them is not back (once shipped: each test waits until
the followers show it, the design's bound). Each in the default storage mode and with
``--sync-every=1``."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from nsq_common import LMSTFY_CHANNEL, commands
from nsq_testing import Daemon, Etcd, WireClient, until
from nsq_testing.lmstfy import EXPECT, LMSTFY
from nsqd import cursorfile
from nsqd.replication.election import read_state
from nsqd.replication.etcd import EtcdClient
from nsqd.replication.placement import place

from .test_replication_data import FAILOVER, clean, data_path, joined, node_of, start_node

TOPIC, CHANNEL = "jobs", "work"
#: each test in the default storage mode and with every write fsynced before it is answered
SYNC = pytest.mark.parametrize("sync", [[], ["--sync-every=1"]], ids=["default", "sync-every-1"])


async def channel_stats(daemon: Daemon, topic: str, channel: str) -> dict[str, Any] | None:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"http://{daemon.http_address}/stats",
                           params={"format": "json", "topic": topic, "channel": channel})
    for t in r.json()["topics"]:
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c  # type: ignore[no-any-return]
    return None


async def holds(daemon: Daemon, dead: int, depth: int) -> bool:
    """The channel on ``daemon`` holds ``dead`` dead letters and ``depth`` waiting (a
    follower: its own queue's records not done with)."""
    stats = await channel_stats(daemon, TOPIC, CHANNEL)
    return (stats is not None and stats.get("dead_letter_count") == dead
            and stats["depth"] == depth)


async def post(daemon: Daemon, path: str, **params: object) -> Any:
    async with httpx.AsyncClient() as http:
        r = await http.post(f"http://{daemon.http_address}{path}", params=params)
    r.raise_for_status()
    return r.json() if r.content else None


async def dead_bodies(daemon: Daemon, n: int = 100) -> list[str]:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"http://{daemon.http_address}/channel/deadletter",
                           params={"topic": TOPIC, "channel": CHANNEL, "n": n})
    r.raise_for_status()
    return [base64.b64decode(m["body"]).decode() for m in r.json()["messages"]]


async def new_leader(etcd_client: EtcdClient, topic: str, nodes: list[Daemon]) -> Daemon:
    async def elected() -> str | None:
        read_ = await read_state(etcd_client, topic)
        return read_[0].leader if read_ is not None and read_[0].epoch == 2 else None
    node = await until(elected, timeout=FAILOVER, what="a new leader at epoch 2")
    return next(d for d in nodes if node_of(d) == node)


@SYNC
async def test_dead_letters_and_the_own_queue_survive_the_leaders_kill(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient,
        sync: list[str]) -> None:
    nodes = [start_node(run_daemon, etcd, *sync) for _ in range(3)]
    leader, followers = nodes[0], nodes[1:]
    await joined(etcd_client, *nodes)
    await place(etcd_client, TOPIC, 3, prefer=node_of(leader))
    for daemon in followers:
        await until(lambda d=daemon: f"fetching from leader {node_of(leader)}" in d.output())
    # one delivery each: a message sent back (REQ) is a dead letter when next taken
    await post(leader, "/channel/create", topic=TOPIC, channel=CHANNEL, max_attempts=1)
    async with (await WireClient.connect(leader.tcp_address) as producer,
                await WireClient.connect(leader.tcp_address) as consumer):
        for i in range(10):
            await producer.pub(TOPIC, f"d{i}".encode())
        await consumer.subscribe(TOPIC, CHANNEL, rdy=10)
        got = {m.body.decode(): m for m in await consumer.messages(10)}
        for i in range(10):  # d0-d5 back, and out of attempts: dead letters; d6-d9 done
            msg = got[f"d{i}"]
            await consumer.send(commands.req(msg.id, 0) if i < 6 else commands.fin(msg.id))
        await until(lambda: holds(leader, 6, 0), what="six dead letters on the leader")
        # three respawned into the channel's own queue and delivered again: d0 done with,
        # d1 and d2 left in flight
        assert await post(leader, "/channel/deadletter/respawn", topic=TOPIC,
                          channel=CHANNEL, n=3) == {"count": 3}
        again = {m.body.decode(): m for m in await consumer.messages(3)}
        assert sorted(again) == ["d0", "d1", "d2"]
        await consumer.send(commands.fin(again["d0"].id))
        # the followers hold what the leader holds: d3-d5 dead, d1 and d2 in the own queue
        for daemon in followers:
            await until(lambda d=daemon: holds(d, 3, 2), timeout=FAILOVER,
                        what="the dead letters and the own queue on the followers")
        # a follower delivers nothing, of its own queue's copy either; its consumers (there
        # through nsqlookupd) stay connected across the failover
        waiting = [await WireClient.connect(d.tcp_address) for d in followers]
        for idle in waiting:
            await idle.subscribe(TOPIC, CHANNEL, rdy=10)
        await waiting[0].nothing_for(1.0)

        leader.kill()
        new = await new_leader(etcd_client, TOPIC, followers)
    try:
        assert await dead_bodies(new) == ["d3", "d4", "d5"]
        consumer = waiting[followers.index(new)]
        own = {m.body.decode(): m for m in await consumer.messages(2, timeout=FAILOVER)}
        assert sorted(own) == ["d1", "d2"]  # the own queue's, not done with; d0 is not back
        await consumer.nothing_for(0.5)  # (nothing of the topic's log either: all done)
        for msg in own.values():
            await consumer.send(commands.fin(msg.id))
        assert await post(new, "/channel/deadletter/respawn", topic=TOPIC, channel=CHANNEL,
                          n=10) == {"count": 3}
        respawned = {m.body.decode(): m for m in await consumer.messages(3)}
        assert sorted(respawned) == ["d3", "d4", "d5"]
        for msg in respawned.values():
            await consumer.send(commands.fin(msg.id))
        await consumer.nothing_for(0.5)
    finally:
        for idle in waiting:
            await idle.aclose()
    await until(lambda: holds(new, 0, 0), what="nothing left on the new leader")
    clean(*followers)


# -- lmstfy ------------------------------------------------------------------------------------
TOKEN = "replicated-namespace-token"
QUEUE_TOPIC = "lmstfy.ns.q"


class Node:
    """One nsqd of the cluster serving lmstfy, its token for namespace ``ns`` the same as
    every other node's (tokens are node settings, not replicated)."""

    def __init__(self, run_daemon: Callable[..., Daemon], etcd: Etcd, *args: str) -> None:
        self.nsqd = run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                               f"--etcd-endpoints={etcd.endpoint}", "--default-replicas=3",
                               *LMSTFY, *args, expect=EXPECT)
        self.url = f"http://{self.nsqd.addresses['LMSTFY']}/api/ns"
        admin = f"http://{self.nsqd.addresses['LMSTFY_ADMIN']}"
        r = httpx.post(f"{admin}/token/ns", data={"token": TOKEN, "description": "tests"})
        assert r.status_code == 201, r.text

    async def api(self, method: str, path: str, **params: object) -> httpx.Response:
        async with httpx.AsyncClient(headers={"X-Token": TOKEN}) as http:
            return await http.request(method, f"{self.url}{path}", params=params)

    async def put(self, body: bytes, **params: object) -> httpx.Response:
        async with httpx.AsyncClient(headers={"X-Token": TOKEN}) as http:
            return await http.put(f"{self.url}/q", params=params, content=body)

    async def publish(self, body: bytes, **params: object) -> str:
        r = await self.put(body, **params)
        assert r.status_code == 201, r.text
        return r.json()["job_id"]  # type: ignore[no-any-return]

    async def consume(self, **params: object) -> list[dict[str, Any]]:
        r = await self.api("GET", "/q", **params)
        if r.status_code == 404:
            return []
        assert r.status_code == 200, r.text
        got = r.json()
        return got if isinstance(got, list) else [got]  # type: ignore[no-any-return]

    async def dead_size(self) -> int:
        return (await self.api("GET", "/q/deadletter/size")).json()["size"]  # type: ignore[no-any-return]


def journal_extras(daemon: Daemon) -> list[tuple[int, int, int]]:
    """The extras (offset, attempts, due) of the lmstfy queue's cursor journal on
    ``daemon``."""
    path = data_path(daemon) / "topics" / QUEUE_TOPIC / f"{LMSTFY_CHANNEL}.cursor"
    state = cursorfile.load(path) if path.exists() else None
    return list(state.extras) if state is not None else []


@SYNC
async def test_a_replicated_lmstfy_namespace_keeps_its_jobs_delays_tries_and_dead_letters(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient,
        sync: list[str]) -> None:
    nodes = [Node(run_daemon, etcd, *sync) for _ in range(3)]
    await joined(etcd_client, *(n.nsqd for n in nodes))
    leader, followers = nodes[0], nodes[1:]
    # the first job of a queue places its topic (--default-replicas=3), led by the node asked
    acked = await leader.publish(b"acked")
    state = await read_state(etcd_client, QUEUE_TOPIC)
    assert state is not None and state[0].leader == node_of(leader.nsqd)
    for n in followers:
        await until(lambda d=n.nsqd: f"fetching from leader {node_of(leader.nsqd)}"
                    in d.output(), timeout=FAILOVER)
    # a job on a follower: sent on to the leader's lmstfy, with its tries
    elsewhere = await followers[0].publish(b"elsewhere", tries=2)
    assert [j["job_id"] for j in await leader.consume(ttr=60)] == [acked]
    assert (await leader.api("DELETE", f"/q/job/{acked}")).status_code == 204
    [job] = await followers[1].consume(ttr=60)
    assert (job["job_id"], job["remain_tries"]) == (elsewhere, 1)
    assert (await followers[1].api("DELETE", f"/q/job/{elsewhere}")).status_code == 204
    tried = await leader.publish(b"tried", tries=3)
    dying = [await leader.publish(b"dying%d" % i, tries=1) for i in range(3)]
    taken = await leader.consume(count=4, ttr=1)
    assert [j["job_id"] for j in taken] == [tried, *dying]
    ready = await leader.publish(b"ready")
    delay = 20  # (past the failover: due on the new leader)
    due_at = time.time() + delay
    delayed = await leader.publish(b"delayed", delay=delay)
    # the TTR runs out: "tried" back with two tries left, the others dead letters
    await until(lambda: _equals(leader.dead_size(), 3), timeout=FAILOVER, what="dead letters")
    head = (await leader.api("GET", "/q/deadletter")).json()["deadletter_head"]
    r = await leader.api("PUT", "/q/deadletter", limit=1)
    assert r.json() == {"msg": "respawned", "count": 1}
    # the followers hold it all: two dead letters, one job in the own queue, and the
    # attempt of "tried" in the channel's cursor
    for n in followers:
        await until(lambda d=n.nsqd: holds_queue(d, dead=2, own=1), timeout=FAILOVER,
                    what="the dead letters, the own queue and the tries on the followers")

    leader.nsqd.kill()
    elected = await new_leader(etcd_client, QUEUE_TOPIC, [f.nsqd for f in followers])
    new = next(n for n in followers if n.nsqd is elected)
    assert await new.dead_size() == 2
    got = await _consumed(new, 4)
    jobs = {j["job_id"]: j for j, _ in got}
    assert set(jobs) == {tried, ready, head, delayed}  # the acknowledged job is not back
    assert jobs[tried]["remain_tries"] == 1  # 3 tries: one used before the kill, one now
    assert jobs[head]["remain_tries"] == 0  # respawned: one try
    assert next(t for j, t in got if j["job_id"] == delayed) >= due_at  # not before its delay
    r = await new.api("PUT", "/q/deadletter", limit=5)
    assert r.json() == {"msg": "respawned", "count": 2}
    rest = {j["job_id"] for j, _ in await _consumed(new, 2)}
    assert rest == set(dying) - {head}
    for job_id in [*jobs, delayed, *rest]:
        assert (await new.api("DELETE", f"/q/job/{job_id}")).status_code == 204
    assert await new.consume(timeout=1) == []
    assert await new.dead_size() == 0
    clean(*(f.nsqd for f in followers))


async def _equals(got: Any, expected: object) -> bool:
    return await got == expected  # type: ignore[no-any-return]


async def holds_queue(daemon: Daemon, *, dead: int, own: int) -> bool:
    stats = await channel_stats(daemon, QUEUE_TOPIC, LMSTFY_CHANNEL)
    return (stats is not None and stats.get("dead_letter_count") == dead
            and stats["depth"] == own and any(a == 1 for _, a, _ in journal_extras(daemon)))


async def _consumed(node: Node, count: int) -> list[tuple[dict[str, Any], float]]:
    """``count`` jobs consumed (in flight for a minute), as many consumes as it takes, each
    with when it came."""
    got: list[tuple[dict[str, Any], float]] = []

    async def more() -> bool:
        jobs = await node.consume(count=count - len(got), ttr=60, timeout=1)
        got.extend((job, time.time()) for job in jobs)
        return len(got) >= count
    await until(more, timeout=FAILOVER, what=f"{count} jobs consumed")
    return got


@SYNC
async def test_messages_dying_while_the_leader_is_killed_are_all_dead_letters_on_the_new_one(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient,
        sync: list[str]) -> None:
    """The order of the records and the cursors: a message turned into a dead letter just
    before the kill was acknowledged on the old leader's cursor; the new leader has it either
    in its dead letters or still on its cursor (a dead letter again once taken), never
    neither."""
    count = 600
    # (--mem-queue-size=0: a message sent back waits behind nothing, and dies at once)
    nodes = [start_node(run_daemon, etcd, "--mem-queue-size=0", *sync) for _ in range(3)]
    leader, followers = nodes[0], nodes[1:]
    await joined(etcd_client, *nodes)
    await place(etcd_client, TOPIC, 3, prefer=node_of(leader))
    for daemon in followers:
        await until(lambda d=daemon: f"fetching from leader {node_of(leader)}" in d.output())
    await post(leader, "/channel/create", topic=TOPIC, channel=CHANNEL, max_attempts=1)
    async with await WireClient.connect(leader.tcp_address) as producer:
        for first in range(0, count, 100):  # each MPUB acknowledged: held by all three
            await producer.send(commands.mpub(TOPIC, [f"m{i}".encode()
                                                      for i in range(first, first + 100)]))
            assert await producer.response() == b"OK"
    # every message sent back (REQ) as it comes: out of attempts, a dead letter when next
    # taken; the leader killed while they die, once the followers' cursors have the first
    # hundred done with (shipped, so also their dead letters)
    journals = [data_path(d) / "topics" / TOPIC / f"{CHANNEL}.cursor" for d in followers]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_back, leader)
        for journal in journals:
            await until(lambda j=journal: (_mark_delete(j) or 0) >= 100, timeout=FAILOVER,
                        what="the followers' cursors past the first hundred")
        leader.kill()
    new = await new_leader(etcd_client, TOPIC, followers)
    expected = {f"m{i}" for i in range(count)}

    async def all_dead() -> bool:
        return set(await dead_bodies(new, count * 2)) >= expected

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_back, new)  # (what the new leader delivers: back, and dead)
        await until(all_dead, timeout=FAILOVER, what="every message a dead letter")
        nursery.cancel_scope.cancel()
    clean(*followers)


async def send_back(daemon: Daemon) -> None:
    """Every message ``daemon`` delivers sent back at once (REQ), until it goes."""
    try:
        async with await WireClient.connect(daemon.tcp_address) as consumer:
            await consumer.subscribe(TOPIC, CHANNEL, rdy=50)
            while True:
                msg = await consumer.message(timeout=FAILOVER)
                await consumer.send(commands.req(msg.id, 0))
    except (OSError, EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # (killed)


def _mark_delete(journal: Path) -> int | None:
    if not journal.exists():
        return None
    state = cursorfile.load(journal)
    return state.mark_delete if state is not None else None
