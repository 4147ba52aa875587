"""A follower's append (``TopicLog.append_at``) on real segment files: the leader's offsets
and gaps kept, across a restart too; an overlap refused; the index and time lookups right
after; and how it mixes with the log's own (a leader's) appends."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from nsqd.clock import FixedClock
from nsqd.errors import LogError, OffsetOverlap
from nsqd.record import HEADER_SIZE, new_records
from nsqd.topiclog import TopicLog

T0 = 1_700_000_000_000_000_000


def records(tag: str, n: int, timestamp: int = T0) -> list[bytes]:
    return list(new_records([f"{tag}-{i}".encode() for i in range(n)], 0, timestamp))


def bodies(runs: list[tuple[int, object, bool]] | None) -> list[tuple[int, bytes]]:
    """(offset, body) of every record of ``runs``."""
    assert runs is not None
    return [(first + i, bytes(r[HEADER_SIZE:])) for first, rs, _ in runs
            for i, r in enumerate(rs)]  # type: ignore[attr-defined]


def open_log(directory: Path | None, mem: int = 0, **kwargs: int) -> TopicLog:
    return TopicLog("t", directory, mem_queue_size=mem, clock=FixedClock(), **kwargs)


async def read_all(log: TopicLog, offset: int = 0) -> list[tuple[int, bytes]]:
    """Every record from ``offset``, as ``/topic/read`` reads them, one call after another."""
    out: list[tuple[int, bytes]] = []
    while got := bodies(await log.read_at(offset, 1 << 20)):  # type: ignore[arg-type]
        out += got
        offset = got[-1][0] + 1
    return out


EXPECTED = [(0, b"a-0"), (1, b"a-1"), (2, b"a-2"), (10, b"b-0"), (11, b"b-1"),
            (1000, b"c-0")]


async def append_with_gaps(log: TopicLog) -> None:
    await log.append_at(0, records("a", 3))
    await log.append_at(10, records("b", 2))
    await log.append_at(1000, records("c", 1))


@pytest.mark.parametrize("mem", [0, 1 << 20], ids=["written-through", "memory-tail"])
async def test_offsets_and_gaps_are_kept_across_a_restart(tmp_path, mem):
    log = open_log(tmp_path, mem)
    await append_with_gaps(log)
    assert log.end == 1001 and log.start == 0
    assert await read_all(log) == EXPECTED
    await log.close()
    again = open_log(tmp_path, mem)  # from the segments alone (the tail was written at close)
    assert again.end == 1001 and again.start == 0 and again.hole is None
    assert await read_all(again) == EXPECTED
    assert await read_all(again, 3) == EXPECTED[3:]  # from inside a gap: the next batch
    await again.close()


async def test_gaps_across_segments_are_kept_after_a_crash(tmp_path):
    # a segment rolls at 200 bytes: each batch after the first lands in a segment of its own,
    # named after its base; no close (the active segment is scanned at the next start)
    log = open_log(tmp_path, max_bytes_per_file=200)
    await log.append_at(5, records("a", 3))
    await log.append_at(50, records("b", 3))
    await log.append_at(500, records("c", 3))
    names = sorted(p.name for p in tmp_path.glob("*.log"))
    assert names == [f"{base:020d}.log" for base in (5, 50, 500)]
    crashed = open_log(tmp_path)
    assert crashed.start == 5 and crashed.end >= 503  # (the end: the reservation, a hole)
    got = await read_all(crashed)
    assert [o for o, _ in got] == [5, 6, 7, 50, 51, 52, 500, 501, 502]
    await crashed.close()


async def test_an_overlap_is_refused_and_stores_nothing(tmp_path):
    log = open_log(tmp_path, max_bytes_per_file=1 << 20)
    await append_with_gaps(log)
    for first, n in ((999, 1), (1000, 1), (0, 1), (5, 2), (11, 1)):
        with pytest.raises(OffsetOverlap, match=rf"^offsets {first}-{first + n - 1} overlap "
                                                r"the log, whose end is 1001$"):
            await log.append_at(first, records("x", n))
    assert issubclass(OffsetOverlap, LogError)
    assert log.end == 1001 and await read_all(log) == EXPECTED
    await log.close()
    again = open_log(tmp_path)
    assert await read_all(again) == EXPECTED
    await again.close()


async def test_offsets_past_the_largest_are_refused(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(ValueError, match="out of range"):
        await log.append_at(1 << 62, records("x", 1))
    with pytest.raises(ValueError, match="out of range"):
        await log.append_at(-1, records("x", 1))
    assert log.end == 0
    await log.close()


async def test_the_index_and_time_lookups_right_after_follower_appends(tmp_path):
    log = open_log(tmp_path)  # written through: each append a batch in the active segment
    await log.append_at(100, records("a", 2, T0 + 10))
    await log.append_at(200, records("b", 2, T0 + 20))
    await log.append_at(300, records("c", 2, T0 + 30))
    # the segment's index, not the memory tail: read from the files
    files = log._files
    assert files.read(0, 1 << 20)[0][0] == 100
    assert [first for first, _ in files.read(150, 0)] == [200]  # from a gap: the next batch
    assert [first for first, _ in files.read(201, 0)] == [201]
    assert files.read(302, 1 << 20) == []
    assert await log.find_time(T0) == 100
    assert await log.find_time(T0 + 11) == 200
    assert await log.find_time(T0 + 30) == 300
    assert await log.find_time(T0 + 31) == log.end == 302
    await log.close()
    again = open_log(tmp_path)  # the index written at close, read back
    assert await again.find_time(T0 + 11) == 200
    assert [first for first, _ in again._files.read(150, 0)] == [200]
    await again.close()


async def test_a_leader_append_goes_on_from_a_follower_append(tmp_path):
    for mem in (0, 1 << 20):
        log = open_log(tmp_path / str(mem), mem)
        await log.append_at(10, records("f", 2))
        assert await log.append(records("l", 3), plain=True) == 12
        with pytest.raises(OffsetOverlap):
            await log.append_at(14, records("x", 1))
        await log.append_at(15, records("g", 1))
        got = await read_all(log)
        assert got == [(10, b"f-0"), (11, b"f-1"), (12, b"l-0"), (13, b"l-1"), (14, b"l-2"),
                       (15, b"g-0")]
        await log.close()


async def test_appends_of_one_group_commit_are_placed_in_call_order(tmp_path):
    # A leader's append and a follower's waiting for the same write (a group commit): each
    # gets its offsets in the order of the calls; the follower's, now below the end the
    # leader's append moved, is refused, and the leader's is stored.
    log = open_log(tmp_path)
    await log.append_at(0, records("a", 1))
    outcome: dict[str, object] = {}

    async def leader() -> None:
        outcome["leader"] = await log.append(records("l", 2), plain=True)

    async def follower(first: int, tag: str) -> None:
        try:
            await log.append_at(first, records(tag, 1))
            outcome[tag] = "stored"
        except OffsetOverlap as exc:
            outcome[tag] = str(exc)

    # a write under way (the lock held): the three wait for the next one
    async with trio.open_nursery() as nursery, log._io_lock:
            nursery.start_soon(leader)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(follower, 1, "f")  # asked at the end: the leader's took it
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(follower, 3, "g")  # after the leader's: stored
            await trio.testing.wait_all_tasks_blocked()
            assert len(log._commits.waiting) == 3
    assert outcome == {"leader": 1, "f": "offsets 1-1 overlap the log, whose end is 3",
                       "g": "stored"}
    assert await read_all(log) == [(0, b"a-0"), (1, b"l-0"), (2, b"l-1"), (3, b"g-0")]
    await log.close()


async def test_a_memory_only_log_drops_its_oldest_records_across_gaps():
    log = open_log(None, mem=2)
    await log.append_at(0, records("a", 1))
    await log.append_at(5, records("b", 1))
    await log.append_at(10, records("c", 2))  # 4 records, room for 2: the oldest 2 go
    assert log.dropped == 2
    assert bodies(log.read(0, 10)) == [(10, b"c-0"), (11, b"c-1")]
    await log.close()


async def test_unwritten_records_are_counted_across_gaps(tmp_path):
    # --mem-queue-size=4: records past 4 unwritten ones are written. Records every cursor
    # passed are never written; with gaps between them, they are counted as they are, not
    # by their offsets, so the memory queue stays at its size.
    log = open_log(tmp_path, mem=4)
    await log.append_at(0, records("a", 2))
    await log.append_at(10, records("b", 2))
    log.needed = lambda: 11  # every cursor is past a-0, a-1 and b-0
    await log.append_at(20, records("c", 3))  # b-1 and c: 4 unwritten, nothing written
    assert log.written_end == 11 and not list(tmp_path.glob("*.log"))
    await log.append_at(30, records("d", 1))  # 5: the oldest, b-1, is written
    assert log.written_end == 12
    assert log._unwritten == 4
    await log.close()
    again = open_log(tmp_path)
    assert [o for o, _ in await read_all(again)] == [11, 20, 21, 22, 30]
    await again.close()


async def test_a_crashed_followers_hole_is_given_back_and_refetched_at_the_same_offsets(
        tmp_path):
    # a follower killed: its end comes back at the reservation; what it stored ends at 503
    log = open_log(tmp_path)
    await log.append_at(5, records("a", 3))
    await log.append_at(500, records("c", 3))
    crashed = open_log(tmp_path)
    assert crashed.end > 503 and crashed.stored_end == 503 and crashed.hole is not None
    crashed.cut_back(crashed.stored_end)
    assert crashed.end == 503 and crashed.hole is None
    await crashed.append_at(503, records("d", 2))  # the leader's next records, at its offsets
    assert [o for o, _ in await read_all(crashed)] == [5, 6, 7, 500, 501, 502, 503, 504]
    with pytest.raises(LogError):  # stored records are not cut
        crashed.cut_back(504)
    assert crashed.end == 505
    await crashed.close()
    reopened = open_log(tmp_path)
    assert reopened.end == 505 and [o for o, _ in await read_all(reopened)][-1] == 504
    await reopened.close()


@pytest.mark.parametrize("mem", [0, 1 << 20], ids=["written-through", "memory-tail"])
async def test_a_gap_at_the_leaders_tail_is_skipped_and_can_be_given_back(tmp_path, mem):
    log = open_log(tmp_path, mem)
    await log.append_at(0, records("a", 2))
    log.skip_to(40)  # the leader's next offset, past records no cursor needed
    log.skip_to(10)  # (never back)
    assert (log.end, log.stored_end) == (40, 2)
    assert await read_all(log) == [(0, b"a-0"), (1, b"a-1")]
    log.cut_back(2)
    assert log.end == 2
    log.skip_to(40)
    await log.append_at(40, records("b", 1))
    assert await read_all(log) == [(0, b"a-0"), (1, b"a-1"), (40, b"b-0")]
    await log.close()
