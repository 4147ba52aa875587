"""The client library against real daemons: 10,000 messages through lookupd discovery across two
nsqd, each delivered once, with the consumer's RDY never above max_in_flight (read from /stats
while it runs)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import httpx
import trio
from nsq_client import Consumer, Producer
from nsq_testing import DEADLINE, Daemon
from nsq_testing.lookup import lookup_producers, registered

TOPIC = "roundtrip"
CHANNEL = "archive"
COUNT = 10_000
MAX_IN_FLIGHT = 40


async def channel_clients(client: httpx.AsyncClient, nsqd: Daemon) -> list[dict[str, Any]]:
    reply = await client.get(f"http://{nsqd.http_address}/stats",
                             params={"format": "json", "topic": TOPIC, "channel": CHANNEL})
    clients = []
    for topic in reply.json().get("topics") or []:
        for channel in topic.get("channels") or []:
            clients.extend(channel.get("clients") or [])
    return clients


async def test_ten_thousand_messages_through_lookupd_across_two_nsqd(
        run_daemon: Callable[..., Daemon]) -> None:
    lookupd = run_daemon("nsqlookupd")
    nsqds = [run_daemon("nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                        "--broadcast-address=127.0.0.1") for _ in range(2)]
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        for nsqd in nsqds:
            (await http.post(f"http://{nsqd.http_address}/topic/create",
                             params={"topic": TOPIC})).raise_for_status()
        with ExitStack() as stack:
            for nsqd in nsqds:
                stack.enter_context(registered(lookupd, nsqd, [TOPIC]))
            assert len(lookup_producers(lookupd.http_address, TOPIC)) == 2

            received: collections.Counter[bytes] = collections.Counter()
            rdy_totals: list[int] = []
            in_flight_totals: list[int] = []
            done = trio.Event()

            async with Consumer(TOPIC, CHANNEL, lookupd_http_addresses=[lookupd.http_address],
                                max_in_flight=MAX_IN_FLIGHT) as consumer:
                assert sorted(consumer.connections) == sorted(n.tcp_address for n in nsqds)

                async def watch_stats() -> None:
                    while not done.is_set():
                        clients = [c for n in nsqds for c in await channel_clients(http, n)]
                        rdy_totals.append(sum(c["ready_count"] for c in clients))
                        in_flight_totals.append(sum(c["in_flight_count"] for c in clients))
                        await trio.sleep(0.01)

                async def publish() -> None:
                    async with (Producer([n.tcp_address for n in nsqds]) as producer,
                                producer.pipeline(max_pending=500) as pipeline):
                        for i in range(COUNT):
                            await pipeline.pub(TOPIC, b"message %05d" % i)

                with trio.fail_after(60):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(watch_stats)
                        nursery.start_soon(publish)
                        async for message in consumer:
                            received[message.body] += 1
                            if len(received) == COUNT:
                                break
                        # nothing more arrives: every message came exactly once
                        with trio.move_on_after(0.5):
                            async for message in consumer:
                                received[message.body] += 1
                        done.set()

            assert set(received) == {b"message %05d" % i for i in range(COUNT)}
            assert max(received.values()) == 1
            assert len(rdy_totals) > 5
            assert max(rdy_totals) <= MAX_IN_FLIGHT
            assert max(in_flight_totals) <= MAX_IN_FLIGHT
            # both nsqd took part
            for nsqd in nsqds:
                stats = (await http.get(f"http://{nsqd.http_address}/stats",
                                        params={"format": "json", "topic": TOPIC})).json()
                channel = stats["topics"][0]["channels"][0]
                assert channel["message_count"] > COUNT // 4
                assert channel["depth"] == channel["in_flight_count"] == 0
