"""Segment against real files: format, index, reads, time lookups, torn and damaged files, a
full disk (a real tmpfs) and a writer killed mid-write (a real child process)."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nsqd.errors import LogError, NsqdError
from nsqd.segment import BATCH_HEAD, MAGIC, DiskRun, Segment, SegmentError

LOG = logging.getLogger("test_segment")
T0 = 1_700_000_000_000_000_000  # ns


def rec(offset: int, ts: int | None = None, pad: bytes = b"") -> bytes:
    """A record that says which offset it belongs to: timestamp, attempts, id, a body whose
    size varies with the offset."""
    stamp = T0 + offset * 1000 if ts is None else ts
    return struct.pack(">qH", stamp, 0) + f"{offset:016d}".encode() + b"x" * (offset % 37) + pad


PAD = b"p" * 200  # the records of the killed writer: long enough that writing takes a while


def run(first: int, n: int) -> DiskRun:
    return (first, [rec(o) for o in range(first, first + n)])


def everything(seg: Segment, step: int = 300) -> dict[int, bytes]:
    """Every record of the segment, read ``step`` bytes at a time (about), by offset."""
    out: dict[int, bytes] = {}
    offset = 0
    while True:
        runs = seg.read(offset, step)
        if not runs:
            return out
        for first, records in runs:
            for k, record in enumerate(records):
                assert first + k not in out
                out[first + k] = record
        offset = runs[-1][0] + len(runs[-1][1])


def index_state(seg: Segment) -> tuple[Any, ...]:
    return (seg.base, seg.size, seg.end, seg.count, seg.max_timestamp, seg.batches,
            list(seg._index.ends), list(seg._index.positions), list(seg._index.maxes))


def batch_positions(seg: Segment) -> list[int]:
    return [*seg._index.positions, seg.size]


def open_segment(path: Path, *, active: bool) -> Segment:
    return Segment.open(path, active=active, logger=LOG)


@pytest.fixture
def made(tmp_path: Path) -> Segment:
    """A segment of 7 batches with a gap: offsets 100..109, 115..314, 400, 401..2900, 3000.."""
    seg = Segment.create(tmp_path, 100, logger=LOG)
    seg.append([run(100, 10)])
    seg.append([run(115, 200), run(400, 1), run(401, 2500)])
    seg.append([run(3000, 3)])
    seg.append([run(3003, 1)])
    seg.append([run(3004, 5)])
    return seg


# ---- round trips -------------------------------------------------------------------------------


def test_create_writes_the_magic_and_names_the_file(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 42)
    assert seg.path == tmp_path / "00000000000000000042.log"
    assert seg.path.read_bytes() == MAGIC
    assert (seg.base, seg.size, seg.end, seg.count, seg.max_timestamp) == (42, 8, 42, 0, 0)
    with pytest.raises(FileExistsError):
        Segment.create(tmp_path, 42)
    seg.close()


def test_batches_on_disk_are_as_documented(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 0)
    records = [rec(5), rec(6, ts=T0 + 99)]
    seg.append([(5, records)])
    data = seg.path.read_bytes()
    body = b"".join(struct.pack(">I", len(r)) + r for r in records)
    assert data == MAGIC + BATCH_HEAD.pack(24 + len(body), 5, 2, T0 + 5000, zlib.crc32(body)) + body
    assert seg.size == len(data)
    assert (seg.end, seg.count, seg.max_timestamp) == (7, 2, T0 + 5000)
    seg.close()


def test_every_offset_reads_back(made: Segment) -> None:
    expected = {o: rec(o) for r in ([100, 10], [115, 200], [400, 2501], [3000, 9])
                for o in range(r[0], r[0] + r[1])}
    assert everything(made) == expected
    assert (made.end, made.count, made.batches) == (3009, len(expected), 7)
    for offset in [0, 99, 100, 105, 109, 110, 114, 115, 314, 315, 399, 400, 401, 2900, 2901, 2999, 3008]:
        runs = made.read(offset, 1)
        first = min(o for o in expected if o >= offset)
        assert runs[0][0] == first
        assert runs[0][1][0] == expected[first]
    assert made.read(3009, 1 << 20) == []
    assert made.read(10**12, 1 << 20) == []


def test_reads_merge_consecutive_batches_into_runs(made: Segment) -> None:
    runs = made.read(0, 1 << 30)
    assert [(first, len(records)) for first, records in runs] == [
        (100, 10), (115, 200), (400, 2501), (3000, 9)]


def test_read_takes_whole_batches_up_to_about_max_bytes(made: Segment) -> None:
    positions = batch_positions(made)
    # Batch 0 alone, whatever max_bytes is below its size...
    for max_bytes in (0, 1, positions[1] - positions[0] - 1):
        assert [(f, len(r)) for f, r in made.read(100, max_bytes)] == [(100, 10)]
    # ...and exactly batches 0 and 1 when both fit.
    assert [(f, len(r)) for f, r in made.read(100, positions[2] - positions[0])] == [
        (100, 10), (115, 200)]
    # The last batch too, when it fits.
    last = made.batches - 1
    assert made.read(3003, positions[last + 1] - positions[last - 1])[0][1][-1] == rec(3008)
    # Starting in the middle of the big batch: the rest of it.
    assert [(f, len(r)) for f, r in made.read(2000, 10)] == [(2000, 901)]


def test_append_refuses_bad_offsets_and_writes_nothing(made: Segment) -> None:
    before = made.path.read_bytes()
    with pytest.raises(ValueError, match="below the segment's end"):
        made.append([run(3008, 1)])
    with pytest.raises(ValueError, match="below the segment's end"):
        made.append([run(4000, 5), run(4004, 1)])  # the second overlaps the first
    with pytest.raises(ValueError, match="empty run"):
        made.append([run(4000, 1), (4001, [])])
    with pytest.raises(ValueError, match="shorter than 8 bytes"):
        made.append([(4000, [rec(4000), b"short"])])
    with pytest.raises(ValueError, match="one timestamp per run"):
        made.append([run(4000, 1)], timestamps=[])
    assert made.path.read_bytes() == before
    assert made.end == 3009
    made.append([])
    assert made.path.read_bytes() == before


def test_given_timestamps_and_records_without_any(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 0)
    seg.append([(0, [b"a", b""]), (2, [b"bcd"])], timestamps=[50, 40])
    assert seg.max_timestamp == 50
    assert seg.read(0, 100) == [(0, [b"a", b"", b"bcd"])]
    assert seg.find_time(0) is None  # no record has a timestamp of its own
    seg.close()
    again = open_segment(seg.path, active=True)
    assert again.read(1, 100) == [(1, [b"", b"bcd"])]
    assert again.max_timestamp == 50
    again.close()


def test_max_timestamp_is_exact_with_the_sign_bit(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 0)
    seg.append([(0, [rec(0, ts=-5), rec(1, ts=-7)])])
    assert seg.max_timestamp == -5
    seg.append([(2, [rec(2, ts=-9), rec(3, ts=3), rec(4, ts=-1)])])
    assert seg.max_timestamp == 3
    seg.close()


def test_many_runs_in_one_append(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 0)
    runs = [run(3 * i, 2) for i in range(600)]  # 1,200 buffers, over IOV_MAX: joined
    seg.append(runs)
    assert seg.batches == 600 and seg.count == 1200
    assert seg.read(0, 1 << 30) == runs
    seg.close()
    again = open_segment(seg.path, active=True)
    assert again.read(0, 1 << 30) == runs
    again.close()


def test_big_batches_across_the_scans_reads(tmp_path: Path) -> None:
    """Batches larger than the scan's 1 MiB reads, and batches across their edges."""
    seg = Segment.create(tmp_path, 0)
    big = b"B" * 1000
    offset = 0
    for n in (1500, 300, 1, 700, 2200, 3, 900):
        seg.append([(offset, [rec(o) + big for o in range(offset, offset + n)])])
        offset += n
    expected = index_state(seg)
    seg.close()
    whole = seg.path.read_bytes()
    again = open_segment(seg.path, active=True)
    assert index_state(again) == expected
    again.close()
    # Torn in the middle of the big last batch.
    seg.path.write_bytes(whole[: len(whole) - 500_000])
    again = open_segment(seg.path, active=True)
    assert again.end == offset - 900 and again.size == expected[7][-1]
    assert again.read(offset - 901, 1)[0][1] == [rec(offset - 901) + big]
    again.close()


