"""A channel's internal log: its own queue or its dead letters, kept on the same log and
cursor machinery as a topic (docs/design/storage.md, "The own queue and dead letters").

Each is a ``TopicLog`` of its own, in ``<topic's directory>/<channel>#own`` or ``#dead``
(``directory_name``: no channel's name has a ``#`` but an ephemeral one's, and ephemeral
channels keep these in memory; a segment's name is digits, a journal's ends in
``.cursor``), with one reader: a ``Cursor`` whose journal, ``cursor``, is in the same
directory. So topics and these queues share one format, one group commit, one recovery and
one deletion path.

Records are appended with the log's ``--mem-queue-size`` at 0: each ``put`` is written
before it returns (fsynced with ``--sync-every=1``, else by the sync policy), as a disk
queue's were. They are taken in order from the cursor's read position (``pop``: with the
offset of each), and acknowledged in any order (``ack``): the mark-delete position moves
over every acknowledged prefix, and the log removes the segments below it. A record taken
and not acknowledged is delivered again after a crash or a restart: the cursor is persisted
as a topic's cursors are (every ``--sync-every`` acknowledgements, every ``--sync-timeout``,
fsynced with ``--sync-every=1``; at close, fsynced), by ``run``.

Records are read from the log's memory (what was written since the start, up to
``CACHE_BYTES``) or from its segments by the log's task (about 1 MiB at a time, kept until the
log's next tick, then ``CACHE_BYTES`` of it: the first at start, the next when ``pop`` has
taken what was read): ``ready`` says whether ``pop`` can hand out a record
now, ``wait_readable`` waits until it can (or nothing is left), ``wait_read_in`` for each
read from disk. ``each_unread`` reads one without taking anything (``goexport``).

Errors: ``put`` raises ``LogError`` (``LogClosed`` once closed or detached), as
``TopicLog.append`` does; so do ``empty`` and ``close`` when they cannot finish.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from . import cursorfile
from .cursor import Cursor
from .errors import LogClosed, LogError
from .record import is_plain
from .runs import pass_gaps, without_acked
from .topiclog import TopicLog

if TYPE_CHECKING:
    from .clock import Clock
    from .runs import Run

__all__ = ["CACHE_BYTES", "DEAD", "JOURNAL", "OWN", "PrivateLog", "directory_name", "each_unread"]

#: The two internal logs of a channel, by the suffix of their directory's name.
OWN = "#own"
DEAD = "#dead"
#: The cursor's journal in the log's directory.
JOURNAL = "cursor"
_EXPORT_RECORDS = 4096  # records per read of ``each_unread``
_READ_AHEAD_RECORDS = 4096  # records asked for at start (the log reads up to 1 MiB of them)
#: Record bytes each internal log keeps in memory, written and read (each, at its tick; a
#: topic's log keeps 16 and 8 MiB): a broker has two of these a channel, and thousands of channels,
#: most of them idle, their dead letters read only by a peek or a respawn.
CACHE_BYTES = 256 << 10


def directory_name(channel: str, kind: str) -> str:
    """The directory of ``channel``'s internal log ``kind`` (``OWN``, ``DEAD``) in its
    topic's directory."""
    return f"{channel}{kind}"


