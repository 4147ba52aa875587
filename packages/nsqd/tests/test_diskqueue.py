"""DiskQueue against real files in a temp dir: format, rolling, recovery, corruption, errors."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import stat
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from nsqd.diskqueue import DiskQueue, DiskQueueError

NAME = "t"
SMALL = {"min_msg_size": 4, "max_msg_size": 1024}
# Our own logger: the broker's logging setup may stop "nsqd.*" records from reaching caplog.
LOG = logging.getLogger("test_diskqueue")
WAIT = 30.0  # seconds: the most any one wait may take on a slow, busy machine


def rec(i: int, size: int = 20) -> bytes:
    return f"{i:08d}".encode().ljust(size, b".")


def data_file(path: Path, num: int) -> Path:
    return path / f"{NAME}.diskqueue.{num:06d}.dat"


def meta(path: Path) -> bytes:
    return (path / f"{NAME}.diskqueue.meta.dat").read_bytes()


def listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def make(path: Path, **kwargs: object) -> DiskQueue:
    return DiskQueue(NAME, path, **{**SMALL, "logger": LOG, **kwargs})  # type: ignore[arg-type]


@asynccontextmanager
async def running(dq: DiskQueue) -> AsyncIterator[DiskQueue]:
    async with trio.open_nursery() as nursery:
        await nursery.start(dq.run)
        try:
            yield dq
        finally:
            await dq.close()  # run() returns after close()


async def take(dq: DiskQueue, n: int) -> list[bytes]:
    out: list[bytes] = []
    with trio.fail_after(WAIT):
        while len(out) < n:
            await dq.wait_readable()
            out += dq.pop(n - len(out))
    return out


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


async def eventually(check: Callable[[], bool]) -> None:
    # Polling: the run() task deletes and renames files with no event a test could wait on.
    with trio.fail_after(WAIT):
        while not check():
            await trio.sleep(0.01)


async def test_round_trip_in_order(tmp_path: Path) -> None:
    async with running(make(tmp_path)) as dq:
        await dq.put([rec(0)])
        await dq.put([rec(i) for i in range(1, 10)])
        assert dq.depth() == 10
        assert await take(dq, 10) == [rec(i) for i in range(10)]
        assert dq.depth() == 0
        assert dq.pop(5) == []


async def test_depth_survives_close_and_reopen(tmp_path: Path) -> None:
    async with running(make(tmp_path)) as dq:
        await dq.put([rec(i) for i in range(10)])
        assert await take(dq, 3) == [rec(0), rec(1), rec(2)]
    dq = make(tmp_path)
    assert dq.depth() == 7
    async with running(dq):
        assert await take(dq, 7) == [rec(i) for i in range(3, 10)]
        assert dq.depth() == 0
    assert make(tmp_path).depth() == 0


async def test_reads_a_directory_in_go_diskqueue_format(tmp_path: Path) -> None:
    records = [rec(0, 26), rec(1, 40), rec(2, 26), rec(3, 30)]
    framed = [len(r).to_bytes(4, "big") + r for r in records]
    data_file(tmp_path, 4).write_bytes(b"".join(framed[:2]))
    data_file(tmp_path, 5).write_bytes(b"".join(framed[2:]))
    (tmp_path / f"{NAME}.diskqueue.meta.dat").write_bytes(b"3\n4,30\n5,64\n")
    dq = DiskQueue(NAME, tmp_path, logger=LOG)  # nsqd's sizes: min 26
    assert dq.depth() == 3
    async with running(dq):
        assert await take(dq, 3) == records[1:]
        await eventually(lambda: not data_file(tmp_path, 4).exists())
    assert meta(tmp_path) == b"0\n5,64\n5,64\n"


async def test_metadata_text_and_mode(tmp_path: Path) -> None:
    async with running(make(tmp_path)) as dq:
        await dq.put([rec(i, 30) for i in range(3)])  # 34 bytes each on disk
        await take(dq, 1)
    assert meta(tmp_path) == b"2\n0,34\n0,102\n"
    assert stat.S_IMODE((tmp_path / f"{NAME}.diskqueue.meta.dat").stat().st_mode) == 0o600
    assert stat.S_IMODE(data_file(tmp_path, 0).stat().st_mode) == 0o600
    assert data_file(tmp_path, 0).read_bytes()[:34] == b"\x00\x00\x00\x1e" + rec(0, 30)
    assert not [n for n in listing(tmp_path) if n.endswith(".tmp")]


async def test_sync_every_one_persists_each_put(tmp_path: Path) -> None:
    dq = make(tmp_path, sync_every=1)
    await dq.put([rec(0)])
    assert meta(tmp_path) == b"1\n0,0\n0,24\n"
    await dq.put([rec(1), rec(2)])
    assert meta(tmp_path) == b"3\n0,0\n0,72\n"
    await dq.close()


async def test_sync_timeout_persists_metadata(tmp_path: Path) -> None:
    async with running(make(tmp_path, sync_timeout=0.05)) as dq:
        await dq.put([rec(0)])
        await eventually(lambda: meta(tmp_path) == b"1\n0,0\n0,24\n")


async def test_rolls_files_and_deletes_fully_read_ones(tmp_path: Path) -> None:
    dq = make(tmp_path, max_bytes_per_file=3 * 24)  # three 24-byte records per file
    async with running(dq):
        for i in range(10):
            await dq.put([rec(i)])
        assert [data_file(tmp_path, n).stat().st_size for n in range(4)] == [72, 72, 72, 24]
        assert meta(tmp_path).endswith(b"\n3,0\n")  # persisted on the roll into file 3
        assert await take(dq, 7) == [rec(i) for i in range(7)]
        await eventually(lambda: not data_file(tmp_path, 1).exists())
        assert not data_file(tmp_path, 0).exists()
        assert data_file(tmp_path, 2).exists()
    assert meta(tmp_path) == b"3\n2,24\n3,24\n"
    async with running(make(tmp_path, max_bytes_per_file=3 * 24)) as dq:
        assert await take(dq, 3) == [rec(7), rec(8), rec(9)]
        await eventually(lambda: not data_file(tmp_path, 2).exists())
    assert listing(tmp_path) == [f"{NAME}.diskqueue.000003.dat", f"{NAME}.diskqueue.meta.dat"]


async def test_oversized_record_goes_alone_into_an_empty_file(tmp_path: Path) -> None:
    dq = make(tmp_path, max_bytes_per_file=50)
    async with running(dq):
        await dq.put([rec(0, 100), rec(1, 10), rec(2, 100)])
        sizes = [data_file(tmp_path, n).stat().st_size for n in range(3)]
        assert sizes == [104, 14, 104]
        assert await take(dq, 3) == [rec(0, 100), rec(1, 10), rec(2, 100)]


async def test_reader_at_writer_tail_then_roll_leaves_no_bad_file(tmp_path: Path) -> None:
    # go-diskqueue v1.1.0 renames the finished file to .bad here (issue #42).
    async with running(make(tmp_path, max_bytes_per_file=2 * 24)) as dq:
        for i in range(6):
            await dq.put([rec(i)])
            assert await take(dq, 1) == [rec(i)]
        await eventually(lambda: not data_file(tmp_path, 1).exists())
    assert not [n for n in listing(tmp_path) if n.endswith(".bad")]
    assert meta(tmp_path) == b"0\n2,48\n2,48\n"


async def test_refuses_out_of_range_sizes(tmp_path: Path) -> None:
    dq = make(tmp_path, min_msg_size=10, max_msg_size=20)
    with pytest.raises(DiskQueueError, match=r"^invalid message write size \(9\) minMsgSize=10"):
        await dq.put([b"x" * 10, b"x" * 9])
    with pytest.raises(DiskQueueError, match=r"\(21\) minMsgSize=10 maxMsgSize=20$"):
        await dq.put([b"x" * 21])
    assert dq.depth() == 0
    assert dq.healthy  # the caller's mistake, not the disk's
    await dq.put([b"x" * 10, b"x" * 20])
    assert dq.depth() == 2
    await dq.close()


async def test_out_of_range_size_on_read_is_corruption(tmp_path: Path) -> None:
    dq = make(tmp_path)
    await dq.put([rec(0), rec(1, 200), rec(2)])
    await dq.close()
    async with running(make(tmp_path, max_msg_size=100)) as dq:
        assert await take(dq, 1) == [rec(0)]
        bad = data_file(tmp_path, 0).with_suffix(".dat.bad")
        # The rename runs in a worker thread; depth is set once it has returned.
        await eventually(lambda: bad.exists() and dq.depth() == 0)
        await dq.put([rec(3)])
        assert await take(dq, 1) == [rec(3)]


async def test_garbage_in_the_middle_of_a_segment(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    dq = make(tmp_path)
    await dq.put([rec(i) for i in range(10)])
    await dq.close()
    overwrite(data_file(tmp_path, 0), 5 * 24, b"\xff\xff\xff\xffgarbage")  # the write file
    async with running(make(tmp_path)) as dq:
        assert dq.depth() == 10
        assert await take(dq, 5) == [rec(i) for i in range(5)]
        bad = tmp_path / f"{NAME}.diskqueue.000000.dat.bad"
        # The rename runs in a worker thread; depth is set once it has returned.
        await eventually(lambda: bad.exists() and dq.depth() == 0)
        await dq.put([rec(10), rec(11)])  # into a new file
        assert await take(dq, 2) == [rec(10), rec(11)]
    assert str(data_file(tmp_path, 0)) in caplog.text
    assert "invalid message read size (-1)" in caplog.text
    assert "depth 5 at tail" in caplog.text
    assert data_file(tmp_path, 1).exists()


async def test_truncated_final_record_of_an_older_file(tmp_path: Path) -> None:
    dq = make(tmp_path, max_bytes_per_file=5 * 24)
    await dq.put([rec(i) for i in range(8)])  # file 0: records 0-4, file 1: 5-7
    await dq.close()
    os.truncate(data_file(tmp_path, 0), 5 * 24 - 3)
    async with running(make(tmp_path, max_bytes_per_file=5 * 24)) as dq:
        assert await take(dq, 7) == [rec(i) for i in (0, 1, 2, 3, 5, 6, 7)]
        assert (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists()
        await eventually(lambda: dq.depth() == 0)
        await dq.put([rec(8)])
        assert await take(dq, 1) == [rec(8)]


async def test_truncated_final_record_of_the_write_file(tmp_path: Path) -> None:
    dq = make(tmp_path)
    await dq.put([rec(i) for i in range(5)])
    await dq.close()
    os.truncate(data_file(tmp_path, 0), 5 * 24 - 3)
    dq = make(tmp_path)
    await dq.put([rec(5)])  # before the reader ran: must not land in the damaged file
    async with running(dq):
        assert await take(dq, 5) == [rec(0), rec(1), rec(2), rec(3), rec(5)]
        assert (tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists()
        assert dq.depth() == 0


async def test_unclean_shutdown_continues_in_a_new_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    dq = make(tmp_path)
    await dq.put([rec(i) for i in range(5)])
    await dq.close()
    stale = meta(tmp_path)
    dq = make(tmp_path)
    await dq.put([rec(i) for i in range(5, 8)])
    await dq.close()
    # A kill -9 after the second put: data in the file, metadata from before it.
    (tmp_path / f"{NAME}.diskqueue.meta.dat").write_bytes(stale)
    dq = make(tmp_path)
    assert "metadata writePos 120 < file size of 192" in caplog.text
    assert dq.depth() == 8
    async with running(dq):
        await dq.put([rec(8)])
        assert data_file(tmp_path, 1).stat().st_size == 24
        assert await take(dq, 9) == [rec(i) for i in range(9)]
        assert dq.depth() == 0
        await eventually(lambda: not data_file(tmp_path, 0).exists())
    assert not [n for n in listing(tmp_path) if n.endswith(".bad")]


KILLED_WRITER = """
import os, signal, sys, trio
from nsqd.diskqueue import DiskQueue