def test_records_of_one_size(tmp_path: Path) -> None:
    """Reads slice records of one size without their size loop; sizes that only average to one
    size (even with their low bytes alike) take the loop."""
    seg = Segment.create(tmp_path, 0)
    same = [bytes([65 + i % 26]) * 100 for i in range(300)]
    seg.append([(0, same)], timestamps=[1])
    batches = [
        [b"a" * 10, b"b" * 30],  # 20 on average
        [b"c" * 44, b"d" * 556],  # 300 on average: the last byte of each size is 0x2c
        [b"e" * 64, b"f" * 131_136],  # 65,600 on average: the two low bytes alike
        [b"g" * 7] * 5,
        [b"", b""],
    ]
    offset = 300
    for records in batches:
        seg.append([(offset, records)], timestamps=[1])
        offset += len(records)
    expected = [*same, *(r for records in batches for r in records)]
    assert seg.read(0, 1 << 30) == [(0, expected)]
    for start in (0, 1, 150, 299, 300, 301, 302, 304, 305, 310):
        assert seg.read(start, 1 << 30) == [(start, expected[start:])], start
    seg.close()


def test_appends_refused_at_the_top_of_the_offsets(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 2**63 - 3)
    with pytest.raises(ValueError, match="out of range"):
        seg.append([(2**63 - 3, [rec(0)] * 3)])
    seg.append([(2**63 - 3, [rec(0)] * 2)])
    assert seg.end == 2**63 - 1
    with pytest.raises(ValueError, match="out of range"):
        Segment.create(tmp_path, 2**63)
    seg.close()
    small = Segment.create(tmp_path, 0)
    with pytest.raises(ValueError, match="shorter than 8 bytes"):
        small.append([(0, [b"tiny"])])
    small.close()


