"""A replicated topic's channels' dead letters and own queues across a failover, with real
processes: etcd and three nsqd (docs/design/replication.md, "What of a channel is
replicated"). The leader ships each durable channel's internal logs (records at its offsets,
then their cursors) to its followers in the fetch's ``DATA``; after a ``kill -9`` of the
leader the new one holds every dead letter and every own-queue record the old one had, and
what was respawned or done with from them is not back (once shipped: each test waits until
the followers show it, the design's bound)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
from nsq_common import commands
from nsq_testing import Daemon, Etcd, WireClient, until
from nsqd.replication.election import read_state
from nsqd.replication.etcd import EtcdClient
from nsqd.replication.placement import place

from .test_replication_data import FAILOVER, clean, joined, node_of, start_node

TOPIC, CHANNEL = "jobs", "work"


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


async def dead_bodies(daemon: Daemon) -> list[str]:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"http://{daemon.http_address}/channel/deadletter",
                           params={"topic": TOPIC, "channel": CHANNEL, "n": 100})
    r.raise_for_status()
    return [base64.b64decode(m["body"]).decode() for m in r.json()["messages"]]


async def new_leader(etcd_client: EtcdClient, topic: str, nodes: list[Daemon]) -> Daemon:
    async def elected() -> str | None:
        read_ = await read_state(etcd_client, topic)
        return read_[0].leader if read_ is not None and read_[0].epoch == 2 else None
    node = await until(elected, timeout=FAILOVER, what="a new leader at epoch 2")
    return next(d for d in nodes if node_of(d) == node)


async def test_dead_letters_and_the_own_queue_survive_the_leaders_kill(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    nodes = [start_node(run_daemon, etcd) for _ in range(3)]
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

        leader.kill()
        new = await new_leader(etcd_client, TOPIC, followers)
    assert await dead_bodies(new) == ["d3", "d4", "d5"]
    async with await WireClient.connect(new.tcp_address) as consumer:
        await consumer.subscribe(TOPIC, CHANNEL, rdy=10)
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
    await until(lambda: holds(new, 0, 0), what="nothing left on the new leader")
    clean(*followers)
