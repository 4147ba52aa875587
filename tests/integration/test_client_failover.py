"""nsqd killed mid-stream: consumers reconnect when it comes back (direct and through lookupd),
and a producer with two nsqd fails over to the one still alive."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio
from nsq_client import ConnectError, ConnectionClosed, Consumer, NSQError, Producer
from nsq_testing import DEADLINE, Daemon, until
from nsq_testing.lookup import registered

TOPIC = "failover"


def restartable_nsqd(run_daemon: Callable[..., Daemon], data: Path, *extra: str) -> Daemon:
    data.mkdir(exist_ok=True)
    return run_daemon("nsqd", f"--data-path={data}", *extra)


def same_ports(nsqd: Daemon) -> list[str]:
    return [f"--tcp-address={nsqd.tcp_address}", f"--http-address={nsqd.http_address}"]


async def publish_forever(address: str, sent: list[bytes], stop: trio.Event) -> None:
    """Publish numbered messages one at a time, riding out the nsqd's absence."""
    async with Producer(address) as producer:
        i = 0
        while not stop.is_set():
            body = b"m%06d" % i
            try:
                await producer.pub(TOPIC, body)
            except NSQError:
                await trio.sleep(0.05)
                continue
            sent.append(body)
            i += 1
            await trio.sleep(0.002)


async def test_consumer_reconnects_when_the_killed_nsqd_returns(
        run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    nsqd = restartable_nsqd(run_daemon, tmp_path / "data")
    received: list[bytes] = []
    sent: list[bytes] = []
    stop = trio.Event()
    async with Consumer(TOPIC, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=20,
                        lookupd_poll_interval=0.2) as consumer:

        async def consume() -> None:
            async for message in consumer:
                received.append(message.body)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            nursery.start_soon(publish_forever, nsqd.tcp_address, sent, stop)
            await until(lambda: len(received) >= 50)
            nsqd.kill()  # mid-stream: the publisher and the consumer are both busy
            await until(lambda: consumer.connections == [])
            killed_at = len(sent)
            nsqd = restartable_nsqd(run_daemon, tmp_path / "data", *same_ports(nsqd))
            await until(lambda: consumer.connections == [nsqd.tcp_address])
            # messages published after the restart reach the consumer
            await until(lambda: len(sent) >= killed_at + 50)
            marker = sent[killed_at + 49]
            await until(lambda: marker in received)
            stop.set()
            consumer.stop()
    assert len(set(received)) == len(received)  # nothing delivered twice


async def test_consumer_finds_the_returning_nsqd_through_lookupd(
        run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    lookupd = run_daemon("nsqlookupd")
    args = (f"--lookupd-tcp-address={lookupd.tcp_address}", "--broadcast-address=127.0.0.1")
    nsqd = restartable_nsqd(run_daemon, tmp_path / "data", *args)
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        (await http.post(f"http://{nsqd.http_address}/topic/create", params={"topic": TOPIC})
         ).raise_for_status()
    with registered(lookupd, nsqd, [TOPIC]):
        async with Consumer(TOPIC, "c", lookupd_http_addresses=[lookupd.http_address],
                            lookupd_poll_interval=0.2, lookupd_poll_jitter=0.0) as consumer:
            assert consumer.connections == [nsqd.tcp_address]
            nsqd.kill()
            await until(lambda: consumer.connections == [])
            nsqd = restartable_nsqd(run_daemon, tmp_path / "data", *args, *same_ports(nsqd))
            async with Producer(nsqd.tcp_address) as producer:
                await producer.pub(TOPIC, b"after the restart")
            await until(lambda: consumer.connections == [nsqd.tcp_address])
            with trio.fail_after(DEADLINE):
                async for message in consumer:
                    assert message.body == b"after the restart"
                    break


async def test_producer_fails_over_to_the_other_nsqd(run_daemon: Callable[..., Daemon]) -> None:
    first, second = run_daemon("nsqd"), run_daemon("nsqd")
    async with Producer([first.tcp_address, second.tcp_address], strategy="failover") as producer:
        for i in range(100):
            await producer.pub(TOPIC, b"%d" % i)
        first.kill()
        for i in range(100, 300):  # not one of these fails
            await producer.pub(TOPIC, b"%d" % i)
        async with producer.pipeline(max_pending=50) as pipeline:
            for i in range(300, 1000):
                await pipeline.pub(TOPIC, b"%d" % i)
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        stats = (await http.get(f"http://{second.http_address}/stats",
                                params={"format": "json", "topic": TOPIC})).json()
    assert stats["topics"][0]["message_count"] >= 900


async def test_round_robin_producer_rides_out_a_dead_nsqd(run_daemon: Callable[..., Daemon]) -> None:
    first, second = run_daemon("nsqd"), run_daemon("nsqd")
    async with Producer([first.tcp_address, second.tcp_address]) as producer:
        async with producer.pipeline(max_pending=20) as pipeline:
            for i in range(200):
                await pipeline.pub(TOPIC, b"%d" % i)
        second.kill()
        async with producer.pipeline(max_pending=20) as pipeline:
            for i in range(200, 400):
                await pipeline.pub(TOPIC, b"%d" % i)
        first.kill()
        # the connection may not look dead yet: then the publish is lost with it
        with pytest.raises((ConnectError, ConnectionClosed)):
            await producer.pub(TOPIC, b"nowhere")
