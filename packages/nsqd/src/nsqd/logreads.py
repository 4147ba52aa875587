"""A topic log's reads (docs/design/storage.md, "Reading"): records from an offset as runs
(``runs.Run``), shared by every reader, never copied per reader, out of the memory tail, the
read cache (``readcache``: what the log's task read from the segments, one read for every
reader near the same offset), or, for ``/topic/read``, the segments at once; and the offset of
a time (a rewind by timestamp).

The log (``topiclog``) holds the tail, the cache and the files, and decides what is written
and removed; this only reads them. On the Trio thread; disk reads run in a worker thread under
the log's I/O lock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

import trio

from .readcache import READ_BYTES, ReadCache
from .runs import Run, RunStore

if TYPE_CHECKING:
    from .logfiles import LogFiles

__all__ = ["LogReads"]

T = TypeVar("T")


class Positions(Protocol):
    """A log's positions as its reads see them (``topiclog.TopicLog``)."""

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...

    @property
    def memory_start(self) -> int: ...


class InThread(Protocol):
    """The log's way to run a file operation in a worker thread."""

    def __call__(self, fn: Callable[..., T], *args: object) -> Awaitable[T]: ...


class LogReads:
    """The reads of one log."""

    __slots__ = ("_cache", "_files", "_in_thread", "_lock", "_log", "_tail", "_wake")

    def __init__(self, log: Positions, tail: RunStore, cache: ReadCache, files: LogFiles,
                 lock: trio.Lock, in_thread: InThread, wake: Callable[[], None]) -> None:
        self._log = log
        self._tail = tail
        self._cache = cache
        self._files = files
        self._lock = lock
        self._in_thread = in_thread
        self._wake = wake  # the log's task: records are wanted from disk

    def read(self, offset: int, n: int) -> list[Run] | None:
        """Up to ``n`` records from ``offset`` (or the first stored after it) as runs, from
        memory; ``None`` when they are on disk and not read yet: they are asked for (the
        log's task reads them, ``read_wanted``). Empty: nothing is stored from ``offset`` to
        the end (offsets given to messages that were never stored: a torn write, memory lost
        to a crash)."""
        tail = self._tail
        if ((tail and offset >= tail.start) or offset >= self._log.end
                or self._files.directory is None):
            return tail.read(offset, n)
        start = self._log.start
        if offset < start:
            offset = start
            if tail and offset >= tail.start:
                return tail.read(offset, n)
        offset = self._cache.skip(offset)
        if offset >= self._log.end:
            return []
        if tail and offset >= tail.start:
            return tail.read(offset, n)
        runs = self._cache.lookup(offset, n, tail)
        if runs is None and self._cache.want(offset):
            self._wake()
        return runs

    async def read_wanted(self) -> bool:
        """Read what readers asked for from disk into the cache (lock held); whether
        something came in (the readers to wake)."""
        return await self._cache.fill(self._read_disk, self._log.memory_start)

    async def _read_disk(self, offset: int, max_bytes: int) -> list[tuple[int, list[bytes]]]:
        return await self._in_thread(self._files.read, offset, max_bytes)

    async def read_at(self, offset: int, n: int, max_bytes: int = READ_BYTES) -> list[Run]:
        """``read``, waiting for the disk when it must (``/topic/read``): never caches."""
        runs = self.read(offset, n)
        if runs is not None:
            return runs
        self._cache.unwant(offset)
        async with self._lock:
            found = await self._in_thread(self._files.read, offset, max_bytes)
        out: list[Run] = []
        for first, records in found:
            records = records[:n]
            out.append((first, records, False))
            n -= len(records)
            if n <= 0:
                break
        return out

    async def find_time(self, timestamp_ns: int) -> int:
        """The offset of the first stored message published at or after ``timestamp_ns``
        (the log's end when there is none)."""
        async with self._lock:
            for segment in self._files.segments:
                if segment.count and segment.max_timestamp >= timestamp_ns:
                    found = await self._in_thread(segment.find_time, timestamp_ns)
                    if found is not None:
                        return found
        tail = self._tail
        for first, records, _ in tail.read(self._log.memory_start, tail.count):
            for i, record in enumerate(records):
                if int.from_bytes(record[:8], "big") >= timestamp_ns:
                    return first + i
        return self._log.end