def test_a_failed_write_that_cannot_be_cut_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The file descriptor swapped for a read-only one of the same file: the write and the
    ftruncate after it both fail (EBADF, EINVAL), as on a file system gone bad. The next
    append cuts the file back first."""
    caplog.set_level(logging.ERROR, logger=LOG.name)
    seg = Segment.create(tmp_path, 0, logger=LOG)
    seg.append([run(0, 3)])
    good = seg.size
    writable = seg._fd
    seg._fd = os.open(seg.path, os.O_RDONLY)
    with pytest.raises(OSError):
        seg.append([run(3, 2)])
    assert "cannot cut back a failed write" in caplog.text
    assert (seg.size, seg.end, seg.batches) == (good, 3, 1)
    os.close(seg._fd)
    seg._fd = writable
    with open(seg.path, "ab") as f:
        f.write(b"half a batch")  # what the failed write could have left
    seg.append([run(3, 2)])
    seg.close()
    again = open_segment(seg.path, active=True)
    assert everything(again) == {o: rec(o) for o in range(5)}
    assert again.size == again.path.stat().st_size
    again.close()


def test_a_file_cut_under_an_open_segment(made: Segment) -> None:
    os.truncate(made.path, batch_positions(made)[-2] + 10)
    with pytest.raises(SegmentError, match="short read"):
        made.read(3004, 100)
    assert made.read(100, 1)[0][0] == 100


RECORD = st.one_of(st.binary(max_size=40), st.sampled_from([b"", b"12345678", b"x" * 300]))
BATCH = st.tuples(st.integers(0, 3),  # the gap before it
                  st.one_of(st.lists(RECORD, min_size=1, max_size=12),
                            st.tuples(RECORD, st.integers(1, 12)).map(lambda t: [t[0]] * t[1])))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(BATCH, min_size=1, max_size=4), max_size=8), st.data())
def test_reads_match_what_was_appended(appends: list[list[tuple[int, list[bytes]]]],
                                       data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as directory:
        seg = Segment.create(Path(directory), 5)
        model: dict[int, bytes] = {}
        offset = 5
        for batches in appends:
            runs: list[DiskRun] = []
            for gap, records in batches:
                offset += gap
                runs.append((offset, records))
                model.update(enumerate(records, offset))
                offset += len(records)
            seg.append(runs, timestamps=[1] * len(runs))
        seg.write_index()
        seg.close()
        for active in (False, True):
            again = open_segment(seg.path, active=active)
            assert again.end == offset and again.count == len(model)
            for _ in range(5):
                start = data.draw(st.integers(0, offset + 1))
                max_bytes = data.draw(st.integers(0, 2000))
                runs = again.read(start, max_bytes)
                got = {o: r for first, records in runs for o, r in enumerate(records, first)}
                after = sorted(o for o in model if o >= start)
                # What came back is what is there, in order from the first at or after start,
                # with nothing skipped between, and one record at least when there is one.
                assert list(got) == after[: len(got)]
                assert all(got[o] == model[o] for o in got)
                assert bool(got) == bool(after)
                assert all(a[0] + len(a[1]) < b[0] for a, b in itertools.pairwise(runs))
            again.close()


# ---- the index --------------------------------------------------------------------------------


def test_index_load_equals_scan(made: Segment, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    made.sync()
    made.write_index()
    made.close()
    scanned = open_segment(made.path, active=True)  # the active one is always scanned...
    assert not made.index_path.exists()  # ...and its index, about to be out of date, goes
    scanned.write_index()
    loaded = open_segment(made.path, active=False)
    assert index_state(loaded) == index_state(scanned) == index_state(made)
    assert everything(loaded) == everything(scanned)
    assert caplog.text == ""
    for seg in (loaded, scanned):
        seg.close()


def test_index_of_an_empty_segment(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 7)
    seg.write_index()
    seg.close()
    again = open_segment(seg.path, active=False)
    assert index_state(again) == (7, 8, 7, 0, 0, 0, [], [], [])
    assert again.read(0, 100) == [] and again.find_time(0) is None
    again.close()


def test_a_bad_index_is_not_used(made: Segment, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    expected = index_state(made)
    made.write_index()
    good = made.index_path.read_bytes()
    made.close()
    damaged = {
        "bad crc": good[:30] + bytes([good[30] ^ 1]) + good[31:],
        "too short": good[:20],
        "wrong length": good[:-28] + good[-4:],
        "wrong magic": b"NSQIDX9\n" + good[8:],
    }
    for why, data in damaged.items():
        made.index_path.write_bytes(data)
        caplog.clear()
        seg = open_segment(made.path, active=False)
        assert index_state(seg) == expected, why
        assert "index not used" in caplog.text, why
        seg.close()


def test_an_index_of_another_size_or_segment_is_not_used(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    seg = Segment.create(tmp_path, 0, logger=LOG)
    seg.append([run(0, 5)])
    seg.write_index()
    seg.append([run(5, 5)])  # the segment grew after its index was written
    seg.close()
    again = open_segment(seg.path, active=False)
    assert again.end == 10 and "made for" in caplog.text
    again.close()

    # Segment 0's file and index copied as segment 10's: the index names base 0, so the file
    # is scanned, and its batches, all below base 10, are damage: kept aside, cut off.
    again = open_segment(seg.path, active=False)
    again.write_index()
    again.close()
    other = tmp_path / f"{10:020d}.log"
    shutil.copy(seg.path, other)
    shutil.copy(seg.index_path, other.with_suffix(".index"))
    caplog.clear()
    data = other.read_bytes()
    seg = open_segment(other, active=False)
    assert (seg.end, seg.count, seg.size, seg.damaged_batches) == (10, 0, 8, 1)
    assert "is not the segment's" in caplog.text and "offsets out of order" in caplog.text
    assert other.with_name(other.name + ".damaged-8").read_bytes() == data[8:]
    seg.close()


def test_an_index_whose_last_batch_does_not_agree_is_not_used(made: Segment,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    made.write_index()
    made.close()
    # Same size, different last batch: 5 records at 3004 become 5 records at 3005.
    last = batch_positions(made)[-2]
    with open(made.path, "r+b") as f:
        f.seek(last + 4)
        f.write(struct.pack(">Q", 3005))
    seg = open_segment(made.path, active=False)
    assert "does not agree" in caplog.text
    # The crc covers the records, not the head (as Kafka's does not cover its base offset):
    # the scan takes the batch where its head now puts it.
    assert seg.end == 3010 and seg.read(3004, 100)[-1] == (3005, [rec(o) for o in range(3004, 3009)])
    seg.close()


def rewrite_index(seg: Segment, **changes: Any) -> None:
    """Rewrite ``seg``'s index with some fields changed and a crc that holds."""
    data = bytearray(seg.index_path.read_bytes()[:-4])
    base, size, count, batches = struct.unpack_from(">QQQQ", data, 8)
    fields = {"base": base, "size": size, "count": count, "batches": batches, **changes}
    struct.pack_into(">QQQQ", data, 8, fields["base"], fields["size"], fields["count"],
                     fields["batches"])
    if "last_position" in changes:
        struct.pack_into(">Q", data, 40 + 16 * batches - 8, changes["last_position"])
    if "drop" in changes:
        del data[-changes["drop"] :]
    seg.index_path.write_bytes(bytes(data) + struct.pack(">I", zlib.crc32(data)))