async def main():
    dq = DiskQueue("t", sys.argv[1], min_msg_size=4, max_msg_size=1024,
                   max_bytes_per_file=1000, sync_every=10**6)
    for i in range(50):
        await dq.put([f"{i:08d}".encode().ljust(20, b".")])
    os.kill(os.getpid(), signal.SIGKILL)

trio.run(main)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
async def test_kill_9_after_put_loses_nothing(tmp_path: Path) -> None:
    proc = await trio.run_process([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], check=False)
    assert proc.returncode == -signal.SIGKILL
    assert meta(tmp_path) == b"41\n0,0\n1,0\n"  # persisted only on the roll into file 1
    dq = make(tmp_path, max_bytes_per_file=1000)
    assert dq.depth() == 50
    async with running(dq):
        assert await take(dq, 50) == [rec(i) for i in range(50)]


async def test_depth_forced_to_zero_at_the_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    (tmp_path / f"{NAME}.diskqueue.meta.dat").write_bytes(b"4\n0,0\n0,0\n")
    dq = make(tmp_path)
    assert dq.depth() == 0
    assert "depth 4 at tail (data loss)" in caplog.text
    await dq.close()


async def test_empty(tmp_path: Path) -> None:
    dq = make(tmp_path, max_bytes_per_file=3 * 24)
    async with running(dq):
        await dq.put([rec(i) for i in range(10)])
        assert await take(dq, 2) == [rec(0), rec(1)]
        await dq.empty()
        assert dq.depth() == 0
        assert dq.pop(10) == []
        assert listing(tmp_path) == []
        await dq.put([rec(10), rec(11)])
        assert await take(dq, 2) == [rec(10), rec(11)]
    assert meta(tmp_path) == b"0\n4,48\n4,48\n"


