"""TTL, delays, timeouts and lmstfy's delay/ttl/ttr/tries on Trio's virtual clock: every wait
here is ``trio.sleep`` under ``MockClock(autojump_threshold=0)``, which takes no real time,
and nsqd reads that clock through ``nsqd.clock.VirtualClock`` (monotonic and wall time
together). Each case looks just before and just after the moment that matters.

Channels and topics in memory (``virtual_world``: the broker's queue scan runs over them), and
lmstfy's queues on a real ``Broker`` with its data in a temporary directory (``queues``).
Each test names its clock (``autojump_clock``, or ``io_clock`` where a broker writes files in
worker threads): pytest-trio runs a test on the clock among its own arguments (a fixture's is
not enough)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from nsqd.broker import Broker
from nsqd.clock import VirtualClock
from nsqd.lmstfy.queues import JobQueues, job_json
from nsqd.lmstfy.state import State
from nsqd.message import QueuedMessage
from nsqd.options import Options
from nsqd.record import new_records

S = 1_000_000_000  # ns


def message(world, n: int, *, ttl: float = 0, delay: float = 0) -> QueuedMessage:
    """A new message ``m<n>``, expiring ``ttl`` seconds from now, due ``delay`` from now."""
    now = world.clock.wall_ns()
    return QueuedMessage(b"%016x" % n, b"m%d" % n, now, expires=now + int(ttl * S) if ttl else 0,
                         due=now + int(delay * S) if delay else 0)


def bodies(msgs: list[QueuedMessage]) -> list[bytes]:
    return [m.body for m in msgs]


def pull(world, channel, n: int = 10, ttr: float = 600) -> list[QueuedMessage]:
    return channel.pull(n, ttr, world.clock.now())


# -- message TTL ---------------------------------------------------------------------------

async def test_a_message_ttl_runs_out(autojump_clock, virtual_world):
    world = virtual_world
    topic = world.topic()
    ch = world.channel(topic)
    await topic.put([message(world, 0, ttl=10), message(world, 1, ttl=3600)])
    await trio.sleep(9.9)
    assert bodies(ch.peek(5, world.clock.now())) == [b"m0", b"m1"]
    await trio.sleep(0.2)  # past the first one's 10 s
    assert bodies(ch.peek(5, world.clock.now())) == [b"m1"]
    assert bodies(pull(world, ch)) == [b"m1"]
    assert (ch.expired_count, ch.depth, ch.cursor.mark_delete) == (1, 0, 1)


async def test_a_topic_default_ttl_reaches_messages_without_their_own(autojump_clock, virtual_world):
    world = virtual_world
    topic = world.topic()
    ch = world.channel(topic)
    topic.message_ttl = 5
    await topic.put([message(world, 0), message(world, 1, ttl=60)])
    await topic.put_records(new_records([b"r"], 2, world.clock.wall_ns()))  # PUB's path
    await trio.sleep(4.9)
    assert bodies(ch.peek(5, world.clock.now())) == [b"m0", b"m1", b"r"]
    await trio.sleep(0.2)
    assert bodies(pull(world, ch)) == [b"m1"]  # its own TTL wins
    assert ch.expired_count == 2


async def test_expired_messages_go_to_the_dead_letters_when_the_channel_says_so(
        autojump_clock, virtual_world):
    world = virtual_world
    topic = world.topic()
    ch = world.channel(topic)
    ch.configure(dead_letter_expired=True)
    await topic.put([message(world, 0, ttl=1), message(world, 1)])
    await trio.sleep(1.5)
    assert bodies(pull(world, ch)) == [b"m1"]
    assert (ch.expired_count, ch.dead_letter_count) == (1, 1)
    assert bodies(ch.dead_letters.peek(5)) == [b"m0"]


# -- DPUB, REQ with a delay, timeouts --------------------------------------------------------

async def test_a_dpub_is_delivered_when_due_not_before(autojump_clock, virtual_world):
    world = virtual_world
    topic = world.topic()
    ch = world.channel(topic)
    await topic.put([message(world, 0, delay=30), message(world, 1)])
    assert (ch.depth, len(ch.deferred)) == (1, 1)
    assert bodies(pull(world, ch)) == [b"m1"]
    await trio.sleep(29.8)
    assert pull(world, ch) == []
    await trio.sleep(0.4)  # due (the scan runs every 100 ms)
    assert (ch.depth, len(ch.deferred)) == (1, 0)
    assert bodies(pull(world, ch)) == [b"m0"]


async def test_a_deferred_message_that_expires_before_it_is_due_is_never_delivered(
        autojump_clock, virtual_world):
    world = virtual_world
    topic = world.topic()
    ch = world.channel(topic)
    await topic.put([message(world, 0, delay=30, ttl=20), message(world, 1, ttl=20)])
    (m1,) = pull(world, ch)
    assert ch.requeue_pulled(m1.id, 60.0, world.clock.now())  # a REQ past its expiry
    await trio.sleep(61)
    assert pull(world, ch) == []
    assert (ch.expired_count, ch.depth, len(ch.deferred)) == (2, 0, 0)
    assert ch.cursor.mark_delete == 2  # both done with


async def test_a_req_with_a_delay_comes_back_when_due(autojump_clock, virtual_world):
    world = virtual_world
    topic = world.topic()
    ch = world.channel(topic)
    await topic.put([message(world, 0)])
    (msg,) = pull(world, ch)
    assert ch.requeue_pulled(msg.id, 15.0, world.clock.now())
    await trio.sleep(14.8)
    assert pull(world, ch) == [] and len(ch.deferred) == 1
    await trio.sleep(0.4)
    (again,) = pull(world, ch)
    assert (again.body, again.attempts, ch.requeue_count) == (b"m0", 2, 1)


async def test_an_unfinished_message_comes_back_after_its_timeout_then_is_dead(autojump_clock, virtual_world):
    world = virtual_world
    topic = world.topic()
    ch = world.channel(topic)
    ch.configure(max_attempts=2)
    await topic.put([message(world, 0)])
    (msg,) = pull(world, ch, ttr=30)
    await trio.sleep(29.8)
    assert (len(ch.in_flight), ch.depth) == (1, 0)
    await trio.sleep(0.4)
    assert (len(ch.in_flight), ch.depth, ch.timeout_count) == (0, 1, 1)
    (msg,) = pull(world, ch, ttr=30)
    assert msg.attempts == 2
    await trio.sleep(30.2)  # its last attempt timed out: a dead letter, not waiting
    assert (len(ch.in_flight), ch.depth, ch.timeout_count, ch.dead_letter_count) == (0, 0, 2, 1)


# -- lmstfy: delay, ttl, ttr, tries, respawn -------------------------------------------------

@pytest.fixture
async def queues(io_clock_moving, nursery: trio.Nursery, tmp_path: Path) -> JobQueues:
    """lmstfy's queues on a broker whose clock is the virtual one."""
    broker = Broker(Options.defaults(data_path=str(tmp_path)), VirtualClock())
    await nursery.start(broker.run)
    return JobQueues(broker, State(str(tmp_path)))


