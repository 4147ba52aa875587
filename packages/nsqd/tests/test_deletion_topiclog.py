"""A deleted topic's directory (its log's segments and ``offsets`` file, its channels' cursor
journals) is renamed aside at once (``deletion``): nothing of the deleted topic is made again
under the old name afterwards, by a file operation under way in a worker thread when the
rename comes (the rename waits for it) or by one that comes after it (it finds the new name),
and the background removal of the deleted topic never takes a file of a topic made again with
the same name. A real broker on a temporary data path, its files real; each order is made by
holding a file operation in its worker thread (``hold_in_thread``) or a step on the Trio
thread, never by waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from nsqd import logfiles
from nsqd.broker import Broker
from nsqd.channel import Channel
from nsqd.options import Options
from nsqd.segment import Segment
from nsqd.topiclog import TopicLog

Hold = Callable[..., Any]  # conftest's hold_in_thread: a HeldInThread
MARK = "~deleted-"
FIRST_SEGMENT = "00000000000000000000.log"


async def start(nursery: trio.Nursery, path: Path, **options: object) -> Broker:
    broker = Broker(Options.defaults(data_path=str(path), **options))
    await nursery.start(broker.run)
    return broker


async def settled() -> None:
    """Every task waits, and no worker thread is at work."""
    await trio.testing.wait_all_tasks_blocked()
    await trio.testing.wait_all_threads_completed()


def topic_files(data: Path) -> list[str]:
    """Every file and directory under ``data/topics``, relative to it."""
    topics = data / "topics"
    return sorted(str(p.relative_to(topics)) for p in topics.rglob("*")) if topics.exists() else []


async def bodies_of(channel: Channel, broker: Broker) -> list[bytes]:
    await channel.fetch()
    return [m.body for m in channel.peek(100, broker.now())]


class HeldLogRemoval:
    """``TopicLog.delete`` (the background removal of a deleted topic's log) waits until
    ``release``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._released = trio.Event()
        original = TopicLog.delete

        async def held(log: TopicLog) -> None:
            await self._released.wait()
            await original(log)

        monkeypatch.setattr(TopicLog, "delete", held)

    def release(self) -> None:
        self._released.set()


async def test_an_offsets_reservation_under_way_does_not_make_the_deleted_directory_again(
        tmp_path: Path, hold_in_thread: Hold) -> None:
    # A topic's first publish reserves offsets in its directory's ``offsets`` file: the
    # topic is deleted while that write is under way. Made again under the old name, the
    # file would give the next topic of that name a hole at its start.
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        topic = broker.get_topic("t")
        channel = broker.get_channel(topic, "c")
        await channel.cursor.flush(sync=False, force=True)  # (the directory, made)
        reserve = hold_in_thread(logfiles, "_write_offsets")
        topic.log._files.busy = reserve.lock  # type: ignore[assignment]
        nursery.start_soon(broker.publish, "t", broker.new_messages([b"old"]))
        await reserve.under_way()
        assert broker.delete_topic("t")
        reserve.release()
        await settled()  # the publish answered, the deleted topic's files removed
        assert topic_files(tmp_path) == []
        again = broker.get_topic("t")
        assert (again.log.end, again.log.hole) == (0, None)
        assert reserve.waited_for
        nursery.cancel_scope.cancel()


async def test_a_segment_made_under_way_does_not_land_in_a_topic_made_again(
        tmp_path: Path, hold_in_thread: Hold) -> None:
    # With --mem-queue-size=0 a publish rolls into the log's first segment: the topic is
    # deleted while that segment is being made, and made again at once with a channel (its
    # journal makes the directory again, the topic's own). The deleted topic's segment must
    # not be made in there: the new topic's first segment has that name, and it would hold
    # the deleted topic's message.
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, mem_queue_size=0)
        topic = broker.get_topic("t")
        roll = hold_in_thread(Segment, "create")
        topic.log._files.busy = roll.lock  # type: ignore[assignment]
        nursery.start_soon(broker.publish, "t", broker.new_messages([b"old"]))
        await roll.under_way()
        assert broker.delete_topic("t")
        channel = broker.get_channel(broker.get_topic("t"), "c")
        await channel.cursor.flush(sync=False, force=True)  # the directory, made again
        roll.release()
        await settled()
        assert topic_files(tmp_path) == ["t", "t/c.cursor"]
        await broker.publish("t", broker.new_messages([b"new"]))
        assert f"t/{FIRST_SEGMENT}" in topic_files(tmp_path)
        assert await bodies_of(channel, broker) == [b"new"]
        assert roll.waited_for
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, mem_queue_size=0)
        assert await bodies_of(broker.topics["t"].channels["c"], broker) == [b"new"]
        nursery.cancel_scope.cancel()


