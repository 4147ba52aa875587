"""TopicLog on real segment files: what readers far apart get from the read cache, and what
retention leaves in memory (a clock set by hand)."""

from __future__ import annotations

from pathlib import Path

from nsqd.clock import FixedClock
from nsqd.readcache import READ_CACHE_BYTES
from nsqd.record import new_records
from nsqd.topiclog import TopicLog

BODY = 1000
COUNT = (READ_CACHE_BYTES * 5 // 4) // BODY  # more than the read cache holds


def open_log(directory: Path, clock: FixedClock, **kwargs: int) -> TopicLog:
    return TopicLog("t", directory, mem_queue_size=0, clock=clock, **kwargs)


async def write(log: TopicLog, count: int, batch: int = 100) -> list[bytes]:
    bodies = [(b"%07d-" % i).ljust(BODY, b"x") for i in range(count)]
    for i in range(0, count, batch):
        await log.append(new_records(bodies[i:i + batch], i, log.clock.wall_ns()), plain=True)
    return bodies


async def read_all(log: TopicLog, offset: int, end: int) -> list[bytes]:
    """Every record from ``offset`` as a channel reads them: ``read``, and when the disk
    must be read first, ``fetch`` (what the log's task does for a waiting reader)."""
    out: list[bytes] = []
    while offset < end:
        runs = log.read(offset, 500)
        if runs is None:
            await log.fetch(offset)
            runs = log.read(offset, 500)
            assert runs is not None, f"offset {offset}: read from disk, and gone again"
        assert runs, f"offset {offset}: nothing stored from here"
        for first, records, _ in runs:
            assert first == offset, f"a gap passed over: {offset} -> {first}"
            out += [r[26:] for r in records]
            offset = first + len(records)
    return out


async def test_a_reader_far_behind_gets_every_record_while_another_fills_the_cache(tmp_path):
    clock = FixedClock()
    log = open_log(tmp_path, clock)
    bodies = await write(log, COUNT)
    await log.close()
    log = open_log(tmp_path, clock)  # nothing in memory: every read is from disk
    # a reader goes through everything, leaving the newest 8 MiB in the read cache
    assert await read_all(log, 0, COUNT) == bodies
    assert log._cache.bytes <= READ_CACHE_BYTES + (1 << 20)
    # a reader from the start: what it asks for is read and kept for it, and it never skips
    # the records between two cached runs
    assert await read_all(log, 0, COUNT) == bodies
    await log.close()


async def test_the_cache_never_passes_over_records_it_does_not_hold(tmp_path):
    clock = FixedClock()
    log = open_log(tmp_path, clock)
    bodies = await write(log, 3000)
    await log.close()
    log = open_log(tmp_path, clock)
    await log.fetch(2000)  # the cache holds 2000.. and not 0..1999
    await log.fetch(0)
    held = log.read(0, 3000)
    assert held is not None
    stop = held[-1][0] + len(held[-1][1])
    assert sum(len(r) for _, r, _ in held) == stop  # contiguous from 0
    assert await read_all(log, 0, 3000) == bodies
    await log.close()


async def test_retention_expiry_removes_segments_and_their_records_in_memory(tmp_path):
    clock = FixedClock()
    log = open_log(tmp_path, clock, max_bytes_per_file=20_000)
    log.retain(ns=60 * 10**9)
    log.needed = lambda: log.end  # every cursor at the end
    bodies = await write(log, 200, batch=10)
    assert log.start == 0
    await log.tidy()
    assert log.start == 0  # kept: not older than the retention
    assert log.read(0, 1) is not None and log.read(0, 1)
    clock.advance(61)
    await log.tidy()
    assert log.start == log.end == 200  # every segment gone, the active one cut
    assert log.read(0, 10) == []  # nothing from memory either
    assert len(list(tmp_path.glob("*.log"))) == 1
    assert bodies
    await log.close()


async def test_no_offset_is_given_twice_after_a_crash_loses_the_memory_tail(tmp_path):
    # Records held in memory (never written) are lost when nsqd is killed; the offsets they
    # had must not go to other messages after the restart: offsets are reserved on disk,
    # ahead, before they are given.
    clock = FixedClock()
    log = TopicLog("t", tmp_path, mem_queue_size=1 << 20, clock=clock)
    await write(log, 300)
    assert log.end == 300 and not list(tmp_path.glob("*.log"))  # all in memory
    crashed = TopicLog("t", tmp_path, mem_queue_size=1 << 20, clock=clock)  # no close()
    assert crashed.end >= 300
    first = await crashed.append(new_records([b"after"], 0, 0), plain=True)
    assert first >= 300
    await crashed.close()  # a clean stop: the next start goes on from the exact end
    again = TopicLog("t", tmp_path, mem_queue_size=1 << 20, clock=clock)
    assert again.end == first + 1


async def test_the_offsets_a_crash_left_unused_are_a_hole(tmp_path):
    clock = FixedClock()
    log = TopicLog("t", tmp_path, mem_queue_size=1 << 20, clock=clock)
    await write(log, 10)
    crashed = TopicLog("t", tmp_path, mem_queue_size=1 << 20, clock=clock)
    assert crashed.hole is not None and crashed.hole[0] == 0 and crashed.hole[1] >= 10
    assert crashed.hole_in(0, crashed.end) == crashed.end
