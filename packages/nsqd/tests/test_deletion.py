"""A channel's own files (its own queue, its dead letters: internal logs in its topic's
directory, ``<channel>#own`` and ``#dead``) when the channel or its topic is deleted and
made again at once: the new channel starts with none of the deleted one's messages, and the
removal of the deleted one's files, which runs in the background, never takes the new
channel's. A real broker on a temporary data path, its files real.

The background removal is held (``HeldRemovals``) until the test has made the channel again
and stored new messages in it: the order the race needs, every time, with no sleep.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from nsqd import cursorfile
from nsqd.broker import Broker
from nsqd.channel import Channel
from nsqd.clock import SystemClock
from nsqd.errors import LogClosed
from nsqd.options import Options
from nsqd.privatelog import PrivateLog

MARK = "~deleted-"
Hold = Callable[[object, str], Any]  # conftest's hold_in_thread: a HeldInThread
OPTIONS = pytest.mark.parametrize("options", [{}, {"mem_queue_size": 0}, {"sync_every": 1}],
                                  ids=["default", "mem-queue-size=0", "sync-every=1"])


async def start(nursery: trio.Nursery, path: Path, **options: object) -> Broker:
    broker = Broker(Options.defaults(data_path=str(path), **options))
    await nursery.start(broker.run)
    return broker


class HeldRemovals:
    """``PrivateLog.delete`` (the background removal of a deleted channel's queues) waits
    until ``release``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        self._released = trio.Event()
        self._done: list[trio.Event] = []
        original = PrivateLog.delete

        async def held(queue: PrivateLog) -> None:
            done = trio.Event()
            self._done.append(done)
            self.names.append(queue.name)
            try:
                await self._released.wait()
                await original(queue)
            finally:
                done.set()

        monkeypatch.setattr(PrivateLog, "delete", held)

    async def waiting(self) -> list[str]:
        """The names of the queues whose removal waits (once every task has got that far)."""
        await trio.testing.wait_all_tasks_blocked()
        return sorted(self.names)

    async def release(self) -> None:
        """Let every held removal go, and wait until each has finished."""
        self._released.set()
        with trio.fail_after(30):
            for done in self._done:
                await done.wait()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldRemovals:
    return HeldRemovals(monkeypatch)


async def dead_letters(broker: Broker, channel: Channel, bodies: list[bytes]) -> None:
    """``bodies`` published, pulled and given up on: dead letters of ``channel``, stored."""
    await broker.publish(channel.topic_name, broker.new_messages(bodies))
    await channel.fetch()
    msgs = channel.pull(len(bodies), 60, broker.now())
    assert [m.body for m in msgs] == bodies
    for msg in msgs:
        assert channel.dead_letter_pulled(msg.id)
    await broker.store_dead_letters(channel)
    assert broker.health == "OK"


async def own_messages(broker: Broker, channel: Channel, bodies: list[bytes]) -> None:
    """``bodies`` in ``channel``'s own queue (on disk): dead letters respawned."""
    await dead_letters(broker, channel, bodies)
    assert await channel.respawn(len(bodies)) == len(bodies)
    assert channel.own is not None and channel.own.disk_depth == len(bodies)


async def own_and_dead(broker: Broker, channel: Channel, own: bytes, dead: bytes) -> None:
    """A message in ``channel``'s own queue, and a dead letter."""
    await dead_letters(broker, channel, [own, dead])
    assert await channel.respawn(1) == 1  # the oldest
    assert channel.own is not None and channel.own.disk_depth == 1
    assert channel.dead_letter_count == 1


async def waiting_bodies(channel: Channel, now: float) -> list[bytes]:
    await channel.fetch()  # what is on disk only, read
    return [m.body for m in channel.peek(100, now)]


async def settled() -> None:
    """Every task waits, and no worker thread is at work."""
    await trio.testing.wait_all_tasks_blocked()
    await trio.testing.wait_all_threads_completed()


def queue_files(data: Path, queue: str) -> list[str]:
    """The files of the internal log ``queue`` (``t:c#dead``...) under ``data``."""
    topic, log = queue.split(":")
    directory = data / "topics" / topic / log
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def marked(directory: Path) -> list[str]:
    """What a deletion moved aside in ``directory`` (the data path, ``topics``, a topic's)."""
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if MARK in p.name)


