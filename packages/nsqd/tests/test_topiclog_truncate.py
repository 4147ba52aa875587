"""A follower's truncation (``TopicLog.truncate``, KIP-101) on real segment files: records
stored at or past the offset go from memory and disk, the batch holding the offset is cut
at its boundary and its records below kept, later segments unlinked; a clean restart and a
start after a crash (no close: the old process's files as it left them) find the log cut,
and the follower appends at the offset again."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_topiclog_follower import open_log, read_all, records

BEFORE = [(0, b"a-0"), (1, b"a-1"), (2, b"a-2"), (3, b"b-0"), (4, b"b-1")]


async def three_batches(log) -> None:  # type: ignore[no-untyped-def]
    await log.append_at(0, records("a", 3))
    await log.append_at(3, records("b", 4))  # one batch, 3..6: the cut falls inside it
    await log.append_at(10, records("c", 2))


@pytest.mark.parametrize("mem", [0, 1 << 20], ids=["written-through", "memory-tail"])
@pytest.mark.parametrize("restart", ["close", "crash"])
async def test_records_past_the_offset_go_and_stay_gone(tmp_path: Path, mem: int,
                                                        restart: str) -> None:
    log = open_log(tmp_path, mem)
    await three_batches(log)
    if mem:
        await log.close()  # on disk, then in memory as well
        log = open_log(tmp_path, mem)
        await log.append_at(12, records("d", 2))  # and a memory tail past it
    await log.truncate(5)
    assert log.end == 5 and log.stored_end == 5
    assert await read_all(log) == BEFORE
    await log.append_at(5, records("e", 2))  # the new leader's records, at its offsets
    expected = [*BEFORE, (5, b"e-0"), (6, b"e-1")]
    assert await read_all(log) == expected
    if restart == "close":
        await log.close()
    else:
        expected = expected if not mem else BEFORE  # (a crash loses the memory tail)
    again = open_log(tmp_path, mem)
    assert again.stored_end == expected[-1][0] + 1
    assert await read_all(again) == expected
    await again.close()


async def test_later_segments_are_unlinked(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_bytes_per_file=200)  # a segment per batch
    await log.append_at(5, records("a", 3))
    await log.append_at(50, records("b", 3))
    await log.append_at(500, records("c", 3))
    await log.truncate(51)
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [
        f"{base:020d}.log" for base in (5, 50)]
    assert log.end == 51
    assert [o for o, _ in await read_all(log)] == [5, 6, 7, 50]
    crashed = open_log(tmp_path, max_bytes_per_file=200)  # no close
    assert crashed.stored_end == 51
    assert [o for o, _ in await read_all(crashed)] == [5, 6, 7, 50]
    crashed.cut_back(crashed.stored_end)  # (the hole a crash leaves, given back as a follower does)
    await crashed.append_at(51, records("d", 1))
    assert [o for o, _ in await read_all(crashed)] == [5, 6, 7, 50, 51]


async def test_a_cut_at_a_batch_boundary_and_to_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_bytes_per_file=200)
    await three_batches(log)
    await log.truncate(3)
    assert log.end == 3 and await read_all(log) == BEFORE[:3]
    await log.truncate(0)
    assert log.end == 0 and log.stored_end == 0 and await read_all(log) == []
    await log.append_at(0, records("z", 1))
    await log.close()
    again = open_log(tmp_path)
    assert await read_all(again) == [(0, b"z-0")]
    await again.close()


async def test_a_gap_past_the_records_is_given_back_as_cut_back_does(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await log.append_at(0, records("a", 2))
    log.skip_to(9)
    await log.truncate(4)
    assert log.end == 4
    await log.truncate(9)  # (not below the end: nothing)
    assert log.end == 4
    await log.close()


async def test_a_cut_below_every_segment_keeps_one_named_after_the_offset(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, max_bytes_per_file=200)
    await log.append_at(5, records("a", 3))
    await log.append_at(50, records("b", 3))
    await log.truncate(2)
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"{2:020d}.log"]
    assert log.end == 2 and await read_all(log) == []
    await log.append_at(2, records("c", 2))
    await log.close()
    again = open_log(tmp_path)
    assert await read_all(again) == [(2, b"c-0"), (3, b"c-1")]
    await again.close()