def test_indexes_whose_crc_holds_but_do_not_fit(made: Segment, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    expected = index_state(made)
    made.write_index()
    good = made.index_path.read_bytes()
    made.close()
    for changes, why in [({"drop": 8}, "wrong length"),
                         ({"last_position": made.size - 10}, "the last batch is beyond the file"),
                         ({"last_position": 8}, "does not agree")]:
        made.index_path.write_bytes(good)
        rewrite_index(made, **changes)
        caplog.clear()
        seg = open_segment(made.path, active=False)
        assert why in caplog.text
        assert index_state(seg) == expected
        seg.close()
    made.index_path.unlink()
    made.index_path.mkdir()  # an index that cannot be read
    caplog.clear()
    seg = open_segment(made.path, active=False)
    assert "cannot read its index" in caplog.text and index_state(seg) == expected
    seg.close()


def test_a_batch_that_moved_under_its_index(made: Segment) -> None:
    """A base offset damaged in a head (the crc covers the records only) is found by a read:
    that batch alone is lost."""
    made.write_index()
    made.close()
    second = batch_positions(made)[1]
    with open(made.path, "r+b") as f:
        f.seek(second + 4)
        f.write(struct.pack(">Q", 116))
    seg = open_segment(made.path, active=False)
    assert seg.read(200, 1)[0][0] == 400  # that batch dropped, the next read
    assert seg.damaged_batches == 1 and seg.read(100, 1)[0][0] == 100
    seg.close()


# ---- find_time ----------------------------------------------------------------------------------


def test_find_time(made: Segment) -> None:
    assert made.find_time(0) == 100
    assert made.find_time(T0) == 100
    assert made.find_time(T0 + 100_000) == 100
    assert made.find_time(T0 + 100_001) == 101
    assert made.find_time(T0 + 110_000) == 115  # in the gap: the next record
    assert made.find_time(T0 + 2_000_000) == 2000  # inside a big batch
    assert made.find_time(T0 + 3_008_000) == 3008
    assert made.find_time(T0 + 3_008_001) is None
    assert made.max_timestamp == T0 + 3_008_000


def test_find_time_with_a_clock_that_steps_back(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 0)
    stamps = [10, 20, 30, 5, 6, 7, 40, 40, 8, 50]
    seg.append([(i, [rec(i, ts=t)]) for i, t in enumerate(stamps)])
    for t in range(0, 52):
        expected = next((i for i, s in enumerate(stamps) if s >= t), None)
        assert seg.find_time(t) == expected, t
    seg.close()


def test_find_time_when_given_timestamps_overstate_a_batch(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 0)
    seg.append([(0, [rec(0, ts=10), rec(1, ts=11)]), (2, [rec(2, ts=30)])], timestamps=[25, 30])
    assert seg.find_time(20) == 2  # batch 0 claims 25, but none of its records is >= 20
    seg.close()


# ---- torn and damaged files ---------------------------------------------------------------------


def test_torn_last_batch_at_every_length(made: Segment, tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    made.close()
    whole = made.path.read_bytes()
    last = batch_positions(made)[-2]
    copy = tmp_path / "torn" / made.path.name
    copy.parent.mkdir()
    expected: dict[bool, Any] = {}
    for active in (True, False):
        copy.write_bytes(whole[:last])
        seg = open_segment(copy, active=active)
        expected[active] = (everything(seg), seg.end, seg.count, seg.size)
        seg.close()
    for length in range(last + 1, len(whole)):
        for active in (True, False):
            copy.write_bytes(whole[:length])
            caplog.clear()
            seg = open_segment(copy, active=active)
            assert (everything(seg), seg.end, seg.count, seg.size) == expected[active], length
            assert copy.stat().st_size == last
            assert f"{copy}" in caplog.text and f"at position {last}" in caplog.text
            assert f"cutting off the last {length - last} bytes" in caplog.text
            seg.append([run(5000, 2)])  # appends after the cut, and reads them back
            assert seg.read(5000, 10) == [run(5000, 2)]
            seg.close()


def test_torn_magic(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.log"
    for data in (b"", MAGIC[:5], b"NSQSEG2\n" + b"\0" * 40):
        path.write_bytes(data)
        for active in (True, False):
            with pytest.raises(SegmentError, match="magic"):
                open_segment(path, active=active)
            assert path.read_bytes() == data
    with pytest.raises(ValueError, match="not a segment file name"):
        open_segment(tmp_path / "12.log", active=True)


def test_segment_error_is_in_nsqds_error_tree() -> None:
    assert issubclass(SegmentError, LogError) and issubclass(SegmentError, NsqdError)


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x40]))