async def test_delete_after_empty_removes_everything(tmp_path: Path) -> None:
    dq = make(tmp_path)
    await dq.put([rec(0)])
    await dq.empty()
    await dq.put([rec(1)])
    await dq.delete()
    assert listing(tmp_path) == []
    with pytest.raises(DiskQueueError, match="exiting"):
        await dq.put([rec(2)])


async def test_closed_queue_refuses_work(tmp_path: Path) -> None:
    dq = make(tmp_path)
    await dq.close()
    await dq.close()
    for call in (dq.put([rec(0)]), dq.empty(), dq.wait_readable()):
        with pytest.raises(DiskQueueError, match=r"^exiting$"):
            await call


async def test_concurrent_puts_are_grouped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    original = DiskQueue._write_blocking

    def counting(self: DiskQueue, *args: object) -> object:
        nonlocal calls
        calls += 1
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(DiskQueue, "_write_blocking", counting)
    async with running(make(tmp_path)) as dq:
        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(dq.put, [rec(i), rec(1000 + i)])
        assert dq.depth() == 400
        assert calls < 20
        got = await take(dq, 400)
    assert sorted(got) == sorted([rec(i) for i in range(200)] + [rec(1000 + i) for i in range(200)])
    for i in range(200):  # each call's records stay together and in order
        assert got.index(rec(1000 + i)) == got.index(rec(i)) + 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