class PrivateLog:
    def __init__(self, name: str, directory: Path, *, clock: Clock,
                 max_bytes_per_file: int = 100 << 20, sync_every: int = 2500,
                 sync_timeout: float = 2.0, logger: logging.Logger | None = None) -> None:
        self.name = name
        self.sync_every = sync_every
        self.sync_timeout = sync_timeout
        self._logger = logger if logger is not None else logging.getLogger("nsqd")
        self._closed = False
        self._wake = trio.Event()  # the cursor has --sync-every changes to persist
        self._read_in = trio.Event()  # set (and replaced) at each read from disk
        self.log = TopicLog(name, directory, mem_queue_size=0,
                            max_bytes_per_file=max_bytes_per_file, sync_every=sync_every,
                            sync_timeout=sync_timeout, clock=clock, logger=self._logger,
                            on_readable=self._records_read_in,
                            tail_cache_bytes=CACHE_BYTES, read_cache_bytes=CACHE_BYTES)
        self.cursor = self._load_cursor(directory / JOURNAL)
        self.log.needed = self._needed

    def _load_cursor(self, path: Path) -> Cursor:
        """The cursor where its journal says; at the earliest offset stored without one (a
        new log, or one the migration made), or when it cannot be read (delivered again,
        never skipped); never past the log's end."""
        log = self.log
        cursor = Cursor(log.start, cursorfile.CursorJournal(path, logger=self._logger))
        try:
            state = cursorfile.load(path, logger=self._logger)
        except OSError as exc:
            self._logger.error("%s: cursor journal %s cannot be read (%s): from the earliest "
                               "record stored", self.name, path, exc)
            state = None
        if state is not None:
            if state.mark_delete > log.end:
                self._logger.error("%s: cursor journal %s is past the log's end (%d > %d)",
                                   self.name, path, state.mark_delete, log.end)
                state = cursorfile.CursorState(log.end)
            cursor.restore(state, log.start)
        if log.hole is not None and cursor.read < log.hole[1]:
            cursor.skip(*log.hole)  # offsets no record has: done with
        return cursor

    def _needed(self) -> int:
        return self.cursor.mark_delete

    def _records_read_in(self) -> None:
        self._read_in.set()
        self._read_in = trio.Event()

    # -- what the backlog asks -------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def depth(self) -> int:
        """Records not taken yet."""
        return self.cursor.unread(self.log.end)

    def ready(self) -> int:
        """1 when ``pop`` can hand out a record now (else the log is asked to read it)."""
        if self._closed:
            return 0
        return 1 if self._runs(1) else 0

    async def put(self, records: list[bytes]) -> None:
        """Append ``records``: written before this returns (fsynced with --sync-every=1).

        Raises:
            LogError: they could not be written (none of them is stored);
                ``LogClosed``: the log is closed or detached.
        """
        if self._closed:
            raise LogClosed
        if not records:
            await trio.lowlevel.checkpoint()
            return
        await self.log.append(records, plain=all(map(is_plain, records)))

    def peek(self, n: int) -> list[bytes]:
        """Up to ``n`` of the next records in memory, left in place."""
        if self._closed:
            return []
        return [record for _, records, _ in self._runs(n) or () for record in records][:n]

    def pop(self, n: int) -> list[tuple[bytes, int]]:
        """Up to ``n`` of the next records in memory, each with its offset (for ``ack``);
        they stay in the log until acknowledged. Never waits."""
        if self._closed:
            return []
        runs = self._runs(n)
        if not runs:
            return []
        out: list[tuple[bytes, int]] = []
        for first, records, _ in runs:
            out += zip(records, range(first, first + len(records)), strict=True)
        self.cursor.advance_read(out[-1][1] + 1)
        self._runs(1)  # the next ones asked for, when they are on disk only (a read-ahead)
        return out

    def ack(self, offset: int) -> None:
        """The record at ``offset`` (taken by ``pop``) is done with."""
        if self._closed:
            return
        cursor = self.cursor
        cursor.ack(offset)
        if cursor.dirty >= self.sync_every:
            self._wake.set()

    def _runs(self, n: int) -> list[Run] | None:
        """Up to ``n`` records from the read position in memory, without those acknowledged
        (ahead of the mark-delete position, after a restart); None while the log reads them
        from disk (``_records_read_in`` then). Offsets that hold no record (lost to a crash,
        a damaged batch) are passed over as done with, and so are acknowledged records
        before the first one returned."""
        cursor = self.cursor
        while True:
            end = self.log.end
            read = cursor.read
            if read >= end:
                return []
            runs = self.log.read(read, min(n, end - read))
            if runs is None:
                return None
            if not runs:
                cursor.skip(read, end)
                return []
            if runs[0][0] > read or len(runs) > 1:
                pass_gaps(runs, read, cursor)
            if not cursor.acked:
                return runs
            last_first, last_records, _ = runs[-1]
            kept = without_acked(runs, cursor)
            if kept:
                return kept
            cursor.advance_read(last_first + len(last_records))

    async def wait_readable(self) -> None:
        """Return once ``pop`` can hand out a record, or none is left.

        Raises:
            LogClosed: closed, or detached during the wait (a waiting request ends at
                once: nothing would ever be read any more).
        """
        await trio.lowlevel.checkpoint()
        while True:
            if self._closed:
                raise LogClosed
            if not self.depth() or self.ready():
                return
            await self._read_in.wait()

    async def wait_read_in(self) -> None:
        """Return at the next read from disk (records ``pop`` can hand out now)."""
        await self._read_in.wait()

    # -- the task, the end -----------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The log's task (reads, fsyncs, removals) and the cursor's persistence."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.log.run)
            task_status.started()
            # What a restart left on disk: the first of it read in now, so that a look
            # (a dead job found by id, a peek) finds it in memory.
            self._runs(_READ_AHEAD_RECORDS)
            while not self._closed:
                with trio.move_on_after(self.sync_timeout):
                    await self._wake.wait()
                self._wake = trio.Event()
                if self.cursor.dirty and not self._closed:
                    await self._persist(sync=self.sync_every == 1)

    async def _persist(self, *, sync: bool, force: bool = False) -> None:
        try:
            await self.cursor.flush(sync=sync, force=force)
        except (OSError, ValueError) as exc:
            self._logger.error("%s: failed to persist its cursor - %s", self.name, exc)
            raise LogError(f"failed to persist the cursor - {exc}") from exc

    async def empty(self) -> None:
        """Every record done with (persisted, fsynced); the log removes them.

        Raises:
            LogError: the cursor could not be persisted (a restart may find them).
        """
        if self._closed:
            raise LogClosed
        self.cursor.move_to(self.log.end)
        self.log.poke()
        await self._persist(sync=True, force=True)

    async def close(self) -> None:
        """Close the log (fsynced), then persist the cursor (fsynced).

        Raises:
            LogError: either could not finish (logged).
        """
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        error: LogError | None = None
        with trio.CancelScope(shield=True):
            try:
                await self.log.close()
            except LogError as exc:
                error = exc
            try:
                await self._persist(sync=True, force=True)
            except LogError as exc:
                error = error or exc
            journal = self.cursor.journal
            if journal is not None:
                journal.close()
        if error is not None:
            raise error

    def detach(self) -> None:
        """Its channel is deleted: no more records, and the directory is renamed aside at
        once with the journal in it (``deletion``), waiting for a file operation under way;
        whoever waits for records gets ``LogClosed`` at once."""
        self._closed = True
        self._wake.set()
        self._records_read_in()
        journal = self.cursor.journal
        if journal is not None:
            journal.detach()  # (no entry after this: it would make the directory again)
        self.log.detach()
        directory = self.log.directory
        if directory is not None:
            self.name = f"{self.name} ({directory.name})"
        self._logger.info("%s: moved aside to be deleted", self.name)

    async def delete(self) -> None:
        """Remove the log's directory and journal (``detach`` first when the channel's name
        may be used again at once)."""
        self._closed = True
        self._wake.set()
        await self.log.delete()
        await self.cursor.forget()


async def each_unread(directory: Path, name: str, logger: logging.Logger,
                      handle: Callable[[list[bytes]], Awaitable[None]], clock: Clock) -> int:
    """The records of the internal log in ``directory`` its cursor has not done with, in
    batches to ``handle`` (``goexport``: nothing is written but what any start writes, the
    segments' indexes at close); how many."""
    if not await trio.to_thread.run_sync(directory.is_dir):
        return 0
    private = PrivateLog(name, directory, clock=clock, logger=logger)
    log, cursor = private.log, private.cursor
    count = 0
    try:
        offset, end = cursor.read, log.end
        while offset < end:
            runs = await log.read_at(offset, _EXPORT_RECORDS)
            if not runs:
                break
            batch = [record for first, records, _ in runs
                     for i, record in enumerate(records) if not cursor.is_done(first + i)]
            last_first, last_records, _ = runs[-1]
            offset = last_first + len(last_records)
            if batch:
                count += len(batch)
                await handle(batch)
    finally:
        await log.close()
    return count