def test_bad_crc_in_the_middle_of_a_closed_segment(made: Segment, caplog: pytest.LogCaptureFixture) -> None:
    """A flipped byte loses its batch alone, whether a read or the scan finds it; the damaged
    bytes are kept aside and counted, and the index written after says the same."""
    caplog.set_level(logging.WARNING, logger=LOG.name)
    positions = batch_positions(made)
    expected = everything(made)
    made.write_index()
    made.close()
    whole = made.path.read_bytes()
    flip_byte(made.path, positions[2] + 28 + 10)  # a record byte of batch 2 (offset 400)
    without = {o: r for o, r in expected.items() if o != 400}
    aside = made.path.with_name(f"{made.path.name}.damaged-{positions[2]}")
    damaged = made.path.read_bytes()

    # With its index, it opens; reading the damaged batch drops it, the others read fine.
    seg = open_segment(made.path, active=False)
    assert seg.read(400, 1)[0][0] == 401
    assert "a bad crc at position" in caplog.text and aside.name in caplog.text
    assert aside.read_bytes() == damaged[positions[2]:positions[3]]
    assert (seg.damaged_batches, seg.damaged_bytes) == (1, positions[3] - positions[2])
    assert everything(seg) == without and seg.count == len(without)
    assert seg.read(115, 1) == [run(115, 200)]
    assert seg.find_time(T0 + 400_000) == 401
    seg.write_index()  # the index without the batch: used by the next open, which agrees
    seg.close()
    assert made.path.read_bytes() == damaged  # the file itself is left as it is
    seg = open_segment(made.path, active=False)
    assert everything(seg) == without and seg.damaged_batches == 0
    seg.close()

    # Without it, the scan reads on after the damaged batch, active or not.
    for active in (False, True):
        made.index_path.unlink(missing_ok=True)
        aside.unlink()
        caplog.clear()
        seg = open_segment(made.path, active=active)
        assert everything(seg) == without, active
        assert (seg.end, seg.count, seg.size) == (3009, len(without), len(whole))
        assert (seg.damaged_batches, seg.damaged_bytes) == (1, positions[3] - positions[2])
        assert f"a bad crc at position {positions[2]}" in caplog.text
        assert f"reading on from position {positions[3]}" in caplog.text
        assert aside.read_bytes() == damaged[positions[2]:positions[3]]
        assert made.path.read_bytes() == damaged
        seg.append([run(4000, 2)])  # appends go on after it
        assert seg.read(3500, 10) == [run(4000, 2)]
        seg.close()
        made.path.write_bytes(damaged)