async def test_failed_write_flips_health(tmp_path: Path) -> None:
    dq = make(tmp_path)
    data_file(tmp_path, 0).symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(DiskQueueError, match="No space left"):
        await dq.put([rec(0)])
    assert not dq.healthy
    assert dq.depth() == 0
    data_file(tmp_path, 0).unlink()
    await dq.put([rec(1)])
    assert dq.healthy
    async with running(dq):
        assert await take(dq, 1) == [rec(1)]


async def test_cancelled_run_leaves_a_clean_restart_point(tmp_path: Path) -> None:
    dq = make(tmp_path, sync_every=10_000, sync_timeout=60)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(dq.run)
            await dq.put([rec(i) for i in range(6)])
            assert await take(dq, 2) == [rec(0), rec(1)]
            nursery.cancel_scope.cancel()
        assert meta(tmp_path) == b"4\n0,48\n0,144\n"
    finally:
        await dq.close()  # its read file stays open until then
    async with running(make(tmp_path)) as dq2:
        assert dq2.depth() == 4
        assert await take(dq2, 4) == [rec(i) for i in range(2, 6)]


async def test_hundred_thousand_small_records(tmp_path: Path) -> None:
    total, batch = 100_000, 1000
    payloads = [i.to_bytes(4, "big") * 25 for i in range(total)]
    got: list[bytes] = []
    dq = make(tmp_path, sync_every=2500, max_bytes_per_file=1 << 20, max_msg_size=200)
    async with running(dq):

        async def consume() -> None:
            while len(got) < total:
                await dq.wait_readable()
                got.extend(dq.pop(500))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            for start in range(0, total, batch):
                await dq.put(payloads[start : start + batch])
    assert got == payloads
    assert dq.depth() == 0
    assert len(listing(tmp_path)) == 2  # the last data file and the metadata


