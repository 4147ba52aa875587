"""Backoff against a real nsqd: a handler failing five times in a row makes the consumer send
RDY 0 and then a single RDY 1 each time; successes bring it back to full RDY (read from the
bytes the consumer wrote, and from nsqd's /stats)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
import trio
from nsq_client import Consumer, Message, Producer
from nsq_common import BodySpec, CommandReader
from nsq_testing import DEADLINE, Daemon

TOPIC = "backoff"
CHANNEL = "worker"


class RecordingStream(trio.abc.Stream):
    """A TCP stream to nsqd that keeps a copy of every command the client sends."""

    def __init__(self, inner: trio.abc.Stream, log: list[tuple[float, bytes, list[bytes]]]) -> None:
        self.inner = inner
        self.log = log
        self._magic = True
        self._reader = CommandReader(lambda name, params: BodySpec(1 << 24, "E", "%d", "%d %d")
                                     if name in (b"IDENTIFY", b"AUTH", b"PUB") else None)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        payload = bytes(data)
        if self._magic:
            payload, self._magic = payload[4:], False
        self._reader.receive_data(payload)
        while (cmd := self._reader.next_event()) is not None:
            self.log.append((trio.current_time(), cmd.name, cmd.params))
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_five_failures_send_rdy_0_then_rdy_1_and_success_resumes(
        run_daemon: Callable[..., Daemon], caplog: pytest.LogCaptureFixture) -> None:
    nsqd = run_daemon("nsqd")
    sent: list[tuple[float, bytes, list[bytes]]] = []

    async def connector(host: str, port: int) -> trio.abc.Stream:
        return RecordingStream(await trio.open_tcp_stream(host, port), sent)

    outcomes = iter([False] * 5 + [True] * 100)
    first_success = trio.Event()

    async def handler(message: Message) -> None:
        if not next(outcomes):
            raise RuntimeError("downstream unavailable")
        first_success.set()

    multiplier = 0.02
    async with Producer(nsqd.tcp_address) as producer:
        # One job first: it fails five times in a row (requeued at once, delivered again on
        # each probe); once it went through, more jobs arrive to climb back with.
        await producer.pub(TOPIC, b"job 0")
        async with Consumer(TOPIC, CHANNEL, nsqd_tcp_addresses=[nsqd.tcp_address],
                            max_in_flight=8, connector=connector, backoff_multiplier=multiplier,
                            default_requeue_delay=0.0, max_attempts=0) as consumer:
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(consumer.run, handler)
                    await first_success.wait()
                    await producer.mpub(TOPIC, [b"job %d" % i for i in range(1, 11)])
                    while consumer.stats.messages_finished < 11:
                        await trio.sleep(0.05)
                    # back to the full window, as nsqd sees it
                    async with httpx.AsyncClient(timeout=DEADLINE) as http:
                        while True:
                            stats = (await http.get(f"http://{nsqd.http_address}/stats", params={
                                "format": "json", "topic": TOPIC})).json()
                            clients = stats["topics"][0]["channels"][0]["clients"]
                            if clients and clients[0]["ready_count"] == 8:
                                break
                            await trio.sleep(0.05)
                    consumer.stop()

    rdys = [int(params[0]) for _, name, params in sent if name == b"RDY"]
    # first the full window, then five failures and four successes each answered by a pause
    # (RDY 0) and a probe (RDY 1); the fifth success restores the window.
    assert rdys[0] == 8
    assert rdys[1:19] == [0, 1] * 9
    assert rdys[19] == 8
    assert consumer.backoff_level == 0
    # the pauses grew and shrank: 2x, 4x, 8x, 16x, 32x the multiplier, then back down, as the
    # consumer planned them (its log) ...
    expected = [2, 4, 8, 16, 32, 16, 8, 4, 2]
    planned = [r.args[2] for r in caplog.records
               if r.name == "nsq_client" and "backing off for" in str(r.msg)]
    assert planned == pytest.approx([factor * multiplier for factor in expected])
    # ... and as it kept them: each probe after its pause, and together no shorter than half the
    # plan (a lower bound only a consumer that does not wait could miss: how late each RDY gets
    # onto the wire on a busy machine moves single 40 ms pauses both ways, so none is timed)
    probes = [t for t, name, params in sent if name == b"RDY" and params == [b"1"]]
    pauses = [b - a for a, b in zip(
        [t for t, name, params in sent if name == b"RDY" and params == [b"0"]], probes, strict=True)]
    assert len(pauses) == len(expected) and all(pause > 0 for pause in pauses)
    assert sum(pauses) >= 0.5 * sum(expected) * multiplier
    reqs = [params for _, name, params in sent if name == b"REQ"]
    assert len(reqs) == 5 and all(p[1] == b"0" for p in reqs)
