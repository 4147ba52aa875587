"""Cursor journals against real files: the entry format, loading the last good entry, torn and
damaged entries, rewrites, a full disk (a real tmpfs), and encode/decode by hypothesis."""

from __future__ import annotations

import errno
import logging
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nsqd.cursorfile import MAX_EXTRAS, MAX_RANGES, CursorJournal, CursorState, decode, encode, load

LOG = logging.getLogger("test_cursorfile")
U64 = st.integers(min_value=0, max_value=2**64 - 1)
STATES = st.builds(
    CursorState,
    U64,
    st.lists(st.tuples(U64, U64), max_size=30).map(tuple),
    st.lists(st.tuples(U64, st.integers(0, 65535), st.integers(-(2**63), 2**63 - 1)),
             max_size=30).map(tuple),
)


def state(n: int, *, ranges: int = 0, extras: int = 0) -> CursorState:
    return CursorState(n, tuple((n + 2 * i + 1, n + 2 * i + 2) for i in range(ranges)),
                       tuple((n + i, i % 7, i * 1000) for i in range(extras)))


def entries(path: Path) -> list[tuple[int, int]]:
    """(position, length) of each whole entry in the file."""
    data, pos, out = path.read_bytes(), 0, []
    while pos + 8 <= len(data):
        length, _ = struct.unpack_from(">II", data, pos)
        out.append((pos, length))
        pos += 8 + length
    return out


# ---- encode and decode -------------------------------------------------------------------------


@given(STATES)
def test_encode_decode_round_trip(s: CursorState) -> None:
    assert decode(encode(s)) == s


@given(STATES, st.data())
def test_decode_refuses_a_cut_or_longer_payload(s: CursorState, data: st.DataObject) -> None:
    payload = encode(s)
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises(ValueError):
        decode(payload[:cut])
    with pytest.raises(ValueError):
        decode(payload + data.draw(st.binary(min_size=1, max_size=20)))


def test_payload_layout() -> None:
    payload = encode(CursorState(5, ((7, 9), (12, 13)), ((5, 2, 0), (6, 1, -1))))
    assert payload == (struct.pack(">QI", 5, 2) + struct.pack(">QQQQ", 7, 9, 12, 13)
                       + struct.pack(">I", 2) + struct.pack(">QHq", 5, 2, 0)
                       + struct.pack(">QHq", 6, 1, -1))


def test_only_the_lowest_ranges_and_extras_are_kept() -> None:
    n = MAX_RANGES + 50
    ranges = tuple((2 * i, 2 * i + 1) for i in reversed(range(n)))  # given unsorted
    extras = tuple((i, 1, 0) for i in reversed(range(MAX_EXTRAS + 3)))
    got = decode(encode(CursorState(0, ranges, extras)))
    assert got.ranges == tuple(sorted(ranges)[:MAX_RANGES])
    assert got.extras == tuple(sorted(extras)[:MAX_EXTRAS])


@pytest.mark.parametrize("bad", [
    CursorState(-1),
    CursorState(2**64),
    CursorState(0, ((1, -2),)),
    CursorState(0, (), ((1, 65536, 0),)),
    CursorState(0, (), ((1, 1, 2**63),)),
])
def test_values_out_of_range_are_refused(tmp_path: Path, bad: CursorState) -> None:
    with pytest.raises(ValueError):
        encode(bad)
    journal = CursorJournal(tmp_path / "c.cursor")
    journal.append(state(1), sync=False)
    with pytest.raises(ValueError):
        journal.append(bad, sync=False)
    assert load(journal.path) == state(1)
    journal.close()


# ---- the journal ---------------------------------------------------------------------------------


def test_entries_on_disk_are_as_documented(tmp_path: Path) -> None:
    journal = CursorJournal(tmp_path / "c.cursor")
    journal.append(state(1, ranges=2, extras=1), sync=True)
    journal.append(state(2), sync=False)
    data = journal.path.read_bytes()
    first, second = encode(state(1, ranges=2, extras=1)), encode(state(2))
    assert data == (struct.pack(">II", len(first), zlib.crc32(first)) + first
                    + struct.pack(">II", len(second), zlib.crc32(second)) + second)
    assert journal.size == len(data)
    journal.close()