def test_logger_defaults_to_module_logger(tmp_path: Path) -> None:
    dq = DiskQueue(NAME, str(tmp_path))
    assert dq.logger is logging.getLogger("nsqd.diskqueue")
    assert dq.depth() == 0


# ---- explicit commit ---------------------------------------------------------------------------


async def take_with_positions(dq: DiskQueue, n: int) -> list[tuple[bytes, tuple[int, int]]]:
    out: list[tuple[bytes, tuple[int, int]]] = []
    with trio.fail_after(WAIT):
        while len(out) < n:
            await dq.wait_readable()
            out += dq.pop_with_positions(n - len(out))
    return out


def crash_copy(path: Path, name: str) -> Path:
    """The queue's files as a kill -9 would leave them now (data written, metadata as synced)."""
    copy = path.parent / name
    shutil.copytree(path, copy)
    return copy


async def test_explicit_commit_restarts_at_the_committed_position(tmp_path: Path) -> None:
    async with running(make(tmp_path, explicit_commit=True)) as dq:
        await dq.put([rec(i) for i in range(10)])
        got = await take_with_positions(dq, 6)
        assert [payload for payload, _ in got] == [rec(i) for i in range(6)]
        assert [pos for _, pos in got] == [(0, 24 * (i + 1)) for i in range(6)]
        dq.commit(got[2][1])
        assert (dq.depth(), dq.uncommitted()) == (4, 3)
    assert meta(tmp_path) == b"7\n0,72\n0,240\n"  # depth counts the 3 uncommitted records
    for explicit in (True, False):  # the files read the same in the normal mode
        dq = make(tmp_path, explicit_commit=explicit)
        assert (dq.depth(), dq.uncommitted()) == (7, 0)
        async with running(dq):
            assert await take(dq, 7) == [rec(i) for i in range(3, 10)]
            assert dq.uncommitted() == (7 if explicit else 0)
        assert meta(tmp_path) == (b"7\n0,72\n0,240\n" if explicit else b"0\n0,240\n0,240\n")


async def test_explicit_commit_survives_a_crash_after_a_sync(tmp_path: Path) -> None:
    path = tmp_path / "q"
    path.mkdir()
    async with running(make(path, explicit_commit=True, sync_timeout=0.05)) as dq:
        await dq.put([rec(i) for i in range(10)])
        got = await take_with_positions(dq, 8)
        dq.commit(got[1][1])
        dq.commit(got[4][1])
        await eventually(lambda: meta(path) == b"5\n0,120\n0,240\n")  # the tick's sync
        crashed = crash_copy(path, "crashed")
        # A second queue on the same files, the first still open (its close comes later).
        other = make(path, explicit_commit=True)
        assert other.depth() == 5
        async with running(other):
            assert await take(other, 5) == [rec(i) for i in range(5, 10)]
    dq = make(crashed, explicit_commit=True)
    assert dq.depth() == 5
    async with running(dq):
        assert await take(dq, 5) == [rec(i) for i in range(5, 10)]


