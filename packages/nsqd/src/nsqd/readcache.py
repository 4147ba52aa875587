"""A topic log's cache of disk reads (docs/design/storage.md, "Reading"): the records its
readers asked for below the memory tail, read from the segments once for every reader near
the same offset, and kept for them (up to ``READ_CACHE_BYTES``, or the size its log gives).

A reader asks (``lookup``): the records are answered from the cache when it holds the offset
asked for, else the offset is *wanted* (the log's task reads it, ``fill``) and the reader is
woken when it is in. Between two runs of the cache lie records not read yet, never passed
over (``_contiguous``); a disk read that found the next record further on (a gap: offsets no
record has) is remembered (``skips``), so that the next ask for that offset goes there.

Used on the Trio thread; the disk reads themselves are the log's (a worker thread).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .runs import Run, RunStore

__all__ = ["READ_BYTES", "READ_CACHE_BYTES", "ReadCache"]

#: Records read from disk and kept for the readers (bytes), and one read's size.
READ_CACHE_BYTES = 8 << 20
READ_BYTES = 1 << 20
_SKIPS_KEPT = 1024

#: A read of the segments: runs from the first record at or after an offset, up to about
#: so many bytes (``LogFiles.read``, in a worker thread).
DiskRead = Callable[[int, int], Awaitable[list[tuple[int, list[bytes]]]]]


class ReadCache:
    __slots__ = ("_fresh", "_max_bytes", "_runs", "_skips", "_wanted")

    def __init__(self, max_bytes: int = READ_CACHE_BYTES) -> None:
        self._max_bytes = max_bytes  # kept (what a fill just read is kept until ``trim``)
        self._runs = RunStore()
        self._fresh: set[int] = set()  # runs read since the last trim (kept by the next)
        self._skips: dict[int, int] = {}  # disk reads that found a gap: offset -> next one
        self._wanted: set[int] = set()

    @property
    def bytes(self) -> int:
        """Record bytes held."""
        return self._runs.bytes

    @property
    def wanted(self) -> bool:
        """Whether some reader waits for a disk read."""
        return bool(self._wanted)

    def skip(self, offset: int) -> int:
        """Where a read from ``offset`` goes on (past a gap a disk read found there)."""
        return self._skips.get(offset, offset)

    def lookup(self, offset: int, n: int, tail: RunStore) -> list[Run] | None:
        """Up to ``n`` records from ``offset`` (below the tail), going on into ``tail`` when
        the cache reaches it; None when the cache does not hold ``offset``: it is wanted
        (``want``)."""
        runs_held = self._runs
        if not runs_held.covers(offset):
            return None
        runs = _contiguous(runs_held.read(offset, n))
        got = sum(len(r) for _, r, _ in runs)
        if got < n and tail and runs:  # the cache reaches the tail: go on there
            last, records, _ = runs[-1]
            if last + len(records) >= tail.start:
                runs += tail.read(last + len(records), n - got)
        return runs

    def want(self, offset: int) -> bool:
        """A reader waits for ``offset``: True when it was not wanted yet (wake the task)."""
        if offset in self._wanted:
            return False
        self._wanted.add(offset)
        return True

    def unwant(self, offset: int) -> None:
        """Nobody waits for ``offset`` (read otherwise, without caching)."""
        self._wanted.discard(offset)

    async def fill(self, read: DiskRead, memory_start: int) -> bool:
        """Read every wanted offset below ``memory_start`` from disk into the cache (what
        was just read is kept, for the readers that asked, even past the cache's size);
        whether any reader may now be answered."""
        wanted = sorted(self._wanted)
        self._wanted.clear()
        got = False
        fresh: set[int] = set()  # runs read now: kept, or the reader that asked never gets them
        cache = self._runs
        for offset in wanted:
            if cache.covers(offset) or offset >= memory_start:
                got = True
                continue
            found = await read(offset, READ_BYTES)
            if found and found[0][0] > offset:
                self._skips[offset] = found[0][0]
            elif not found:
                self._skips[offset] = memory_start
            for first, records in found:
                cache.insert(first, records, False)
                fresh.add(first)
            got = True
        while cache.bytes > self._max_bytes and cache.drop_oldest_run(fresh):
            pass
        self._fresh |= fresh
        if len(self._skips) > _SKIPS_KEPT:
            self._skips.clear()
        return got

    def trim(self) -> None:
        """Back within its size (the log's tick): what the last fill read is kept past the
        size until the trim after this one, time for the readers it woke to take it; a
        reader that comes later reads again."""
        while self._runs.bytes > self._max_bytes and self._runs.drop_oldest_run(self._fresh):
            pass
        self._fresh = set()

    def drop_before(self, offset: int) -> None:
        """Records below ``offset`` are removed from the log: from the cache too, with every
        skip (one may lead past what is gone)."""
        self._runs.drop_before(offset)
        self._skips.clear()

    def clear(self) -> None:
        self._runs.clear()
        self._fresh.clear()
        self._skips.clear()
        self._wanted.clear()


def _contiguous(runs: list[Run]) -> list[Run]:
    """``runs`` up to the first gap: between two runs of the read cache are records not read
    yet (or never stored: the disk read that follows says which), never to be passed over."""
    for i in range(1, len(runs)):
        first, records, _ = runs[i - 1]
        if runs[i][0] != first + len(records):
            return runs[:i]
    return runs