def test_load_takes_the_last_entry(tmp_path: Path) -> None:
    path = tmp_path / "c.cursor"
    assert load(path) is None
    path.write_bytes(b"")
    assert load(path) is None
    journal = CursorJournal(path)
    for n in range(50):
        journal.append(state(n, ranges=n % 4, extras=n % 3), sync=n % 10 == 0)
        assert load(path) == state(n, ranges=n % 4, extras=n % 3)
    assert len(entries(path)) == 50
    journal.close()


def test_a_new_journal_starts_its_file_over(tmp_path: Path) -> None:
    path = tmp_path / "c.cursor"
    journal = CursorJournal(path)
    for n in range(5):
        journal.append(state(n), sync=False)
    journal.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x10\x00torn")  # a torn entry a crash left, claiming 4 KiB
    assert load(path) == state(4)
    again = CursorJournal(path)
    again.append(state(5), sync=False)
    again.append(state(6), sync=False)
    assert len(entries(path)) == 2 and load(path) == state(6)
    again.close()


def test_rewrite_past_rewrite_at(tmp_path: Path) -> None:
    path = tmp_path / "c.cursor"
    one = 8 + len(encode(state(0, ranges=3)))
    journal = CursorJournal(path, rewrite_at=10 * one)
    for n in range(95):
        journal.append(state(n, ranges=3), sync=False)
        assert len(entries(path)) == n % 10 + 1  # the first, then every tenth, rewrites
        assert path.stat().st_size == journal.size == (n % 10 + 1) * one
        assert load(path) == state(n, ranges=3)
    assert not [p for p in tmp_path.iterdir() if p.name != "c.cursor"]
    journal.close()