async def test_explicit_commit_keeps_files_until_the_commit_passes_them(tmp_path: Path) -> None:
    def files() -> list[int]:
        return [n for n in range(5) if data_file(tmp_path, n).exists()]

    options = {"max_bytes_per_file": 3 * 24, "explicit_commit": True, "sync_every": 1}
    async with running(make(tmp_path, **options)) as dq:
        await dq.put([rec(i) for i in range(10)])  # files 0-2: three records each, file 3: one
        got = await take_with_positions(dq, 7)  # files 0 and 1 read to their end
        assert got[2][1] == (1, 0)  # the end of a file is the start of the next one
    assert files() == [0, 1, 2, 3]  # close() synced, and deleted nothing
    assert meta(tmp_path) == b"10\n0,0\n3,24\n"
    async with running(make(tmp_path, **options)) as dq:
        got = await take_with_positions(dq, 7)
        dq.commit(got[4][1])  # the middle of file 1
        await eventually(lambda: files() == [1, 2, 3])
        dq.commit(got[6][1])  # the first record of file 2
        await eventually(lambda: files() == [2, 3])
        assert meta(tmp_path) == b"3\n2,24\n3,24\n"
    async with running(make(tmp_path, **options)) as dq:
        got = await take_with_positions(dq, 3)
        assert [payload for payload, _ in got] == [rec(7), rec(8), rec(9)]
        dq.commit(got[-1][1])
        await eventually(lambda: files() == [3])
    assert meta(tmp_path) == b"0\n3,24\n3,24\n"


async def test_explicit_commit_with_sync_every_one_persists_each_commit(tmp_path: Path) -> None:
    async with running(make(tmp_path, explicit_commit=True, sync_every=1, sync_timeout=60)) as dq:
        await dq.put([rec(i) for i in range(5)])
        got = await take_with_positions(dq, 5)
        assert meta(tmp_path) == b"5\n0,0\n0,120\n"  # pops alone change nothing on disk
        previous = meta(tmp_path)
        for i, (_, pos) in enumerate(got):
            dq.commit(pos)  # a plain call: no I/O, no waiting; run() persists it
            assert meta(tmp_path) == previous
            previous = b"%d\n0,%d\n0,120\n" % (4 - i, pos[1])
            await eventually(lambda expected=previous: meta(tmp_path) == expected)


async def test_commit_is_persisted_by_close_without_run(tmp_path: Path) -> None:
    dq = make(tmp_path, explicit_commit=True, sync_every=1)
    await dq.put([rec(i) for i in range(4)])
    try:
        async with trio.open_nursery() as nursery:  # read ahead, then stop run() before committing
            await nursery.start(dq.run)
            got = await take_with_positions(dq, 3)
            nursery.cancel_scope.cancel()
        dq.commit(got[1][1])
        assert meta(tmp_path) == b"4\n0,0\n0,96\n"  # commit() itself wrote nothing
    finally:
        await dq.close()  # its read file stays open until then
    assert meta(tmp_path) == b"2\n0,48\n0,96\n"
    dq.commit(got[2][1])  # after close: ignored (the record comes back)
    assert make(tmp_path).depth() == 2


async def test_commit_only_moves_forward(tmp_path: Path) -> None:
    async with running(make(tmp_path, explicit_commit=True)) as dq:
        await dq.put([rec(i) for i in range(5)])
        got = await take_with_positions(dq, 3)
        dq.commit(got[1][1])
        assert dq.uncommitted() == 1
        for behind in (got[0][1], got[1][1], (0, 0), (0, 30)):  # (0, 30): inside record 1
            dq.commit(behind)
            assert dq.uncommitted() == 1
        for beyond in ((0, 96), (0, 73), (1, 0)):  # not popped yet
            with pytest.raises(ValueError, match="beyond the read position"):
                dq.commit(beyond)
        assert (dq.depth(), dq.uncommitted()) == (2, 1)
        dq.commit(got[2][1])
        assert dq.uncommitted() == 0
    assert meta(tmp_path) == b"2\n0,72\n0,120\n"


async def test_commit_in_normal_mode_changes_nothing(tmp_path: Path) -> None:
    async with running(make(tmp_path)) as dq:
        await dq.put([rec(i) for i in range(3)])
        got = await take_with_positions(dq, 2)
        assert got == [(rec(0), (0, 24)), (rec(1), (0, 48))]
        dq.commit(got[0][1])
        assert (dq.depth(), dq.uncommitted()) == (1, 0)
        with pytest.raises(ValueError):
            dq.commit((0, 72))
    assert meta(tmp_path) == b"1\n0,48\n0,72\n"


