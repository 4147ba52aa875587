"""A channel's internal log (own queue, dead letters) on real files: taken in order,
acknowledged in any order, what is not acknowledged comes again after a restart, emptied for
good; after a restart the log's task reads the first records in by itself."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from nsqd.clock import SystemClock
from nsqd.privatelog import CACHE_BYTES, PrivateLog


def record(i: int) -> bytes:
    return b"\0" * 10 + b"%016d" % i + b"body %d" % i


def opened(directory: Path, **kwargs: int) -> PrivateLog:
    return PrivateLog("t:c#dead", directory, clock=SystemClock(), **kwargs)  # type: ignore[arg-type]


async def test_what_is_not_acknowledged_comes_again_after_a_restart(tmp_path: Path) -> None:
    private = opened(tmp_path / "c#dead")
    await private.put([record(i) for i in range(6)])
    assert private.depth() == 6 and private.ready()
    taken = private.pop(4)
    assert [r for r, _ in taken] == [record(i) for i in range(4)]
    assert private.depth() == 2
    for _, offset in (taken[3], taken[1], taken[0]):  # any order; 2 never
        private.ack(offset)
    await private.close()

    private = opened(tmp_path / "c#dead")
    assert private.depth() == 3  # 2, 4, 5
    async with trio.open_nursery() as nursery:
        await nursery.start(private.run)
        with trio.fail_after(30):  # read in by the log's task, nobody asking
            while not private.ready():
                await private.wait_read_in()
        assert [r for r, _ in private.pop(10)] == [record(2), record(4), record(5)]
        nursery.cancel_scope.cancel()
    await private.close()


async def test_emptied_for_good(tmp_path: Path) -> None:
    private = opened(tmp_path / "c#own", sync_every=1)
    await private.put([record(i) for i in range(3)])
    private.pop(1)
    await private.empty()
    assert private.depth() == 0 and private.pop(10) == []
    await private.put([record(9)])
    await private.close()
    private = opened(tmp_path / "c#own")
    assert private.depth() == 1
    async with trio.open_nursery() as nursery:
        await nursery.start(private.run)
        with trio.fail_after(30):
            await private.wait_readable()  # read from disk by the log's task
        assert [r for r, _ in private.pop(10)] == [record(9)]
        nursery.cancel_scope.cancel()
    await private.close()


async def test_a_wait_for_nothing_left_returns(tmp_path: Path) -> None:
    private = opened(tmp_path / "c#dead")
    with trio.fail_after(30):
        await private.wait_readable()
    assert private.depth() == 0
    await private.close()


async def test_memory_held_is_bounded_per_log(tmp_path: Path) -> None:
    # thousands of channels have two of these each: dead letters piling up, or read from
    # disk by a peek, are kept in memory only up to CACHE_BYTES (written, and read) at the
    # log's tick, and every record is still taken, in order, from disk
    body = b"x" * 4000
    count = 1024  # 4 MiB
    private = opened(tmp_path / "c#dead")
    await private.put([record(i) + body for i in range(count)])
    await private.log.tidy()
    assert private.log.memory_bytes <= CACHE_BYTES
    await private.close()

    private = opened(tmp_path / "c#dead")
    async with trio.open_nursery() as nursery:
        await nursery.start(private.run)
        taken = []
        with trio.fail_after(60):
            while len(taken) < count:
                await private.wait_readable()
                for rec, offset in private.pop(count):
                    taken.append(rec)
                    if offset % 2:  # half of them stay dead letters
                        private.ack(offset)
        assert taken == [record(i) + body for i in range(count)]
        await private.log.tidy()
        await private.log.tidy()  # (one tick keeps the last read for its readers)
        assert private.log.memory_bytes <= CACHE_BYTES
        nursery.cancel_scope.cancel()
    await private.close()