async def publish(queues: JobQueues, *, delay: int = 0, ttl: int = 0, tries: int = 1) -> str:
    (job_id,) = await queues.publish("ns", "q", [b"job"], delay=delay, ttl=ttl, tries=tries,
                                     attributes=None)
    return job_id


async def consume(queues: JobQueues, ttr: int = 600) -> dict[str, object] | None:
    """A job as lmstfy's consume answers it, or None (404)."""
    taken = await queues.take("ns", ["q"], 1, ttr)
    if not taken:
        return None
    (one,) = taken
    return job_json("ns", one.queue, one.msg, queues.broker.clock.wall_ns())


async def test_a_delayed_job_is_ready_when_due(io_clock, queues):
    job_id = await publish(queues, delay=30)
    assert await queues.find("ns", "q", job_id) is not None  # GET /job finds it meanwhile
    await trio.sleep(29.8)
    assert (queues.size("ns", "q"), await queues.peek("ns", "q"), await consume(queues)) == (0, None,
                                                                                        None)
    await trio.sleep(0.4)
    assert queues.size("ns", "q") == 1
    job = await consume(queues)
    assert job is not None and job["job_id"] == job_id and job["elapsed_ms"] >= 30_000


async def test_a_job_ttl_runs_out_while_it_waits(io_clock, queues):
    job_id = await publish(queues, ttl=10)
    await trio.sleep(9.5)
    found = await queues.find("ns", "q", job_id)
    assert found is not None and job_json("ns", "q", found, queues.broker.clock.wall_ns())[
        "ttl"] == 1  # seconds left, rounded up as Redis's TTL
    await trio.sleep(1)
    assert await queues.find("ns", "q", job_id) is None  # GET /job: 404
    # lmstfy's ready list keeps the entry until a consume meets it: counted, shown stale
    assert queues.size("ns", "q") == 1
    head = await queues.peek("ns", "q")
    assert head is not None and head[1] is True
    assert await consume(queues) is None and queues.size("ns", "q") == 0


