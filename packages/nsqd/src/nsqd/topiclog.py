"""A topic's log: every message of the topic once, by offset, newest in memory, older ones in
segment files (docs/design/storage.md).

Offsets. ``append`` gives records the next offsets (a leader's append); ``append_at`` stores
them at the offsets it is given, at or past the end, gaps kept (a follower's append of its
leader's batches, Kafka's appendAsFollower; an overlap is refused). ``end`` is the next offset
to be given, ``start`` the first still stored. Readers (the topic's channels, ``/topic/read``)
ask for records from an offset and get *runs* (``runs.Run``): the records are shared, never
copied per reader (``logreads``).

Memory and disk. New records go to the memory tail (``_tail``). While at most
``mem_queue_size`` records in it are not written, nothing is written (NSQ's memory queue);
past that, the oldest unwritten ones are written as one batch before the publisher is
answered. Records every durable cursor has passed (``needed``) before they were written are
dropped instead, unless the topic has a retention. Written records stay in the tail as a cache
for a while (``TAIL_CACHE_BYTES``): a consume right after a publish reads memory even with
``--mem-queue-size=0``. Older records are read from the segments by the background task into
the read cache (``readcache``), one read for every reader near the same offset; a reader that
asks for records not in memory is answered ``None`` and woken (``on_readable``) when they are
in.

Order. Appends that must write go through the group commit (``groupcommit``) one group at a
time under the I/O lock (every append waiting when a write starts is written by it, with one
fsync under ``--sync-every=1``), and become visible in offset order only once stored. A failed
write leaves the log as it was: nothing of the group is visible, the segment is cut back (see
``segment``), and the publishers get the error.

Files. The segments and the ``offsets`` file are ``logfiles.LogFiles``'s: this module decides
what is written, read and removed, and when; ``LogFiles`` does it, blocking. How a write goes
to disk (a new segment first, an fsync with it, inline or in a thread) is ``logwriter``'s.

Concurrency: all file work runs in worker threads (or inline, for a small write with no fsync
due) under one ``trio.Lock``; every other method is synchronous on the Trio thread. A
``threading.Lock`` (``LogFiles.busy``) is held through each worker thread's file operation:
``detach`` (the topic deleted) takes it to rename the directory aside, so that no file is
made again under the old name (``deletion``).

Errors: ``LogError`` (nsqd.errors) from ``append`` and ``append_at`` when the write failed
(``LogClosed``: the log is closed; ``OffsetOverlap``: ``append_at`` below the end), ``close``
and ``delete`` when they could not finish; read-side problems are logged, never raised.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import trio

from .deletion import holding
from .errors import LogClosed, LogError
from .groupcommit import Append, GroupCommit, overlap, place, refuse
from .logfiles import MAX_OFFSET, LogFiles
from .logreads import LogReads
from .logretention import Retention
from .logwriter import LogWriter
from .readcache import READ_BYTES, READ_CACHE_BYTES, ReadCache
from .record import is_plain
from .runs import Run, RunStore

if TYPE_CHECKING:
    from .clock import Clock

T = TypeVar("T")

#: Written records kept in memory as a cache (bytes).
TAIL_CACHE_BYTES = 16 << 20
#: Offsets are reserved this many at a time in the log's ``offsets`` file before they are
#: given, so that no offset is given twice even when a crash loses the memory tail: the next
#: start begins past the last reservation (a gap, never a reuse).
RESERVE = 1 << 20


def _all_needed() -> int:
    return 0


class TopicLog:
    def __init__(self, name: str, directory: Path | None, *, mem_queue_size: int,
                 max_bytes_per_file: int = 100 << 20, sync_every: int = 2500,
                 sync_timeout: float = 2.0, clock: Clock, logger: logging.Logger | None = None,
                 on_readable: Callable[[], None] = lambda: None,
                 tail_cache_bytes: int = TAIL_CACHE_BYTES,
                 read_cache_bytes: int = READ_CACHE_BYTES) -> None:
        self.name = name
        self.mem_queue_size = mem_queue_size
        self.sync_timeout = sync_timeout
        self.clock = clock
        self.log = logger if logger is not None else logging.getLogger("nsqd")
        self.on_readable = on_readable
        #: The lowest offset some durable cursor (or the topic's hold) still needs; set by
        #: the topic. Nothing at or above it is ever dropped or removed.
        self.needed: Callable[[], int] = _all_needed
        self._retention = Retention()
        self._tail = RunStore()
        self._tail_cache_bytes = tail_cache_bytes  # written records kept in memory
        self._cache = ReadCache(read_cache_bytes)  # read from the segments, for the readers
        self._files = LogFiles(name, directory, self.log)  # (directory None: memory only)
        self._end = 0
        #: Offsets given before the last start that no message has (a crash lost them).
        self.hole: tuple[int, int] | None = None
        # Offsets below may be given (reserved on disk); a memory-only log needs none.
        self._reserved = 0 if directory is not None else 1 << 62
        self._written_end = 0  # every offset below is on disk, or was never to be written
        self._unwritten = 0  # records in the tail at offsets >= _written_end
        self._io_lock = trio.Lock()
        self._commits = GroupCommit(self._io_lock, self._commit_group)
        self._wake = trio.Event()
        self._reads = LogReads(self, self._tail, self._cache, self._files, self._io_lock,
                               self._in_thread, self._wake_task)
        self._writer = LogWriter(self._files, self._in_thread,
                                 max_bytes_per_file=max_bytes_per_file, sync_every=sync_every)
        self._tidy_now = False  # poked: remove what nobody needs without waiting for the tick
        self._closed = False
        self.healthy = True  # False after a failed write or sync, True after a good write
        self.write_errors = 0
        self.sync_errors = 0
        self.dropped = 0  # memory only: records dropped past mem_queue_size, as NSQ does
        self._hold_saved: int | None = None  # the hold the ``offsets`` file keeps
        if directory is not None:  # (no write: a full disk must not stop nsqd from starting)
            next_offset = self._files.load()
            self._end = self._written_end = self._files.end
            self.resume_at(next_offset)
            self._hold_saved = self._files.saved_hold
        #: The topic's hold (``Topic.hold``): without channels, where the first channel
        #: starts. Kept in the ``offsets`` file with every reservation, so it is on disk
        #: before the first record is; without one, everything stored is held (never the
        #: end, which may be a reservation: what a crash lost is a gap there).
        saved = self._hold_saved
        self.hold = min(saved, self._end) if saved is not None else self.start

    @property
    def directory(self) -> Path | None:
        """The log's directory (the one moved aside, once ``detach``ed); None: memory only
        (an ephemeral topic)."""
        return self._files.directory

    # -- positions ---------------------------------------------------------------------------
    @property
    def end(self) -> int:
        """The offset the next message gets."""
        return self._end

    @property
    def start(self) -> int:
        """The first offset still stored (``end`` when nothing is)."""
        for segment in self._files.segments:
            if segment.count:
                first = segment.base
                return min(first, self._tail.start) if self._tail else first
        return self._tail.start if self._tail else self._end

    @property
    def written_end(self) -> int:
        """Offsets below are on disk (or were never to be written): past --mem-queue-size,
        what ``/stats`` counts as a backend depth."""
        return self._written_end

    def retain(self, ns: int | None = None, nbytes: int | None = None) -> bool:
        """Keep segments ``ns`` past every cursor, or the newest within ``nbytes`` (0: not
        at all; None: as it is); whether either changed (``logretention``)."""
        return self._retention.set(ns, nbytes)

    @property
    def retention_ns(self) -> int:
        """Segments kept this long past every cursor (0: not at all)."""
        return self._retention.ns

    @property
    def retention_bytes(self) -> int:
        """Or the newest segments within this size (0: not at all)."""
        return self._retention.nbytes

    @property
    def memory_start(self) -> int:
        """Offsets from here on are in memory (``/stats``' backend depth counts below it)."""
        return self._tail.start if self._tail else self._end

    @property
    def memory_bytes(self) -> int:
        """Record bytes held in memory: the tail (written or not) and the read cache."""
        return self._tail.bytes + self._cache.bytes

    @property
    def disk_bytes(self) -> int:
        return self._files.size

    @property
    def damaged_batches(self) -> int:
        """Damaged batches found in the segments since the start (each lost alone, its bytes
        kept aside: ``segment``), and their bytes."""
        return self._files.damaged_batches

    @property
    def damaged_bytes(self) -> int:
        return self._files.damaged_bytes

    def resume_at(self, offset: int) -> None:
        """Start giving offsets at ``offset`` at least (what the ``offsets`` file, cursors
        and nsqd.dat say was given before). Offsets skipped so are a ``hole``: no message
        has them, and cursors pass over them as done."""
        if offset > self._end and not self._tail:
            start = self.hole[0] if self.hole is not None else self._end
            self.hole = (start, offset)
            self._end = self._written_end = offset

    @property
    def saved_hold(self) -> int | None:
        """The hold the ``offsets`` file keeps (None: none, a log of an earlier version)."""
        return self._hold_saved

    def hold_from(self, offset: int) -> None:
        """The topic holds from ``offset`` now (emptied, or its last channel gone): written
        to the ``offsets`` file soon (until then, a crash holds from the old one: delivered
        again, never lost)."""
        self.hold = offset
        self.poke()

    def hole_in(self, start: int, end: int) -> int:
        """How many offsets of [start, end) are in the ``hole``."""
        if self.hole is None:
            return 0
        return max(0, min(end, self.hole[1]) - max(start, self.hole[0]))

    @property
    def stored_end(self) -> int:
        """The offset after the last record stored, in memory or on disk (``end`` less a
        gap or ``hole`` after it)."""
        return max(self._tail.end if self._tail else 0, self._files.end)

    def skip_to(self, offset: int) -> None:
        """A follower's end moves on to ``offset``: the offsets between are a gap (its
        leader's: no record there). Nothing if ``offset`` is not past the end."""
        if offset > self._end:
            self._end = offset

    def cut_back(self, offset: int) -> None:
        """A follower's end goes back to ``offset`` (docs/design/replication.md, KIP-101's
        truncation), where no record is stored at or past it: a gap or a ``hole`` after its
        records is given back. Nothing if ``offset`` is not below the end.

        Raises:
            LogError: a record is stored at or past ``offset``, or an append is under way
                (cutting stored records back is not built); the log is as it was.
        """
        if offset >= self._end:
            return
        if offset < self.stored_end or not self._commits.idle:
            raise LogError(f"cannot cut the log back to {offset}: records are stored up to "
                           f"{self.stored_end}")
        self._end = offset
        self._written_end = min(self._written_end, offset)
        if self.hole is not None:
            self.hole = (self.hole[0], offset) if self.hole[0] < offset else None

    async def truncate(self, offset: int) -> None:
        """A follower's log cut back to ``offset`` (docs/design/replication.md, KIP-101),
        records stored at or past it included: they go from memory (the tail, the read
        cache) and from disk (``LogFiles.cut``: later segments unlinked, the one holding
        ``offset`` cut at a batch boundary, the records of that batch below ``offset``
        written again as a batch of their own, fsynced), so that a start after a crash finds
        the log cut. The caller keeps it at or above its HW (nothing committed is cut). What
        is given back but stored nowhere (a gap, a ``hole``) goes as ``cut_back`` gives it.
        Nothing if ``offset`` is not below the end.

        Raises:
            LogError: an append is under way, or the files could not be cut (the log then
                ends where the disk says; its follower fetches the rest again).
        """
        if offset >= self._end:
            return
        if offset >= self.stored_end:
            self.cut_back(offset)
            return
        if not self._commits.idle or self._closed:
            raise LogError(f"cannot cut the log back to {offset}: an append is under way")
        async with self._io_lock:
            self._tail.drop_from(offset)
            self._cache.clear()
            error = None
            if self.directory is not None and self._files.end > offset:
                try:
                    await self._in_thread(self._files.cut, offset)
                except OSError as exc:
                    error = exc
                    self.healthy = False
                    self.write_errors += 1
            if error is not None:  # (where the disk says it ends now)
                offset = min(offset, max(self._files.end, self._tail.end if self._tail else 0))
            self._end = offset
            self._written_end = min(self._written_end, offset)
            self._unwritten = self._tail.count_between(self._written_end, offset)
            if self.hole is not None:
                self.hole = (self.hole[0], offset) if self.hole[0] < offset else None
            if self.hold > offset:
                self.hold = offset
        if error is not None:
            raise LogError(f"failed to cut the log back to {offset} - {error}")

    # -- writing -----------------------------------------------------------------------------
    async def append(self, records: Sequence[bytes], *, plain: bool) -> int:
        """Store ``records`` at the log's end (``plain``: all of them plain records); the
        offset of the first (a leader's append: the log gives the offsets).

        Raises:
            LogError: they could not be written; none of them is stored.
        """
        n = len(records)
        if (self._commits.idle
                and self._unwritten + n <= self.mem_queue_size and not self._closed
                and self._end + n <= self._reserved):
            first = self._end
            self._tail.append(first, records, plain)
            self._end = first + n
            self._unwritten += n
            return first
        return await self._append_written(records, plain, None)

    async def append_at(self, first: int, records: Sequence[bytes], *,
                        plain: bool | None = None) -> None:
        """Store ``records`` at offsets ``first``, ``first + 1``... as given (a follower's
        append: the offsets are the leader's). ``first`` may be past the end: the offsets
        between hold no message (a gap, passed over by every reader, kept across restarts).
        Stored, written and made durable as ``append``'s, in the order of the calls: a
        leader's ``append`` after it goes on from its last offset. ``plain``: all of them
        plain records (None: looked at).

        Raises:
            OffsetOverlap: ``first`` is below the log's end (what the log holds or has given,
                an earlier append's included); nothing is stored.
            LogError: they could not be written; none of them is stored.
            ValueError: an offset past ``MAX_OFFSET``.
        """
        n = len(records)
        if first < 0 or first + n > MAX_OFFSET:
            raise ValueError(f"offsets {first}-{first + n} out of range 0-{MAX_OFFSET}")
        if first < self._end:
            raise overlap(first, n, self._end)
        if not n:
            return
        if plain is None:
            plain = all(map(is_plain, records))
        if (self._commits.idle
                and self._unwritten + n <= self.mem_queue_size and not self._closed
                and first + n <= self._reserved):
            self._tail.append(first, records, plain)
            self._end = first + n
            self._unwritten += n
            return
        await self._append_written(records, plain, first)

    async def _append_written(self, records: Sequence[bytes], plain: bool, at: int | None
                              ) -> int:
        if self._closed:
            raise LogClosed
        return await self._commits.submit(records, plain, at)

    async def _commit_group(self, group: list[Append]) -> None:
        """Store the appends of ``group``, writing what must be written (lock held): a
        failure refuses every one of them, a follower's overlap that one alone."""
        if self._closed:  # closed or set aside (its topic deleted): nsqd's EXITING
            refuse(group, LogClosed())
            return
        group, end = place(group, self._end)
        if not group:
            return
        if end > self._reserved:
            try:
                await self._reserve(end + RESERVE)
            except (OSError, LogClosed) as exc:
                if self._closed:
                    refuse(group, LogClosed())
                    return
                assert isinstance(exc, OSError)
                self.healthy = False
                self.write_errors += 1
                self.log.error("LOG(%s): failed to reserve offsets - %s", self.name, exc)
                refuse(group, LogError(f"failed to reserve offsets - {exc}"))
                return
        self._skip_unneeded()
        total = sum(len(r.records) for r in group)
        over = self._unwritten + total - self.mem_queue_size
        if self.directory is None:
            self._visible(group, end)
            if over > 0:  # memory only: what does not fit is dropped, as in NSQ
                self.dropped += self._tail.drop_first(over)
                self._unwritten = self._tail.count
            return
        old = min(max(over, 0), self._unwritten)
        new = max(over, 0) - old
        runs: list[tuple[int, Sequence[bytes]]] = []
        if old:  # the oldest unwritten records of the tail, gaps or not
            runs += [(first, records) for first, records, _
                     in self._tail.read(self._written_end, old)]
        if new:
            for request in group:
                part = request.records[:new]
                if part:
                    runs.append((request.first, part))
                new -= len(part)
                if not new:
                    break
        if runs:
            try:
                await self._writer.write(runs)
            except OSError as exc:
                if self._closed:
                    refuse(group, LogClosed())
                    return
                self.healthy = False
                self.write_errors += 1
                self.log.error("LOG(%s): failed to write - %s", self.name, exc)
                refuse(group, LogError(f"failed to write messages - {exc}"))
                if exc.errno == errno.ENOSPC:
                    self._wake.set()  # see what can be removed
                return
            self.healthy = True
            written = sum(len(r) for _, r in runs)
            self._written_end = runs[-1][0] + len(runs[-1][1])
            self._unwritten -= old
            self._visible(group, end, written_new=written - old)
        else:
            self._visible(group, end)

    def _visible(self, group: list[Append], end: int, written_new: int = 0) -> None:
        """The group's records into the tail at their offsets, in order (the first
        ``written_new`` of them already on disk); the end moves to ``end``."""
        added = 0
        for request in group:
            self._tail.append(request.first, request.records, request.plain)
            added += len(request.records)
        self._unwritten += added - written_new
        self._end = end

    def _skip_unneeded(self) -> None:
        """Unwritten records every durable cursor has passed are never written (unless the
        topic keeps what it delivered: a retention)."""
        if self._retention.keeps_delivered:
            return
        needed = min(self.needed(), self._end)
        if needed > self._written_end:
            self._unwritten -= self._tail.count_between(self._written_end, needed)
            self._written_end = needed
            self._tail.drop_before(needed)

    # -- reading (``logreads``) --------------------------------------------------------------
    def read(self, offset: int, n: int) -> list[Run] | None:
        """Up to ``n`` records from ``offset`` (or the first stored after it) as runs, from
        memory; ``None`` when they are on disk and not read yet: they are asked for, and
        ``on_readable`` is called once they are in; empty: nothing is stored from ``offset``
        to the end (``LogReads.read``)."""
        return self._reads.read(offset, n)

    async def fetch(self, offset: int) -> None:
        """Have the records from ``offset`` in memory (read from disk now if they are not),
        so that ``read`` answers at once."""
        if self.read(offset, 1) is not None:
            return
        async with self._io_lock:
            await self._read_wanted()

    async def read_at(self, offset: int, n: int, max_bytes: int = READ_BYTES) -> list[Run]:
        """``read``, waiting for the disk when it must (``/topic/read``): never caches."""
        return await self._reads.read_at(offset, n, max_bytes)

    async def find_time(self, timestamp_ns: int) -> int:
        """The offset of the first stored message published at or after ``timestamp_ns``
        (``end`` when there is none)."""
        return await self._reads.find_time(timestamp_ns)

    async def _read_wanted(self) -> None:
        if await self._reads.read_wanted():
            self.on_readable()

    # -- the background task -----------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Disk reads for readers, the periodic fsync, removing segments nobody needs."""
        task_status.started()
        tick = self.clock.now() + self.sync_timeout
        while not self._closed:
            if self.clock.now() >= tick:
                tick = self.clock.now() + self.sync_timeout
                async with self._io_lock:
                    await self._tidy(sync=True)
            if self._cache.wanted:
                async with self._io_lock:
                    await self._read_wanted()
                continue
            with trio.move_on_at(tick):
                await self._wake.wait()
            self._wake = trio.Event()
            if self._tidy_now or (self.directory is not None and not self.healthy):
                self._tidy_now = False
                async with self._io_lock:
                    await self._tidy(sync=False)

    def _wake_task(self) -> None:
        self._wake.set()

    def poke(self) -> None:
        """Cursors moved a long way (empty, rewind, a channel gone, a retention changed):
        tidy up now."""
        self._tidy_now = True
        self._wake.set()

    async def tidy(self) -> None:
        """Remove what nobody needs and trim memory now (tests; ``/topic/empty``)."""
        async with self._io_lock:
            await self._tidy(sync=False)

    async def _tidy(self, *, sync: bool) -> None:
        """Lock held: the periodic fsync, then segments and memory nobody needs."""
        if self.directory is None:
            self._trim_memory()
            return
        if sync:
            try:
                await self._writer.sync()
            except OSError as exc:
                self.sync_errors += 1
                self.healthy = False
                self.log.error("LOG(%s): failed to sync - %s", self.name, exc)
        await self._remove_unneeded()
        self._trim_memory()
        if self.hold != self._hold_saved and self.directory.is_dir():
            hold = self.hold
            try:
                await self._in_thread(self._save_hold_blocking, max(self._reserved, self._end),
                                      hold)
                self._hold_saved = hold
            except LogClosed:
                pass
            except OSError as exc:
                self.log.error("LOG(%s): failed to write the offsets file - %s", self.name, exc)

    def _save_hold_blocking(self, next_offset: int, hold: int) -> None:
        if self._closed:  # (``busy`` held: checked before a detach, or after it)
            raise LogClosed
        self._files.write_offsets(next_offset, hold)

    async def _remove_unneeded(self) -> None:
        needed = min(self.needed(), self._written_end)
        retention = self._retention
        gone, retained = retention.removable(self._files.segments, needed, self.disk_bytes,
                                             self.clock.wall_ns())
        if gone:
            try:  # (in ``segments`` until removed: a ``detach`` meanwhile moves their paths)
                await self._in_thread(self._files.remove, gone)
            finally:
                self._files.drop_removed(gone)
            self.log.info("LOG(%s): removed %d segment(s) up to offset %d", self.name,
                          len(gone), gone[-1].end)
        if self._files.segments and not self._files.segments[:-1]:
            active = self._files.segments[-1]
            if active.count and retention.may_remove(active, needed, retained,
                                                     self.clock.wall_ns()):
                # Every cursor is past the active segment: it is cut to nothing and renamed
                # after the next offset (no data written: this must work on a full disk).
                await self._in_thread(self._files.reset_active, self._written_end)
                self.log.info("LOG(%s): removed the active segment up to offset %d",
                              self.name, self._written_end)
                gone.append(active)
        if gone:
            self._forget_removed()

    def _forget_removed(self) -> None:
        """Segments were removed: their records go from memory too (the tail keeps written
        records as a cache, the read cache what it read), so that no reader, ``start`` or a
        rewind finds a record the disk no longer has."""
        below = self._written_end
        for segment in self._files.segments:
            if segment.count:
                below = min(segment.base, below)
                break
        self._tail.drop_before(below)
        self._cache.drop_before(below)

    def _trim_memory(self) -> None:
        """Drop from memory what nobody needs (and, written, what is past the cache size)."""
        self._cache.trim()
        tail = self._tail
        if not tail:
            return
        needed = min(self.needed(), self._end)
        if self.directory is None:
            tail.drop_before(needed)
            self._unwritten = tail.count
            return
        written_end = self._written_end
        keep = needed if not self._retention.keeps_delivered else 0
        if keep > tail.start and keep <= written_end:
            tail.drop_before(keep)
        elif keep > written_end:
            tail.drop_before(written_end)
        while tail and tail.start < written_end and tail.bytes > self._tail_cache_bytes:
            tail.drop_before(min(written_end, tail.start + max(tail.count // 4, 1)))

    # -- the end -----------------------------------------------------------------------------
    async def _reserve(self, until: int) -> None:
        """Offsets below ``until`` may be given (lock held).

        Raises:
            OSError: the reservation could not be written.
        """
        assert self.directory is not None
        hold = self.hold
        await self._in_thread(self._save_hold_blocking, until, hold)
        self._reserved = until
        self._hold_saved = hold

    async def close(self) -> None:
        """Write what some cursor or the retention still needs, fsync, close the files.

        Raises:
            LogError: the memory tail could not be written (its messages are lost, as a
                memory queue's are when nsqd cannot save them).
        """
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        with trio.CancelScope(shield=True):
            async with self._io_lock:
                if self.directory is None:
                    return
                self._skip_unneeded()
                error = None
                if self._unwritten:
                    runs = self._tail.runs_between(self._written_end, self._end)
                    try:
                        await self._writer.write(runs, sync=True)
                        self._written_end = self._end
                        self._unwritten = 0
                    except OSError as exc:
                        error = LogError(f"failed to write messages at close - {exc}")
                else:
                    try:
                        await self._writer.sync()
                    except OSError as exc:
                        error = LogError(f"failed to sync at close - {exc}")
                await self._in_thread(self._files.close)
                if ((self._reserved > self._end or self.hold != self._hold_saved)
                        and self.directory.is_dir()):
                    try:  # exact again: the next start goes on from the end, no gap
                        await self._in_thread(self._files.write_offsets, self._end, self.hold)
                    except OSError as exc:
                        self.log.warning("LOG(%s): offsets not written - %s", self.name, exc)
        if error is not None:
            raise error

    def detach(self) -> None:
        """The topic is deleted: the log takes no more writes, and its directory is renamed
        out of the way at once (``deletion.aside_name``), so that a topic made again with the
        same name starts empty in a directory of its own while ``delete`` removes this
        one. A start removes what a crash left so. A file operation under way in a worker
        thread is waited for, and none after it makes a file under the old name
        (``LogFiles.detach``)."""
        self._closed = True
        self._wake.set()
        self._files.detach()

    async def delete(self) -> None:
        """Close without writing and remove every file of the log (``detach`` first, when
        the topic's name may be used again at once)."""
        self._closed = True
        self._wake.set()
        with trio.CancelScope(shield=True):
            async with self._io_lock:
                self._commits.refuse_waiting(LogClosed())
                self._tail.clear()
                self._cache.clear()
                segments = self._files.take_segments()
                await self._in_thread(self._files.delete, segments)

    async def _in_thread(self, fn: Callable[..., T], *args: object) -> T:
        # Shielded so that a started file operation is always followed by its bookkeeping.
        with trio.CancelScope(shield=True):
            result = await trio.to_thread.run_sync(holding, self._files.busy, fn, *args)
        return result