def test_a_torn_last_entry_at_every_length(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    path = tmp_path / "c.cursor"
    journal = CursorJournal(path)
    for n in range(3):
        journal.append(state(n, ranges=5, extras=5), sync=False)
    journal.close()
    whole = path.read_bytes()
    last, _ = entries(path)[-1]
    for length in range(last, len(whole)):
        path.write_bytes(whole[:length])
        caplog.clear()
        assert load(path, logger=LOG) == state(1, ranges=5, extras=5), length
        if length > last:
            assert f"a torn last entry at position {last} ({length - last} bytes)" in caplog.text
        else:
            assert caplog.text == ""
    # And a last entry whole in length but not in content (a crash after the size grew).
    path.write_bytes(whole[:-3] + b"\0\0\0")
    caplog.clear()
    assert load(path, logger=LOG) == state(1, ranges=5, extras=5)
    assert f"1 damaged entry skipped (the last at position {last}" in caplog.text


def test_a_damaged_entry_in_the_middle_is_skipped(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    path = tmp_path / "c.cursor"
    journal = CursorJournal(path)
    for n in range(3):
        journal.append(state(n, ranges=2), sync=False)
    journal.close()
    data = bytearray(path.read_bytes())
    second, _ = entries(path)[1]
    data[second + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    assert load(path, logger=LOG) == state(2, ranges=2)  # the last one holds: that is all it takes
    # The last one damaged too: the first is what is left.
    last, _ = entries(path)[2]
    data[last + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    assert load(path, logger=LOG) == state(0, ranges=2)
    assert f"2 damaged entries skipped (the last at position {last}, the first at {second})" in caplog.text
    # A crc that holds over a payload that is not one (never written by us) is not used.
    bogus = b"\0" * 20
    path.write_bytes(bytes(data[:second]) + struct.pack(">II", len(bogus), zlib.crc32(bogus)) + bogus)
    assert load(path, logger=LOG) == state(0, ranges=2)


def test_zeros_after_the_last_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What a power cut can leave: the file longer than what reached the disk."""
    caplog.set_level(logging.WARNING, logger=LOG.name)
    path = tmp_path / "c.cursor"
    journal = CursorJournal(path)
    journal.append(state(7, extras=2), sync=True)
    journal.close()
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)
    assert load(path, logger=LOG) == state(7, extras=2)
    assert "512 damaged entries skipped" in caplog.text  # one warning for them all


def test_temp_files_of_an_interrupted_rewrite(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    path = tmp_path / "c.cursor"
    journal = CursorJournal(path)
    journal.append(state(3), sync=True)
    journal.close()
    temp = tmp_path / "c.cursor.123456789.tmp"
    temp.write_bytes(b"half a rewrite")
    other = tmp_path / "c.cursor.123.cursor.55.tmp"  # a temp of another channel's journal
    other.write_bytes(b"")
    assert load(path, logger=LOG) == state(3)
    assert not temp.exists() and other.exists()
    assert "left by an interrupted rewrite" in caplog.text
    temp.write_bytes(b"again")
    journal.remove()
    assert not path.exists() and not temp.exists() and other.exists()
    journal.remove()  # missing is fine


# ---- a full disk ---------------------------------------------------------------------------------


def test_append_and_rewrite_on_a_full_disk(tiny_fs: Any) -> None:
    path = tiny_fs.path / "c.cursor"
    big = 3000  # ranges: an entry of 48 KiB, which needs new pages
    journal = CursorJournal(path)
    journal.append(state(1, ranges=big), sync=True)
    filler = tiny_fs.fill()

    with pytest.raises(OSError) as failed:
        for n in range(2, 100):
            journal.append(state(n, ranges=big), sync=False)
    assert failed.value.errno == errno.ENOSPC
    last_good = load(path)
    assert last_good is not None and last_good.ranges == state(1, ranges=big).ranges
    assert path.stat().st_size == journal.size  # the failed entry was cut back

    # A rewrite that fails leaves the old journal, and no temp file.
    journal.rewrite_at = journal.size  # the next append rewrites
    with pytest.raises(OSError):
        journal.append(state(500, ranges=big), sync=True)
    assert load(path) == last_good
    assert sorted(p.name for p in tiny_fs.path.iterdir()) == ["c.cursor", "filler"]

    # Space again: appends work, and load finds the new state.
    filler.unlink()
    journal.append(state(600, ranges=big), sync=True)
    journal.append(state(601, ranges=2), sync=True)
    assert load(path) == state(601, ranges=2)
    journal.close()


def test_a_failed_write_that_cannot_be_cut_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The file descriptor swapped for a read-only one of the same file: the write and the
    ftruncate after it both fail, as on a file system gone bad. The next append rewrites."""
    caplog.set_level(logging.ERROR, logger=LOG.name)
    journal = CursorJournal(tmp_path / "c.cursor", logger=LOG)
    journal.append(state(1), sync=False)
    assert journal._fd is not None
    os.close(journal._fd)
    journal._fd = os.open(journal.path, os.O_RDONLY)
    with pytest.raises(OSError):
        journal.append(state(2), sync=False)
    assert "cannot cut back a failed write" in caplog.text
    assert journal._fd is None and load(journal.path) == state(1)
    journal.append(state(3), sync=False)
    assert len(entries(journal.path)) == 1 and load(journal.path) == state(3)
    journal.close()


# ---- a writer killed mid-append or mid-rewrite ------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from nsqd.cursorfile import CursorJournal, CursorState, load

    path = Path(sys.argv[1])
    before = load(path)
    n = before.mark_delete + 1 if before else 0
    journal = CursorJournal(path, rewrite_at=64 << 10)  # a rewrite every few appends
    os.write(1, b"ready\\n")
    while True:
        extras = tuple((n + i, 1, 0) for i in range(n % 700))  # entries of 16 B to 12 KB
        journal.append(CursorState(n, ((n + 1000, n + 1001),), extras), sync=n % 5 == 0)
        os.write(1, b"%d\\n" % n)
        n += 1
""")


def test_killed_mid_append_or_rewrite(tmp_path: Path) -> None:
    rng = random.Random()
    path = tmp_path / "c.cursor"
    reported = -1
    temps = 0  # kills that left a rewrite's temp file
    for _ in range(20):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout is not None and child.stderr is not None
        try:
            assert child.stdout.readline() == b"ready\n", child.stderr.read()
            for _ in range(rng.randint(1, 40)):
                line = child.stdout.readline()
                assert line, f"the writer died: {child.stderr.read()!r}"
                reported = int(line)
            time.sleep(rng.random() / 500)  # a random moment, not a synchronisation
        finally:
            os.kill(child.pid, signal.SIGKILL)
            out, _ = child.communicate()
        reported = max([reported, *map(int, out.split())])
        temps += any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
        loaded = load(path)
        # Every append that returned is there: the state loaded is that one or a later one.
        assert loaded is not None and loaded.mark_delete >= reported
        n = loaded.mark_delete
        assert loaded == CursorState(n, ((n + 1000, n + 1001),), tuple((n + i, 1, 0) for i in range(n % 700)))
        assert [p.name for p in tmp_path.iterdir()] == ["c.cursor"]  # no temp file left
    print(f"{temps} of 20 kills left a rewrite's temp file")
