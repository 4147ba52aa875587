"""No missed wake-ups: a waiting consume gets a job (a message) published during its wait, on
a queue that exists and on one the publish creates, 0 misses in 10,000 waits.

lmstfy's ``GET /api/<ns>/<queue>?timeout=`` and nsqd's ``POST /channel/consume?wait=``, served
by ``serve_http`` on a real loopback listener in this process, each consume and each publish
on its own keep-alive connection. A round starts as many waits as publishes, each after a
random number of scheduler turns, so that every order happens: a publish before the consume
looked, while it looks, after it began waiting, and for a queue the publish creates. Every
consume must get exactly one of the round's jobs. A consume that waits with a job ready in its
queue while nothing else in the process can run will never be woken: that is a miss, and the
test fails at once saying where (not after the long timeout the consumes are given).

In each storage mode (default, ``--mem-queue-size=0``, ``--sync-every=1``) the default run
makes 1,000 waits of each kind (6,000 in all); ``-m slow`` makes the full 10,000.
"""

from __future__ import annotations

import json
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing
from nsq_serving import serve_http
from nsq_testing import HttpConnection
from nsqd.broker import Broker
from nsqd.http_api import build_app
from nsqd.lmstfy.api import build_data_app
from nsqd.lmstfy.queues import JobQueues
from nsqd.lmstfy.state import State
from nsqd.lmstfy.throttle import Throttle
from nsqd.options import Options

WAIT = 600  # what a consume may wait (seconds): far more than the test takes
PER_ROUND = 50  # waits (and publishes) racing in one round
DEADLINE = 120.0  # the most one round may take on a busy machine


#: nsqd's storage modes (see nsq_testing.lmstfy.MODES): a wake-up is never missed in any.
MODES = {"default": {}, "mem-queue-size=0": {"mem_queue_size": 0},
         "sync-every=1": {"sync_every": 1}}


@pytest.fixture(params=list(MODES))
async def broker(request: pytest.FixtureRequest, nursery: trio.Nursery, tmp_path: Path
                 ) -> Broker:
    broker = Broker(Options.defaults(data_path=str(tmp_path), **MODES[request.param]))
    await nursery.start(broker.run)
    return broker


@pytest.fixture
async def connections() -> AsyncIterator[Callable[[tuple[str, int], int],
                                                  Awaitable[list[HttpConnection]]]]:
    opened: list[HttpConnection] = []

    async def connect(address: tuple[str, int], count: int) -> list[HttpConnection]:
        made = [await HttpConnection.open(*address) for _ in range(count)]
        opened.extend(made)
        return made

    yield connect
    for connection in opened:
        await connection.aclose()


