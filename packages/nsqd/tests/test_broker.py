"""The broker in process: its errors, and messages across a restart, with no socket and no
process (a ``Broker`` run in the test's nursery on a temporary data path)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import trio
import trio.testing
from nsqd import cursorfile
from nsqd.__main__ import EXPECTED, _leaves
from nsqd.broker import Broker
from nsqd.client import Client
from nsqd.clock import Clock, VirtualClock
from nsqd.errors import (
    Exiting,
    LogClosed,
    LogError,
    NsqdError,
    StartError,
    StoreFailed,
    SubscribeRefused,
)
from nsqd.metadata import decode
from nsqd.options import Options
from nsqd.topic import Topic


async def start(nursery: trio.Nursery, path: Path, *, clock: Clock | None = None,
                **options: object) -> Broker:
    broker = Broker(Options.defaults(data_path=str(path), **options), clock)
    await nursery.start(broker.run)
    return broker


async def test_publish_errors(nursery: trio.Nursery, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start(nursery, tmp_path)
    await broker.publish("t", broker.new_messages([b"a"]))
    failure: LogError = LogError("write failed - no space left on device")

    async def failing(self: Topic, msgs: object) -> None:
        raise failure

    monkeypatch.setattr(Topic, "put", failing)
    with pytest.raises(StoreFailed, match=r"^write failed - no space left on device$") as info:
        await broker.publish("t", broker.new_messages([b"b"]))
    assert info.value.__cause__ is failure
    assert broker.health == "NOK - write failed - no space left on device"
    failure = LogClosed()
    with pytest.raises(Exiting, match=r"^exiting$"):
        await broker.publish("t", broker.new_messages([b"c"]))
    monkeypatch.undo()
    await broker.publish("t", broker.new_messages([b"d"]))
    assert broker.health == "OK"
    broker.exiting = True
    with pytest.raises(Exiting):
        await broker.publish("t", broker.new_messages([b"e"]))


async def test_subscribe_limit(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start(nursery, tmp_path, max_channel_consumers=1)
    broker.subscribe(broker.new_client("127.0.0.1:1"), "t", "c")
    with pytest.raises(SubscribeRefused, match=r"^consumers for t:c exceeds limit of 1$"):
        broker.subscribe(broker.new_client("127.0.0.1:2"), "t", "c")


async def test_messages_and_deferred_ones_survive_a_restart(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        channel = broker.get_channel(broker.get_topic("t"), "c")
        await broker.publish("t", broker.new_messages([b"now", b"also now"]))
        await broker.publish("t", broker.new_messages([b"later"], defer=3600))
        client: Client = broker.new_client("127.0.0.1:1")
        broker.subscribe(client, "t", "c")
        nursery.cancel_scope.cancel()  # a clean shutdown: everything is saved
    assert not channel.in_flight
    state = cursorfile.load(tmp_path / "topics" / "t" / "c.cursor")
    assert state is not None and [extra[0] for extra in state.extras] == [2]  # the DPUB
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        channel = broker.topics["t"].channels["c"]
        assert channel.depth == 2 and len(channel.deferred) == 1
        (msg,) = channel.deferred
        assert msg.body == b"later" and msg.deadline > broker.now() + 3000
        nursery.cancel_scope.cancel()


async def test_a_deferred_message_keeps_what_is_left_of_its_delay_across_a_restart(
        mock_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    """A DPUB of 5 s, a clean restart 3 s later: it is due 5 s after it was published, not 5 s
    after the restart. Both brokers read Trio's virtual clock, moved by hand (the restart
    reads and writes files in worker threads: a clock that jumped whenever every task waits
    would move while they run)."""
    clock = VirtualClock()

    async def at(seconds: float) -> None:
        mock_clock.jump(published + seconds - trio.current_time())
        await trio.testing.wait_all_tasks_blocked()  # the queue scan has run

    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, clock=clock)
        broker.get_channel(broker.get_topic("later"), "c")
        published = trio.current_time()
        await broker.publish("later", broker.new_messages([b"in five seconds"], defer=5))
        await at(3)
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, clock=clock)
        channel = broker.topics["later"].channels["c"]
        assert len(channel.deferred) == 1
        await channel.fetch()  # the log read back from disk, as an HTTP consume does first
        await at(4.9)
        assert channel.pull(1, 60.0, broker.now()) == []
        await at(5.2)
        await channel.fetch()
        assert [m.body for m in channel.pull(1, 60.0, broker.now())] == [b"in five seconds"]
        nursery.cancel_scope.cancel()


async def test_unreadable_metadata_is_a_start_error(tmp_path: Path) -> None:
    (tmp_path / "nsqd.dat").write_bytes(b"{not json")
    broker = Broker(Options.defaults(data_path=str(tmp_path)))
    with pytest.raises((StartError, BaseExceptionGroup)) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
    leaves = _leaves(info.value)
    assert [type(leaf) for leaf in leaves] == [StartError]
    assert str(leaves[0]).startswith("failed to load metadata - ")


def test_every_leaf_of_a_group_is_reported() -> None:
    bug = ZeroDivisionError("x")
    group = ExceptionGroup("outer", [StartError("a"), ExceptionGroup("inner", [OSError(98, "b"),
                                                                            bug])])
    leaves = _leaves(group)
    assert [type(leaf) for leaf in leaves] == [StartError, OSError, ZeroDivisionError]
    assert [isinstance(leaf, EXPECTED) for leaf in leaves] == [True, True, False]
    assert issubclass(StartError, NsqdError) and not issubclass(StartError, RuntimeError)


async def test_metadata_is_replaced_whole_with_mode_0600(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        broker.get_channel(broker.get_topic("t"), "c")
        nursery.cancel_scope.cancel()  # a clean shutdown writes nsqd.dat
    path = tmp_path / "nsqd.dat"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    topics, warnings = decode(path.read_bytes())
    assert [(t.name, [c.name for c in t.channels]) for t in topics] == [("t", ["c"])]
    assert warnings == []


def deleting(data: Path) -> list[Path]:
    """What deletions moved aside and have not removed yet."""
    while True:
        try:
            return [p for p in data.rglob("*") if "~deleted-" in p.name]
        except FileNotFoundError:  # a directory removed while it was walked: look again
            continue


async def test_a_topic_deleted_and_published_to_at_once_keeps_the_new_messages(
        tmp_path: Path) -> None:
    # The old log's files are removed in a worker thread after the delete: they must not take
    # the new topic's files with them (found by bench.http, whose runs delete their topic and
    # publish to it again: a 500 for a publish), nor be read by the new topic.
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, mem_queue_size=0)  # written before the OK
        broker.get_channel(broker.get_topic("t"), "c")
        await broker.publish("t", broker.new_messages([b"old %d" % i for i in range(10)]))
        assert broker.delete_topic("t")
        channel = broker.get_channel(broker.get_topic("t"), "c")
        assert channel.depth == 0  # nothing of the deleted topic
        await broker.publish("t", broker.new_messages([b"new %d" % i for i in range(5)]))
        with trio.fail_after(30):
            while deleting(tmp_path):
                await trio.sleep(0.01)
        assert channel.depth == 5
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, mem_queue_size=0)
        channel = broker.topics["t"].channels["c"]
        assert channel.depth == 5
        await channel.fetch()  # from disk
        msgs = channel.pull(10, 60, broker.clock.now())
        assert [m.body for m in msgs] == [b"new %d" % i for i in range(5)]
        nursery.cancel_scope.cancel()


async def test_a_channel_deleted_and_made_again_starts_anew(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        topic = broker.get_topic("t")
        channel = broker.get_channel(topic, "c")
        await broker.publish("t", broker.new_messages([b"a", b"b", b"c"]))
        for msg in channel.pull(2, 60, broker.clock.now()):
            assert channel.finish_pulled(msg.id)
        await channel.cursor.flush(channel.cursor_state, sync=False, force=True)
        assert broker.delete_channel(topic, "c")
        again = broker.get_channel(topic, "c")
        assert again.cursor.mark_delete == topic.log.end  # as a new channel: from the end
        await broker.publish("t", broker.new_messages([b"d"]))
        await again.cursor.flush(again.cursor_state, sync=False, force=True)
        with trio.fail_after(30):
            while deleting(tmp_path):
                await trio.sleep(0.01)
        assert cursorfile.load(tmp_path / "topics" / "t" / "c.cursor") is not None
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        channel = broker.topics["t"].channels["c"]
        await channel.fetch()
        assert [m.body for m in channel.pull(10, 60, broker.clock.now())] == [b"d"]
        nursery.cancel_scope.cancel()


async def test_a_start_removes_what_deletions_left(tmp_path: Path) -> None:
    left = tmp_path / "topics" / "gone~deleted-0123abcd"
    left.mkdir(parents=True)
    (left / "00000000000000000000.log").write_bytes(b"x")
    (tmp_path / "topics" / "t").mkdir()
    (tmp_path / "topics" / "t" / "c.cursor~deleted-89abcdef").write_bytes(b"x")
    async with trio.open_nursery() as nursery:
        await start(nursery, tmp_path)
        await trio.testing.wait_all_tasks_blocked()
        await trio.testing.wait_all_threads_completed()  # the removal, in a worker thread
        assert deleting(tmp_path) == []
        assert (tmp_path / "topics" / "t").is_dir()
        nursery.cancel_scope.cancel()


async def test_a_topic_published_to_again_right_after_its_deletion_starts_empty(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    # mem_queue_size 0: every message on disk, so the deleted topic has segments and an
    # offsets file to remove while the new one writes its own
    broker = await start(nursery, tmp_path, mem_queue_size=0)
    for round_ in range(20):
        old = broker.get_topic("t")
        channel = broker.get_channel(old, "c")
        await broker.publish("t", broker.new_records([b"old %d" % round_] * 3))
        assert channel.depth == 3
        assert broker.delete_topic("t")
        # at once, before the deleted log's files are removed in the background
        await broker.publish("t", broker.new_records([b"new"]))
        topic = broker.topics["t"]
        assert topic is not old and (topic.depth, topic.log.start, topic.log.end) == (1, 0, 1)
        assert broker.health == "OK"
        await _removed_but(tmp_path / "topics", "t")  # the deleted one's directory
        assert broker.topics["t"].depth == 1
        broker.delete_topic("t")
    await _removed_but(tmp_path / "topics")


async def _removed_but(directory: Path, *names: str) -> None:
    """Wait (10 s at most) until ``directory`` holds only ``names`` (removal runs in a
    worker thread)."""
    with trio.fail_after(10):
        while sorted(p.name for p in directory.iterdir()) != sorted(names):
            await trio.sleep(0.01)


async def test_a_publish_its_topics_deletion_overtakes_is_exiting_and_nsqd_stays_healthy(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    # Go's nsqd answers a put to a topic that is exiting with "exiting" (HTTP 503 EXITING) and
    # leaves its health alone: only a failed write makes it unhealthy
    broker = await start(nursery, tmp_path, mem_queue_size=0)  # every publish writes
    broker.get_topic("t")
    outcomes: list[str] = []

    async def publish(body: bytes) -> None:
        try:
            await broker.publish("t", broker.new_messages([body]))
        except Exiting:
            outcomes.append("exiting")
        else:
            outcomes.append("stored")

    nursery.start_soon(publish, b"first")  # its write starts in a worker thread
    await trio.testing.wait_all_tasks_blocked()
    nursery.start_soon(publish, b"second")  # waits for the next group commit
    await trio.testing.wait_all_tasks_blocked()
    assert broker.delete_topic("t")
    with trio.fail_after(30):
        while len(outcomes) < 2:
            await trio.sleep(0.01)
    assert "exiting" in outcomes  # (the first too, if its write ends after the deletion)
    assert broker.health == "OK"