@pytest.mark.parametrize("field", ["length", "length-high", "base", "count", "size"])
def test_a_damaged_head_costs_its_batch_alone(made: Segment, field: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """A byte flipped in a batch's head (the crc covers the records only): its length (the
    next batch then found by a search), its base offset, its count, a record's size."""
    caplog.set_level(logging.WARNING, logger=LOG.name)
    positions = batch_positions(made)
    expected = everything(made)
    made.close()
    at = {"length": 3, "length-high": 0, "base": 4 + 7, "count": 12 + 3,
          "size": 28 + 3}[field]
    flip_byte(made.path, positions[2] + at)  # batch 2: offset 400
    for active in (False, True):
        seg = Segment.open(made.path, active=active, logger=LOG, limit=3009)
        got = everything(seg)
        assert got == {o: r for o, r in expected.items() if o != 400}, (field, active)
        assert seg.damaged_batches == 1
        seg.close()


def test_damage_over_several_batches_and_a_tail_of_zeros(made: Segment, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """Bytes overwritten across batches 2 to 4, and then zeros a power cut may leave at the end:
    what is whole is kept, the rest kept aside."""
    caplog.set_level(logging.WARNING, logger=LOG.name)
    positions = batch_positions(made)
    expected = everything(made)
    made.close()
    data = bytearray(made.path.read_bytes())
    data[positions[2] + 2 : positions[4] + 20] = b"\xa5" * (positions[4] + 18 - positions[2])
    made.path.write_bytes(bytes(data) + b"\0" * 100_000)
    seg = open_segment(made.path, active=False)
    lost = set(range(400, 3003))
    assert everything(seg) == {o: r for o, r in expected.items() if o not in lost}
    assert seg.damaged_batches == 2 and seg.size == len(data)
    assert made.path.stat().st_size == len(data)  # the zeros cut off, kept aside
    tail = made.path.with_name(f"{made.path.name}.damaged-{len(data)}")
    assert tail.read_bytes() == b"\0" * 100_000
    seg.close()


def raw_batch(base: int, records: list[bytes], ts: int = 0) -> bytes:
    body = b"".join(struct.pack(">I", len(r)) + r for r in records)
    return BATCH_HEAD.pack(24 + len(body), base, len(records), ts, zlib.crc32(body)) + body


@pytest.mark.parametrize("base", [0, 5, 9])
def test_offsets_not_increasing(tmp_path: Path, base: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    path = tmp_path / f"{0:020d}.log"
    good = MAGIC + raw_batch(0, [rec(o) for o in range(10)])
    bad = raw_batch(base, [rec(base)])
    later = raw_batch(20, [rec(20)])
    # As the last batch: cut, active or not.
    for active in (True, False):
        path.write_bytes(good + bad)
        seg = open_segment(path, active=active)
        assert (seg.end, seg.size) == (10, len(good)) and "offsets out of order" in caplog.text
        seg.close()
    # In the middle: that batch alone is lost, active or not.
    for active in (True, False):
        path.write_bytes(good + bad + later)
        seg = open_segment(path, active=active)
        assert (seg.end, seg.count, seg.damaged_batches) == (21, 11, 1)
        assert everything(seg) == {o: rec(o) for o in [*range(10), 20]}
        seg.close()


def test_a_batch_below_the_segments_base(tmp_path: Path) -> None:
    path = tmp_path / f"{100:020d}.log"
    path.write_bytes(MAGIC + raw_batch(99, [rec(99)]))
    seg = open_segment(path, active=True)
    assert (seg.end, seg.count, seg.size) == (100, 0, 8)
    seg.close()


def test_a_bad_head_in_the_tail(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.log"
    good = MAGIC + raw_batch(0, [rec(0)])
    for bad in (b"\0" * 28, struct.pack(">IQIqI", 24 + 3, 1, 1, 0, 0) + b"abc",  # a size of 3 > 3-4
                struct.pack(">IQIqI", 24, 1, 0, 0, 0)):  # a count of 0
        path.write_bytes(good + bad)
        seg = open_segment(path, active=True)
        assert (seg.end, seg.size) == (1, len(good))
        seg.close()


def test_a_malformed_batch_whose_crc_holds_is_dropped_on_read(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.log"
    body = struct.pack(">I", 50) + b"short"  # a record claiming 50 bytes in a 9-byte part
    later = raw_batch(1, [rec(1)])
    path.write_bytes(MAGIC + BATCH_HEAD.pack(24 + len(body), 0, 1, 0, zlib.crc32(body)) + body
                     + later)
    seg = open_segment(path, active=True)
    assert seg.read(0, 100) == [(1, [rec(1)])] and seg.damaged_batches == 1
    seg.close()


def test_remove(made: Segment) -> None:
    made.write_index()
    made.remove()
    assert not made.path.exists() and not made.index_path.exists()
    made.remove()  # again: both missing is fine
    with pytest.raises(ValueError, match="closed"):
        made.read(0, 10)


# ---- a full disk ---------------------------------------------------------------------------


def test_append_on_a_full_disk(tiny_fs: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    spare = tiny_fs.path / "spare"
    spare.write_bytes(b"s" * 200_000)  # deleted later to make room
    seg = Segment.create(tiny_fs.path, 0, logger=LOG)
    acked: list[DiskRun] = []
    offset = 0
    sizes = iter([1, 3, 200, 17, 2500] * 1000)
    with pytest.raises(OSError) as failed:
        while True:
            batch = run(offset, next(sizes))
            seg.append([batch])
            acked.append(batch)
            offset += len(batch[1])
    assert failed.value.errno == errno.ENOSPC
    expected = {o: r for first, records in acked for o, r in enumerate(records, first)}
    assert seg.path.stat().st_size == seg.size  # cut back to the last whole batch
    assert everything(seg) == expected and seg.end == offset
    # Smaller and smaller appends until not even one record fits.
    while True:
        try:
            seg.append([run(offset, 1)])
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            break
        expected[offset] = rec(offset)
        offset += 1
    seg.close()

    seg = open_segment(seg.path, active=True)  # reopens on the full disk: no write needed
    assert everything(seg) == expected and seg.end == offset
    assert caplog.text == ""  # nothing torn was left to cut
    spare.unlink()
    seg.append([run(offset, 200)])
    expected.update(dict(enumerate(run(offset, 200)[1], offset)))
    seg.close()
    seg = open_segment(seg.path, active=True)
    assert everything(seg) == expected
    seg.close()


def test_create_and_write_index_on_a_full_disk(tiny_fs: Any) -> None:
    seg = Segment.create(tiny_fs.path, 0)
    seg.append([run(0, 100)])
    filler = tiny_fs.fill()
    with pytest.raises(OSError):
        Segment.create(tiny_fs.path, 100)
    assert not (tiny_fs.path / f"{100:020d}.log").exists()
    with pytest.raises(OSError):
        seg.write_index()
    assert not seg.index_path.exists()
    filler.unlink()
    seg.write_index()
    seg.close()
    again = open_segment(seg.path, active=False)
    assert again.read(0, 1 << 20) == [run(0, 100)]
    again.close()


# ---- a writer killed mid-write ---------------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, random, struct, sys, time
    from pathlib import Path
    from nsqd.segment import Segment

    def rec(offset):
        return (struct.pack(">qH", 1_700_000_000_000_000_000 + offset * 1000, 0)
                + f"{offset:016d}".encode() + b"x" * (offset % 37) + PAD)

    PAD = b"p" * 200
    directory, seed = Path(sys.argv[1]), int(sys.argv[2])
    path = directory / f"{0:020d}.log"
    seg = Segment.open(path, active=True) if path.exists() else Segment.create(directory, 0)
    rng = random.Random(seed)
    offset = seg.end
    appends = []  # made beforehand, so that the writer spends its time appending
    for _ in range(8):
        runs = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            first = offset + rng.choice([0, 0, 0, 3])
            n = rng.choice([1, 50, 200, 1000])
            runs.append((first, [rec(o) for o in range(first, first + n)]))
            offset = first + n
        appends.append(runs)
    os.write(1, b"ready\\n")
    for runs in appends:
        seg.append(runs)
        os.write(1, " ".join(f"{first},{len(records)}" for first, records in runs).encode() + b"\\n")
    time.sleep(3600)  # until killed
""")


def test_killed_mid_write_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    rng = random.Random()
    acked: set[int] = set()
    checked = 0  # records below this offset were found whole before
    seen_torn = 0
    path = tmp_path / f"{0:020d}.log"

    def note(line: bytes) -> None:
        for part in line.split():
            first, n = map(int, part.split(b","))
            acked.update(range(first, first + n))

    for attempt in range(30):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(rng.getrandbits(32))],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout is not None and child.stderr is not None
        try:
            assert child.stdout.readline() == b"ready\n", child.stderr.read()
            for _ in range(rng.randint(0, 6)):
                line = child.stdout.readline()
                assert line, f"the writer died: {child.stderr.read()!r}"
                note(line)
            # At a random moment of the next append or so (not to synchronise anything: the
            # test holds whatever the moment).
            time.sleep(rng.random() / 500)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            out, _ = child.communicate()
        for line in out.splitlines():  # reported after what was read, before the kill
            note(line)
        size = path.stat().st_size
        seg = open_segment(path, active=True)
        seen_torn += seg.size < size
        found = everything(seg, 1 << 20)
        assert acked <= found.keys(), f"attempt {attempt}: acknowledged records missing"
        assert all(record == rec(o, pad=PAD) for o, record in found.items() if o >= checked)
        checked = seg.end
        seg.close()
    # How many kills tore a batch varies with the machine's speed (about a third here).
    print(f"{seen_torn} of 30 kills left a torn batch")