async def test_explicit_commit_empty_and_delete(tmp_path: Path) -> None:
    dq = make(tmp_path, max_bytes_per_file=3 * 24, explicit_commit=True)
    async with running(dq):
        await dq.put([rec(i) for i in range(10)])
        got = await take_with_positions(dq, 5)
        await dq.empty()
        assert (dq.depth(), dq.uncommitted()) == (0, 0)
        assert listing(tmp_path) == []
        dq.commit(got[-1][1])  # from before empty(): behind, ignored
        await dq.put([rec(10), rec(11)])
        got = await take_with_positions(dq, 2)
        assert [payload for payload, _ in got] == [rec(10), rec(11)]
        assert dq.uncommitted() == 2
    assert meta(tmp_path) == b"2\n4,0\n4,48\n"
    dq = make(tmp_path, explicit_commit=True)
    await dq.delete()
    assert listing(tmp_path) == []


async def test_explicit_commit_keeps_a_damaged_file_until_its_records_are_committed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q"
    path.mkdir()
    dq = make(path)
    await dq.put([rec(i) for i in range(10)])
    await dq.close()
    overwrite(data_file(path, 0), 5 * 24, b"\xff\xff\xff\xffgarbage")
    bad = path / f"{NAME}.diskqueue.000000.dat.bad"
    async with running(make(path, explicit_commit=True, sync_every=1)) as dq:
        got = await take_with_positions(dq, 5)
        assert [payload for payload, _ in got] == [rec(i) for i in range(5)]
        await dq.put([rec(10)])  # the writer left the damaged file
        got += await take_with_positions(dq, 1)  # so the reader jumped past the damage
        assert got[-1] == (rec(10), (1, 24))
        assert data_file(path, 0).exists() and not bad.exists()  # records 0-4 are uncommitted
        await eventually(lambda: meta(path) == b"6\n0,0\n1,24\n")
        crashed = crash_copy(path, "crashed")
        dq.commit(got[3][1])
        await eventually(lambda: meta(path) == b"2\n0,96\n1,24\n")
        assert not bad.exists()
        # Everything before the damage committed: the committed position jumps over the
        # rest of the damaged file, to the next uncommitted record, and the file is put aside.
        dq.commit(got[4][1])
        await eventually(bad.exists)
        assert meta(path) == b"1\n1,0\n1,24\n"
        assert not data_file(path, 0).exists()
    assert meta(path) == b"1\n1,0\n1,24\n"
    # After a crash before the commits, the good records come back and the damage is met again.
    async with running(make(crashed, explicit_commit=True)) as dq:
        assert await take(dq, 6) == [*[rec(i) for i in range(5)], rec(10)]
        assert data_file(crashed, 0).exists()  # still uncommitted
    async with running(make(crashed)) as dq:  # normal mode: put aside right away
        assert await take(dq, 6) == [*[rec(i) for i in range(5)], rec(10)]
        await eventually((crashed / bad.name).exists)


async def test_explicit_commit_puts_a_damaged_file_aside_at_once_when_all_is_committed(
    tmp_path: Path,
) -> None:
    dq = make(tmp_path, max_bytes_per_file=10 * 24)
    await dq.put([rec(i) for i in range(14)])  # file 0: records 0-9, file 1: 10-13
    await dq.close()
    os.truncate(data_file(tmp_path, 0), 10 * 24 - 3)
    async with running(make(tmp_path, max_bytes_per_file=10 * 24, explicit_commit=True)) as dq:
        got = await take_with_positions(dq, 9)
        dq.commit(got[-1][1])  # before run() gets to the damage
        await eventually((tmp_path / f"{NAME}.diskqueue.000000.dat.bad").exists)
        got = await take_with_positions(dq, 4)
        assert [payload for payload, _ in got] == [rec(i) for i in range(10, 14)]
        # depth was 5 for the 4 records left (the damage took one); fixed at the tail.
        await eventually(lambda: meta(tmp_path) == b"4\n1,0\n1,96\n")