async def serving(nursery: trio.Nursery, app: object) -> tuple[str, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.setblocking(False)
    await nursery.start(lambda task_status: serve_http(app, [sock], task_status=task_status))
    host, port = sock.getsockname()[:2]
    return host, port


async def shuffled(rng: random.Random) -> None:
    """A few turns of the scheduler: the other tasks of the round get ahead of this one."""
    for _ in range(rng.randrange(4)):
        await trio.lowlevel.checkpoint()


async def race(rng: random.Random, consumes: list[Callable[[], Awaitable[bytes]]],
               publishes: list[Callable[[], Awaitable[bytes]]],
               ready: Callable[[int], int]) -> tuple[list[bytes], list[bytes]]:
    """Run the consumes and publishes of one round at once; what each got (job ids).
    ``ready(i)``: how many jobs are ready for consume ``i`` now (to tell a miss)."""
    got: list[bytes | None] = [None] * len(consumes)
    sent: list[bytes] = []
    published = trio.Event()

    async def consume(i: int) -> None:
        await shuffled(rng)
        got[i] = await consumes[i]()

    async def publish(publish: Callable[[], Awaitable[bytes]]) -> None:
        await shuffled(rng)
        sent.append(await publish())

    def stuck() -> list[int]:
        return [i for i, job in enumerate(got) if job is None and ready(i)]

    async def watch() -> None:
        """Every publish answered, every task blocked, and a consume still waits with a job
        ready in its queue: nothing will ever wake it. (Seen again after the process was
        idle for a while, so that a disk read or write in a worker thread, which leaves every
        task blocked while it runs, is not taken for one.)"""
        await published.wait()
        while None in got:
            await trio.testing.wait_all_tasks_blocked()
            if stuck():
                await trio.testing.wait_all_tasks_blocked(cushion=0.5)
                if waiting := stuck():
                    raise AssertionError(f"missed wake-ups: {len(waiting)} consumes wait with "
                                         f"jobs ready in their queues: {waiting[:10]}")
            await trio.lowlevel.checkpoint()

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            for i in range(len(consumes)):
                nursery.start_soon(consume, i)
            nursery.start_soon(watch)
            async with trio.open_nursery() as publishers:
                for publish_one in publishes:
                    publishers.start_soon(publish, publish_one)
            published.set()
    return [job for job in got if job is not None], sent


@pytest.fixture(params=[pytest.param(1_000, id="1000"),
                        pytest.param(10_000, id="10000", marks=pytest.mark.slow)])
def total(request: pytest.FixtureRequest) -> int:
    count: int = request.param
    return count


async def test_lmstfy_waits_on_new_and_existing_queues_miss_nothing(
        nursery: trio.Nursery, broker: Broker, tmp_path: Path, connections, total: int) -> None:
    state = State(str(tmp_path))
    state.tokens["ns"] = {"tok": "test"}
    queues = JobQueues(broker, state)
    address = await serving(nursery, build_data_app(queues, state,
                                                    Throttle(state.limits, broker.now)))
    consumers = await connections(address, PER_ROUND)
    publishers = await connections(address, PER_ROUND)
    rng = random.Random(27)
    existing = [f"old{n}" for n in range(5)]
    all_got: list[bytes] = []
    all_sent: list[bytes] = []
    for round_number in range(total // PER_ROUND):
        # odd rounds: queues that exist (and are empty); even ones: queues that do not exist
        # yet, which the round's publishes make
        names = existing if round_number % 2 else [f"new{round_number}x{n}" for n in range(5)]
        queue_of = [names[i % len(names)] for i in range(PER_ROUND)]

        def consume(queue: str, connection: HttpConnection) -> Callable[[], Awaitable[bytes]]:
            async def run() -> bytes:
                status, body = await connection.request(
                    "GET", f"/api/ns/{queue}?token=tok&ttr={WAIT}&timeout={WAIT}")
                assert status == 200, (status, body)
                job_id: str = json.loads(body)["job_id"]
                return job_id.encode()
            return run

        def publish(queue: str, connection: HttpConnection) -> Callable[[], Awaitable[bytes]]:
            async def run() -> bytes:
                status, body = await connection.request("PUT", f"/api/ns/{queue}?token=tok",
                                                        b"job")
                assert status == 201, (status, body)
                job_id: str = json.loads(body)["job_id"]
                return job_id.encode()
            return run

        got, sent = await race(
            rng, [consume(q, c) for q, c in zip(queue_of, consumers, strict=True)],
            [publish(q, c) for q, c in zip(queue_of, publishers, strict=True)],
            lambda i: queues.size("ns", queue_of[i]))  # noqa: B023 - called within the round
        assert sorted(got) == sorted(sent)  # each consume one job of the round, each job once
        all_got += got
        all_sent += sent
    assert len(all_got) == len(set(all_got)) == total
    assert all(queues.size("ns", name) == 0 for name in existing)


async def test_nsqd_waits_on_new_and_existing_channels_miss_nothing(
        nursery: trio.Nursery, broker: Broker, connections, total: int) -> None:
    address = await serving(nursery, build_app(broker))
    consumers = await connections(address, PER_ROUND)
    publishers = await connections(address, PER_ROUND)
    (admin,) = await connections(address, 1)
    rng = random.Random(28)
    existing = [f"old{n}" for n in range(5)]
    async def create(topic: str) -> None:
        for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=c"):
            assert (await admin.request("POST", path))[0] == 200

    for name in existing:
        await create(name)
    all_got: list[bytes] = []
    for round_number in range(total // PER_ROUND):
        if round_number % 2:
            names = existing
        else:  # a new channel on a new topic each: made just before the round, empty
            names = [f"new{round_number}x{n}" for n in range(5)]
            for name in names:
                await create(name)
        queue_of = [names[i % len(names)] for i in range(PER_ROUND)]

        def consume(topic: str, connection: HttpConnection) -> Callable[[], Awaitable[bytes]]:
            async def run() -> bytes:
                status, body = await connection.request(
                    "POST", f"/channel/consume?topic={topic}&channel=c&ttr={WAIT}&wait={WAIT}")
                assert status == 200, (status, body)
                (message,) = json.loads(body)["messages"]
                text: str = message["text"]
                return text.encode()
            return run

        def publish(topic: str, connection: HttpConnection, n: int
                    ) -> Callable[[], Awaitable[bytes]]:
            async def run() -> bytes:
                body = b"%d-%d" % (round_number, n)  # noqa: B023 - called within the round
                status, answer = await connection.request("POST", f"/pub?topic={topic}", body)
                assert (status, answer) == (200, b"OK")
                return body
            return run

        def ready(i: int) -> int:
            topic = broker.topics[queue_of[i]]  # noqa: B023 - called within the round
            return topic.channels["c"].depth

        got, sent = await race(
            rng, [consume(q, c) for q, c in zip(queue_of, consumers, strict=True)],
            [publish(q, c, n) for n, (q, c) in enumerate(zip(queue_of, publishers, strict=True))],
            ready)
        assert sorted(got) == sorted(sent)
        all_got += got
    assert len(all_got) == len(set(all_got)) == total
