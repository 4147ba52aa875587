"""What the storage tests (test_nsqd_storage, test_nsqd_nothing_lost, test_nsqd_durability) ask
of a real nsqd: its /stats, a channel made as nsqadmin makes one, MPUBs, and a consumer that
FINs everything until /stats shows the channel empty."""

from __future__ import annotations

import httpx
import trio
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient


def get(url: str, **kwargs: object) -> httpx.Response:
    return httpx.get(url, timeout=DEADLINE, **kwargs)  # type: ignore[arg-type]


def post(url: str, **kwargs: object) -> httpx.Response:
    return httpx.post(url, timeout=DEADLINE, **kwargs)  # type: ignore[arg-type]


def stats(daemon, topic: str | None = None) -> dict:
    params = {"format": "json"} | ({"topic": topic} if topic else {})
    return get(f"http://{daemon.http_address}/stats", params=params).json()


def topic_stats(daemon, topic: str) -> dict | None:
    return (stats(daemon, topic)["topics"] or [None])[0]


def channel_stats(daemon, topic: str, channel: str) -> dict | None:
    for t in stats(daemon, topic)["topics"] or []:
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c
    return None


def channel_empty(daemon, topic: str, channel: str) -> bool:
    """Nothing waiting, in flight or deferred."""
    c = channel_stats(daemon, topic, channel)
    return c is not None and c["depth"] == c["in_flight_count"] == c["deferred_count"] == 0


def create_channel(daemon, topic: str, channel: str, **params: object) -> None:
    """The topic (if new) and the channel, as nsqadmin would make them."""
    http = f"http://{daemon.http_address}"
    assert post(f"{http}/topic/create", params={"topic": topic}).status_code == 200
    answer = post(f"{http}/channel/create", params={"topic": topic, "channel": channel, **params})
    assert answer.status_code == 200, answer.text


async def publish(daemon, topic: str, bodies: list[bytes], batch: int = 100) -> None:
    """``bodies`` by MPUB, ``batch`` at a time, each answered OK."""
    async with await WireClient.connect(daemon.tcp_address) as client:
        for i in range(0, len(bodies), batch):
            await client.send(commands.mpub(topic, bodies[i:i + batch]))
            assert await client.response() == b"OK"


async def drain_messages(daemon, topic: str, channel: str, *, rdy: int = 500,
                         timeout: float = 120.0) -> list:
    """Consume and FIN until /stats shows the channel empty; every message received, in
    order."""
    got = []
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.subscribe(topic, channel, rdy)
        with trio.fail_after(timeout):
            while True:
                try:
                    msg = await client.message(timeout=0.3)
                except trio.TooSlowError:  # a pause: is that everything?
                    if channel_empty(daemon, topic, channel):
                        return got
                    continue
                got.append(msg)
                await client.send(commands.fin(msg.id))


async def drain(daemon, topic: str, channel: str, *, rdy: int = 500,
                timeout: float = 120.0) -> list[bytes]:
    """``drain_messages``' bodies."""
    return [m.body for m in await drain_messages(daemon, topic, channel, rdy=rdy,
                                                 timeout=timeout)]