async def test_the_removal_of_a_topic_that_wrote_nothing_takes_nothing_of_one_made_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A topic that never wrote has no directory to rename: its removal must not go by the
    # old name either, or it removes the directory of the topic made again meanwhile, with
    # a message already acknowledged to its publisher.
    removal = HeldLogRemoval(monkeypatch)
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, mem_queue_size=0)
        broker.get_topic("t")
        assert topic_files(tmp_path) == []
        assert broker.delete_topic("t")
        channel = broker.get_channel(broker.get_topic("t"), "c")
        await broker.publish("t", broker.new_messages([b"new"]))
        removal.release()
        await settled()
        assert f"t/{FIRST_SEGMENT}" in topic_files(tmp_path)
        assert await bodies_of(channel, broker) == [b"new"]
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, mem_queue_size=0)
        assert await bodies_of(broker.topics["t"].channels["c"], broker) == [b"new"]
        nursery.cancel_scope.cancel()


async def test_segments_being_removed_when_the_topic_is_deleted_go_by_their_old_names_only(
        tmp_path: Path, hold_in_thread: Hold) -> None:
    # Segments every cursor is past are being removed (unlinked by name, in a worker thread)
    # when the topic is deleted and made again, with a message in its first segment, named
    # as the deleted topic's first one: the removal must not unlink it.
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, mem_queue_size=0, max_bytes_per_file=1024)
        topic = broker.get_topic("t")
        channel = broker.get_channel(topic, "c")
        for n in range(3):  # a segment each
            await broker.publish("t", broker.new_messages([b"%d" % n * 600]))
        assert len([p for p in topic_files(tmp_path) if p.endswith(".log")]) == 3
        done = 0
        while done < 3:  # every message consumed: the cursor is past every segment
            await channel.fetch()
            for msg in channel.pull(3, 60, broker.now()):
                assert channel.finish_pulled(msg.id)
                done += 1
        removal = hold_in_thread(Segment, "remove")
        topic.log._files.busy = removal.lock  # type: ignore[assignment]
        nursery.start_soon(topic.log.tidy)
        await removal.under_way()
        assert broker.delete_topic("t")
        again = broker.get_channel(broker.get_topic("t"), "c")
        await broker.publish("t", broker.new_messages([b"new"]))
        removal.release()
        await settled()
        assert f"t/{FIRST_SEGMENT}" in topic_files(tmp_path)
        assert await bodies_of(again, broker) == [b"new"]
        assert removal.waited_for
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, mem_queue_size=0, max_bytes_per_file=1024)
        assert await bodies_of(broker.topics["t"].channels["c"], broker) == [b"new"]
        nursery.cancel_scope.cancel()


async def test_a_cursor_flush_that_comes_after_the_topic_is_deleted_makes_nothing_again(
        tmp_path: Path) -> None:
    # A flush of a channel's cursor waits (behind one under way) when the topic is deleted:
    # it must not make the topic's directory again to write the deleted channel's journal.
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        channel = broker.get_channel(broker.get_topic("t"), "c")
        await channel.cursor.flush(sync=False, force=True)
        assert topic_files(tmp_path) == ["t", "t/c.cursor"]
        async with channel.cursor._flush_lock:  # the flush under way
            nursery.start_soon(partial(channel.cursor.flush, sync=False, force=True))
            await trio.testing.wait_all_tasks_blocked()
            assert broker.delete_topic("t")
        await settled()
        assert topic_files(tmp_path) == []
        nursery.cancel_scope.cancel()
