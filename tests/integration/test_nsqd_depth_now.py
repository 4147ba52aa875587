"""Depth counts every message published and not yet delivered, at every moment, as Go's nsqd
does (a message is at the topic or at a channel): a publish (HTTP /pub and /mpub, TCP PUB and
MPUB) and at once ``/stats`` (JSON and text) and ``/metrics`` show it, in every storage mode.

Cases: a new topic that nsqd holds while it asks the lookupds for its channels (the lookupd is
stopped with SIGSTOP so the question stays unanswered: a real lookupd, a long window), a paused
channel, a channel whose consumer is connected with RDY 0. No message is counted twice (topic
and channel), and depth is 0 once everything is FINished.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from nsq_common import commands
from nsq_testing import Daemon, HttpConnection, WireClient, until

ROUNDS = 8  # per way of publishing
MODES = {"default": (), "mem-queue-size=0": ("--mem-queue-size=0",),
         "sync-every=1": ("--sync-every=1",)}

_TEXT_LINE = re.compile(r"^( *|\*P |   \*P )\[(\S+)\s*\] depth: (\d+)")
_METRIC = re.compile(r'^nsq_(topic|channel)_depth\{(?:channel="([^"]*)",)?topic="([^"]*)"\} (\S+)$')


class Node:
    """The nsqd under test: an HTTP connection, a publishing TCP connection, and what the
    three views say of a topic's depths."""

    def __init__(self, nsqd: Daemon, http: HttpConnection, publisher: WireClient) -> None:
        self.nsqd = nsqd
        self.http = http
        self.publisher = publisher
        self.published: dict[str, int] = {}

    async def post(self, target: str, body: bytes = b"") -> None:
        status, answer = await self.http.request("POST", target, body)
        assert status == 200, (target, status, answer)

    async def publish(self, topic: str, way: str, n: int) -> None:
        bodies = [b"%s-%d" % (way.encode(), i) for i in range(n)]
        if way == "http-pub":
            for body in bodies:
                await self.post(f"/pub?topic={topic}", body)
        elif way == "http-mpub":
            await self.post(f"/mpub?topic={topic}", b"\n".join(bodies))
        elif way == "tcp-pub":
            for body in bodies:
                await self.publisher.pub(topic, body)
        else:
            await self.publisher.send(commands.mpub(topic, bodies))
            assert await self.publisher.response() == b"OK"
        self.published[topic] = self.published.get(topic, 0) + n

    async def views(self, topic: str) -> list[tuple[str, dict[str | None, int]]]:
        """Each view's depths of ``topic``: the topic's under None, each channel's by name."""
        status, body = await self.http.request("GET", f"/stats?format=json&topic={topic}")
        assert status == 200
        (doc,) = json.loads(body)["topics"]
        from_json: dict[str | None, int] = {None: doc["depth"]}
        from_json.update({c["channel_name"]: c["depth"] for c in doc["channels"]})
        status, body = await self.http.request("GET", f"/stats?topic={topic}")
        assert status == 200
        from_text: dict[str | None, int] = {}
        for line in body.decode().splitlines():
            match = _TEXT_LINE.match(line)
            if match:
                key = None if line.index("[") == 3 else match.group(2)
                from_text[key] = int(match.group(3))
        status, body = await self.http.request("GET", "/metrics")
        assert status == 200
        from_metrics: dict[str | None, int] = {}
        for line in body.decode().splitlines():
            match = _METRIC.match(line)
            if match and match.group(3) == topic:
                key = None if match.group(1) == "topic" else match.group(2)
                from_metrics[key] = int(float(match.group(4)))
        return [("json", from_json), ("text", from_text), ("metrics", from_metrics)]

    async def check(self, topic: str, channels: list[str], waiting: int) -> None:
        """Every view counts each of ``waiting`` messages once for every channel: at the
        topic or at the channel, never at both."""
        for view, depths in await self.views(topic):
            assert set(depths) == {None, *channels}, (view, depths)
            for channel in channels:
                assert depths[None] + depths[channel] == waiting, (view, channel, depths)


@pytest.fixture
def lookupd(run_daemon: Callable[..., Daemon]) -> Daemon:
    return run_daemon("nsqlookupd")