KILLED_CONSUMER = """
import os, signal, sys, trio
from nsqd.diskqueue import DiskQueue

async def main():
    path = sys.argv[1]
    dq = DiskQueue("t", path, min_msg_size=4, max_msg_size=1024, max_bytes_per_file=5 * 24,
                   sync_every=1, explicit_commit=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(dq.run)
        await dq.put([f"{i:08d}".encode().ljust(20, b".") for i in range(20)])
        got = []
        while len(got) < 12:
            await dq.wait_readable()
            got += dq.pop_with_positions(12 - len(got))
        dq.commit(got[7][1])
        # the sync persists the metadata first and only then deletes the file it moved past:
        # wait for both, so the kill lands after the commit's whole sync
        with trio.fail_after(60):
            while (open(os.path.join(path, "t.diskqueue.meta.dat"), "rb").read() != sys.argv[2].encode()
                   or os.path.exists(sys.argv[3])):
                await trio.sleep(0.005)
        os.kill(os.getpid(), signal.SIGKILL)

trio.run(main)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
async def test_kill_9_after_commit_redelivers_the_uncommitted(tmp_path: Path) -> None:
    expected = "12\n1,72\n3,120\n"  # records 0-7 committed, 8-11 popped, 12-19 never popped
    proc = await trio.run_process(
        [sys.executable, "-c", KILLED_CONSUMER, str(tmp_path), expected, str(data_file(tmp_path, 0))],
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL
    assert meta(tmp_path) == expected.encode()
    assert [n for n in range(4) if data_file(tmp_path, n).exists()] == [1, 2, 3]
    dq = make(tmp_path, max_bytes_per_file=5 * 24, explicit_commit=True)
    assert dq.depth() == 12
    async with running(dq):
        assert await take(dq, 12) == [rec(i) for i in range(8, 20)]


def _reference_read(data: bytes, pos: int, end: int, max_bytes: int, max_records: int,
                    lo: int, hi: int) -> tuple[list[tuple[bytes, int]], int, str | None]:
    """DiskFiles.read's semantics, record by record (what it did before reading in chunks)."""
    records: list[tuple[bytes, int]] = []
    used = 0
    while pos < end and used < max_bytes and len(records) < max_records:
        if end - pos < 4 or len(data) - pos < 4:
            return records, pos, f"short read of a length ({end - pos} bytes left)"
        size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        if size < lo or size > hi:
            return records, pos, f"invalid message read size ({size})"
        if pos + 4 + size > end or len(data) < pos + 4 + size:
            return records, pos, f"short read of a {size} byte message"
        records.append((data[pos + 4:pos + 4 + size], pos + 4 + size))
        pos += 4 + size
        used += 4 + size
    return records, pos, None


@pytest.mark.parametrize("max_bytes", [1, 100, 70_000, 1 << 20])
@pytest.mark.parametrize("max_records", [1, 3, 4096])
@pytest.mark.parametrize("cut", [0, 2, 50, 150_000])
def test_files_read_in_chunks_as_record_by_record(tmp_path: Path, max_bytes: int,
                                                  max_records: int, cut: int) -> None:
    from nsqd.diskfiles import DiskFiles

    sizes = [30, 26, 300_000, 40, 26, 70_000, 100] * 3
    data = b"".join(len(b).to_bytes(4, "big") + b
                    for b in (bytes([i % 251]) * n for i, n in enumerate(sizes)))
    data = data[:len(data) - cut]  # a file cut short: the last record (or its length) is short
    files = DiskFiles("t", tmp_path, 1 << 30, 26, 300_000, logging.getLogger("test"))
    files.data_file(0).write_bytes(data)
    try:
        for end in (None, len(data) + cut):  # an older file read to its end; the write file
            pos = 0
            while True:
                out = files.read(0, pos, end, max_bytes, max_records)
                want = _reference_read(data, pos, len(data) if end is None else end,
                                       max_bytes, max_records, 26, 300_000)
                assert (out.records, out.pos, out.error) == want
                if out.error is not None or out.finished or not out.records:
                    break
                pos = out.pos
            assert out.finished == (end is None and cut == 0)
    finally:
        files._close_reader()