@OPTIONS
async def test_a_channel_made_again_at_once_has_none_of_the_deleted_ones_dead_letters(
        options: dict[str, object], held: HeldRemovals, tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        topic = broker.get_topic("t")
        await dead_letters(broker, broker.get_channel(topic, "c"), [b"old 1", b"old 2"])
        assert queue_files(tmp_path, "t:c#dead")
        assert broker.delete_channel(topic, "c")
        assert queue_files(tmp_path, "t:c#dead") == []  # out of the way at once
        again = broker.get_channel(topic, "c")
        assert again.dead_letter_count == 0
        assert [name.split(" (")[0] for name in await held.waiting()] == ["t:c#dead"]
        await held.release()
        await settled()  # the journal removed too, in a worker thread
        assert again.dead_letter_count == 0 and marked(tmp_path / "topics" / "t") == []
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        again = broker.topics["t"].channels["c"]
        assert again.dead_letter_count == 0 and await again.peek_dead(10) == []
        nursery.cancel_scope.cancel()


@OPTIONS
async def test_the_dead_letters_of_a_channel_made_again_survive_the_old_ones_removal(
        options: dict[str, object], held: HeldRemovals, tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        topic = broker.get_topic("t")
        await dead_letters(broker, broker.get_channel(topic, "c"), [b"old 1", b"old 2"])
        assert broker.delete_channel(topic, "c")
        again = broker.get_channel(topic, "c")
        assert again.dead_letter_count == 0
        await dead_letters(broker, again, [b"new"])  # written before the old files go
        assert len(await held.waiting()) == 1
        await held.release()
        assert [m.body for m in await again.peek_dead(10)] == [b"new"]
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        again = broker.topics["t"].channels["c"]
        assert [m.body for m in await again.peek_dead(10)] == [b"new"]
        nursery.cancel_scope.cancel()


@OPTIONS
async def test_the_own_queue_of_a_channel_made_again_keeps_its_new_messages_only(
        options: dict[str, object], held: HeldRemovals, tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        topic = broker.get_topic("t")
        await own_messages(broker, broker.get_channel(topic, "c"), [b"old 1", b"old 2"])
        assert queue_files(tmp_path, "t:c#own")
        assert broker.delete_channel(topic, "c")
        assert queue_files(tmp_path, "t:c#own") == []
        again = broker.get_channel(topic, "c")
        assert again.depth == 0
        await own_messages(broker, again, [b"new 1", b"new 2"])
        assert [name.split(" (")[0] for name in await held.waiting()] == ["t:c#dead",
                                                                            "t:c#own"]
        await held.release()
        assert again.depth == 2
        assert await waiting_bodies(again, broker.now()) == [b"new 1", b"new 2"]
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        again = broker.topics["t"].channels["c"]
        assert again.depth == 2
        assert await waiting_bodies(again, broker.now()) == [b"new 1", b"new 2"]
        assert again.dead_letter_count == 0  # all respawned
        nursery.cancel_scope.cancel()


@OPTIONS
async def test_a_topic_made_again_at_once_has_none_of_its_deleted_channels_messages(
        options: dict[str, object], held: HeldRemovals, tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        channel = broker.get_channel(broker.get_topic("t"), "c")
        await own_and_dead(broker, channel, b"old own", b"old dead")
        assert broker.delete_topic("t")
        assert queue_files(tmp_path, "t:c#own") == queue_files(tmp_path, "t:c#dead") == []
        again = broker.get_channel(broker.get_topic("t"), "c")
        assert again.depth == 0 and again.dead_letter_count == 0
        await own_and_dead(broker, again, b"new own", b"new dead")
        assert len(await held.waiting()) == 2
        await held.release()
        assert await waiting_bodies(again, broker.now()) == [b"new own"]
        assert [m.body for m in await again.peek_dead(10)] == [b"new dead"]
        await settled()  # the log's directory and the journal removed too, in worker threads
        assert marked(tmp_path / "topics") == marked(tmp_path / "topics" / "t") == []
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        again = broker.topics["t"].channels["c"]
        assert await waiting_bodies(again, broker.now()) == [b"new own"]
        assert [m.body for m in await again.peek_dead(10)] == [b"new dead"]
        nursery.cancel_scope.cancel()


@OPTIONS
async def test_what_a_deletion_left_at_a_stop_is_removed_at_the_next_start(
        options: dict[str, object], held: HeldRemovals, tmp_path: Path) -> None:
    # The removal is held, and nsqd stops before it runs: as after a crash, the deleted
    # channel's files are left aside, with the mark.
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        topic = broker.get_topic("t")
        channel = broker.get_channel(topic, "c")
        await own_and_dead(broker, channel, b"old own", b"old dead")
        broker.get_channel(topic, "kept")
        assert broker.delete_channel(topic, "c")
        assert len(await held.waiting()) == 2
        nursery.cancel_scope.cancel()
    left = marked(tmp_path / "topics" / "t")
    assert {name.split(MARK)[0] for name in left} >= {"c#own", "c#dead"}
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, **options)
        await settled()  # the clean-up at the start has run, in a worker thread
        assert marked(tmp_path / "topics" / "t") == []
        assert list(broker.topics["t"].channels) == ["kept"]
        again = broker.get_channel(broker.topics["t"], "c")
        assert again.depth == 0 and again.dead_letter_count == 0
        nursery.cancel_scope.cancel()


async def test_a_start_removes_a_deleted_queues_files_but_not_its_bad_ones(
        tmp_path: Path) -> None:
    for name in ("t:c#dead~deleted-0123abcd.diskqueue.meta.dat",
                 "t:c#dead~deleted-0123abcd.diskqueue.000000.dat",
                 "t:c#dead~deleted-0123abcd.diskqueue.meta.dat.123.tmp",
                 "t:c#own~deleted-89abcdef.diskqueue.000003.dat"):
        (tmp_path / name).write_bytes(b"x")
    bad = tmp_path / "t:c#dead~deleted-0123abcd.diskqueue.000001.dat.bad"
    bad.write_bytes(b"x")  # for an operator to look at, as a deletion leaves it
    async with trio.open_nursery() as nursery:
        await start(nursery, tmp_path)
        await settled()
        assert marked(tmp_path) == [bad.name]
        nursery.cancel_scope.cancel()


async def test_dead_letters_stored_after_their_channel_is_deleted_harm_nothing(
        held: HeldRemovals, tmp_path: Path) -> None:
    # A dead letter decided just before the deletion is stored by the pump just after it:
    # no error for anyone, nsqd stays healthy, and nothing lands in the new channel.
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        topic = broker.get_topic("t")
        channel = broker.get_channel(topic, "c")
        await dead_letters(broker, channel, [b"stored"])
        await broker.publish("t", broker.new_messages([b"dying"]))
        await channel.fetch()
        (msg,) = channel.pull(1, 60, broker.now())
        assert channel.dead_letter_pulled(msg.id)  # pending, not stored yet
        assert broker.delete_channel(topic, "c")
        again = broker.get_channel(topic, "c")
        await broker.store_dead_letters(channel)
        assert broker.health == "OK"
        await held.release()
        await settled()
        assert again.dead_letter_count == 0 and marked(tmp_path / "topics" / "t") == []
        nursery.cancel_scope.cancel()


async def test_a_task_waiting_for_records_ends_when_the_log_is_moved_aside(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    # Records on disk only, and the log's task (which would read them) not running: the wait
    # for them ends only with the deletion (a dead-letter peek's). On the virtual clock, a
    # wait that does not end fails at once.
    directory = tmp_path / "t" / "c#dead"
    private = PrivateLog("t:c#dead", directory, clock=SystemClock())
    await private.put([b"\0" * 26])
    await private.close()
    private = PrivateLog("t:c#dead", directory, clock=SystemClock())
    assert private.depth() == 1 and not private.ready()
    ended: list[str] = []

    async def wait() -> None:
        with pytest.raises(LogClosed):
            await private.wait_readable()
        ended.append("closed")

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            private.detach()
    assert ended == ["closed"]
    assert not directory.exists()
    await private.delete()
    assert list((tmp_path / "t").iterdir()) == []


async def test_a_journal_write_under_way_when_the_channel_is_deleted_goes_aside_too(
        tmp_path: Path, hold_in_thread: Hold) -> None:
    # A journal's first write (and one every 1 MiB) replaces the file by name: were it let
    # go on after the rename, it would make the journal again under the old name, for the
    # channel made again to load.
    path = tmp_path / "c.cursor"
    journal = cursorfile.CursorJournal(path)
    rewrite = hold_in_thread(cursorfile, "write_atomically")
    journal._busy = rewrite.lock  # type: ignore[assignment]
    state = cursorfile.CursorState(5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.to_thread.run_sync, partial(journal.append, state,
                                                                     sync=False)))
        await rewrite.moving_aside(journal.detach)
    assert not path.exists()
    assert journal.path.name.startswith("c.cursor~deleted-")
    assert cursorfile.load(journal.path) == state
    journal.remove()
    assert list(tmp_path.iterdir()) == []