@asynccontextmanager
async def started_node(run_daemon: Callable[..., Daemon], lookupd: Daemon,
                       flags: tuple[str, ...]) -> AsyncIterator[Node]:
    nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                      "--broadcast-address=127.0.0.1", *flags)
    lookup_http = await HttpConnection.open("127.0.0.1", int(lookupd.http_address.split(":")[1]))

    async def known() -> bool:  # nsqd has identified: it knows the lookupd's HTTP address
        status, body = await lookup_http.request("GET", "/nodes")
        return status == 200 and bool(json.loads(body)["producers"])

    await until(known, what="nsqd registered with the lookupd")
    await lookup_http.aclose()
    http = await HttpConnection.open("127.0.0.1", nsqd.http_port)
    try:
        async with await WireClient.connect(nsqd.tcp_address) as publisher:
            await publisher.identify()
            yield Node(nsqd, http, publisher)
    finally:
        await http.aclose()


async def consume_all(node: Node, topic: str, channel: str, count: int) -> None:
    """Take ``count`` messages from ``channel`` and FIN each; return once nsqd has them all
    FINished."""
    async with await WireClient.connect(node.nsqd.tcp_address) as consumer:
        await consumer.identify()
        await consumer.subscribe(topic, channel, rdy=min(count, 2500))
        for _ in range(count):
            await consumer.send(commands.fin((await consumer.message()).id))

        async def finished() -> bool:
            status, body = await node.http.request(
                "GET", f"/stats?format=json&topic={topic}&channel={channel}")
            (channel_doc,) = json.loads(body)["topics"][0]["channels"]
            return status == 200 and channel_doc["clients"][0]["finish_count"] == count

        await until(finished, what=f"{count} FINs on {channel}")


WAYS = ("http-pub", "http-mpub", "tcp-pub", "tcp-mpub")


@pytest.mark.parametrize("flags", MODES.values(), ids=MODES.keys())
async def test_a_topic_held_for_the_lookupd_counts_what_is_published(
        run_daemon: Callable[..., Daemon], lookupd: Daemon, flags: tuple[str, ...]) -> None:
    async with started_node(run_daemon, lookupd, flags) as node:
        await held(node, lookupd)


async def held(node: Node, lookupd: Daemon) -> None:
    lookupd.process.send_signal(signal.SIGSTOP)  # nsqd's question about channels hangs
    try:
        await node.post("/topic/create?topic=held")
        await node.post("/channel/create?topic=held&channel=c")
        for way in WAYS:
            for i in range(ROUNDS):
                await node.publish("held", way, 1 + i * 11)
                await node.check("held", ["c"], node.published["held"])
    finally:
        lookupd.process.send_signal(signal.SIGCONT)
    total = node.published["held"]

    async def at_the_channel() -> bool:  # the topic started: everything passed to it
        (_, depths), *_ = await node.views("held")
        return depths == {None: 0, "c": total}

    await until(at_the_channel, what="the held messages at the channel")
    await consume_all(node, "held", "c", total)
    await node.check("held", ["c"], 0)


@pytest.mark.parametrize("flags", MODES.values(), ids=MODES.keys())
async def test_a_paused_channel_and_a_consumer_at_rdy_0_count_what_is_published(
        run_daemon: Callable[..., Daemon], lookupd: Daemon, flags: tuple[str, ...]) -> None:
    async with started_node(run_daemon, lookupd, flags) as node:
        await live(node)


async def live(node: Node) -> None:
    await node.post("/topic/create?topic=live")
    await node.post("/channel/create?topic=live&channel=paused")
    await node.post("/channel/create?topic=live&channel=idle")
    await node.post("/channel/pause?topic=live&channel=paused")
    channels = ["idle", "paused"]
    async with await WireClient.connect(node.nsqd.tcp_address) as idle:
        await idle.identify()
        await idle.subscribe("live", "idle", rdy=0)
        for way in WAYS:
            for i in range(ROUNDS):
                await node.publish("live", way, 1 + i * 11)
                await node.check("live", channels, node.published["live"])
    total = node.published["live"]
    await node.post("/channel/unpause?topic=live&channel=paused")
    await node.check("live", channels, total)
    for channel in channels:
        await consume_all(node, "live", channel, total)
    await node.check("live", channels, 0)