async def test_a_job_whose_ttl_runs_out_in_flight_never_comes_back(io_clock, queues):
    """lmstfy's timer drops an entry whose job is gone when its ttr ends: never ready again."""
    job_id = await publish(queues, ttl=10, tries=3)
    assert await consume(queues, ttr=30) is not None
    await trio.sleep(10.5)
    assert await queues.find("ns", "q", job_id) is None
    await trio.sleep(20)  # past its ttr
    assert (queues.size("ns", "q"), await queues.peek("ns", "q"), await consume(queues)) == (0, None,
                                                                                        None)


async def test_ttr_tries_dead_letter_and_respawn(io_clock, queues):
    job_id = await publish(queues, tries=2)
    job = await consume(queues, ttr=30)
    assert job is not None and job["remain_tries"] == 1
    await trio.sleep(29.8)
    assert queues.size("ns", "q") == 0  # in flight
    await trio.sleep(0.4)
    assert queues.size("ns", "q") == 1  # its ttr ran out: back, a try left
    job = await consume(queues, ttr=30)
    assert job is not None and (job["job_id"], job["remain_tries"]) == (job_id, 0)
    await trio.sleep(30.2)  # no try left: a dead letter
    assert queues.size("ns", "q") == 0
    count, head = await queues.dead_letter_head("ns", "q")
    assert count == 1 and head is not None
    assert await queues.find("ns", "q", job_id) is not None  # dead letters never expire
    assert await queues.respawn("ns", "q", 1, 0) == 1
    job = await consume(queues, ttr=30)
    assert job is not None and (job["job_id"], job["remain_tries"]) == (job_id, 0)  # one try
    await trio.sleep(30.2)
    assert queues.dead_letter_size("ns", "q") == 1  # and dead again after it
    assert await queues.respawn("ns", "q", 1, 10) == 1  # with a ttl this time
    await trio.sleep(10.5)
    assert await queues.find("ns", "q", job_id) is None
    assert await consume(queues) is None


# -- TTL through the broker, from memory and from disk ---------------------------------------

@pytest.mark.parametrize("mem_queue_size", [10000, 0], ids=["memory", "disk"])
async def test_an_expired_message_is_never_delivered_from_memory_or_disk(
        mock_clock, nursery: trio.Nursery, tmp_path: Path, mem_queue_size: int) -> None:
    """A paused channel's messages expire meanwhile, whether the log holds them in memory or
    on disk. The clock is moved by hand here (``mock_clock``): reads from disk run in worker
    threads, and a clock that jumped whenever every task waits would move while they run."""
    broker = Broker(Options.defaults(data_path=str(tmp_path), mem_queue_size=mem_queue_size),
                    VirtualClock())
    await nursery.start(broker.run)
    channel = broker.get_channel(broker.get_topic("ttl"), "c")
    channel.pause()
    await broker.publish("ttl", broker.new_messages([b"short-lived"], ttl=1))
    await broker.publish("ttl", broker.new_messages([b"a", b"b"], ttl=3600))
    mock_clock.jump(1.5)
    channel.unpause()
    await channel.fetch()  # as an HTTP consume does first
    assert bodies(channel.pull(10, 60.0, broker.now())) == [b"a", b"b"]
    assert (channel.expired_count, channel.depth, len(channel.in_flight)) == (1, 0, 2)
