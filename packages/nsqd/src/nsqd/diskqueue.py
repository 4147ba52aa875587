"""A file-backed FIFO of byte records, readable by (and able to read) go-diskqueue v1.1.0 data.

The file format (data files, metadata, ``.bad`` files, record framing) is described in
``diskfiles`` (``DiskFiles``), which does all the file work.

Positions are ``(file_num, offset)`` tuples, so "is the reader behind the writer" is a tuple
comparison. Four of them move:

* ``_write``: where the next record goes.
* ``_ahead``: how far the read-ahead has got; the records between ``_read`` and ``_ahead`` sit
  in memory (``_buffer``, bounded to about 1 MiB / a few thousand records).
* ``_read``: everything before it has been popped.
* the committed position (``_committed()``): everything before it is consumed for good. This
  is the position the metadata keeps, with depth = records from there to ``_write``. Normally
  it is ``_read``. With ``explicit_commit=True`` it moves only by ``commit()``: popped records
  stay on disk, counted in the persisted depth, until committed, so after a crash (even a
  kill -9) or a restart every uncommitted record is delivered again. A fully-read file is
  deleted only once the committed position is past it. The format is the same either way.

Concurrency. Every file operation runs in a worker thread, and one ``trio.Lock`` serialises
them, so the file descriptors only ever see one thread at a time. ``put()`` queues its records
and then takes the lock; whoever gets it writes *everything* queued in one thread call (group
commit), and the callers behind it find their records already written. ``run()`` does the rest:
read-ahead, the periodic sync, deleting fully-read files and putting aside corrupt ones.
``pop()`` and ``commit()`` only touch memory. Thread calls are shielded from cancellation: once
started they finish and their result is applied before the cancellation is delivered, so
memory always matches the files. ``detach()`` (the channel deleted) renames the files from the
Trio thread at once: a ``threading.Lock`` held through each file operation has it wait for one
under way, so that no file is ever made again under the old name; a task waiting for records
is woken, to find the queue closed.

Durability. ``put()`` returns after the OS accepted the bytes (a killed process loses nothing).
The metadata always names the current write file: it is persisted before the first byte goes
into a new file. So after a crash the only stale numbers are the write offset, depth and read
offset, and loading repairs those as go-diskqueue does (writing resumes in a fresh file, the
reader salvages the old one, records may be delivered twice, never lost).

Errors: a failed operation raises ``DiskQueueError`` (``DiskQueueClosed`` once closed; both
in ``nsqd.errors``; bad arguments to the constructor raise
``ValueError``). Read-side problems are logged and handled, never raised.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import attrs
import trio

from .deletion import aside_name, holding
from .diskfiles import DiskFiles, Gone, Pos, PutRequest, WriteOutcome, settle, take_batch
from .errors import DiskQueueClosed, DiskQueueError

__all__ = ["DiskQueue", "DiskQueueClosed", "DiskQueueError", "Pos"]

_READ_AHEAD_BYTES = 1 << 20  # refill when under half of these
_READ_AHEAD_RECORDS = 4096
_WRITE_BATCH_BYTES = 8 << 20  # per thread call; a single larger put() still goes in one call
_INLINE_WRITE_BYTES = 256 << 10  # a write this small, with no fsync due, skips the thread

T = TypeVar("T")


def _default_logger(logger: logging.Logger | None) -> logging.Logger:
    return logger if logger is not None else logging.getLogger(__name__)


# on_setattr=NO_OP: attrs' default runs the converters of data_path and logger on assignment,
# which needs a generated __setattr__ that every assignment to any field goes through; the
# read path (pop, read-ahead) assigns several per call. It was 7% of nsqd's samples while
# consuming from disk (py-spy, python -m bench.writer_reader); nothing reassigns those two.
@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
class DiskQueue:
    """One named queue in ``data_path``.

    Construction loads the metadata (blocking, small: a missing file means a fresh queue, and
    only after a crash are the unsynced records at the end of the write file counted). Then:
    ``run()`` in a nursery for reading and syncing; ``put()`` from any task (it writes by itself,
    so it also works while ``run()`` is not running, e.g. at shutdown); ``wait_readable()`` and
    ``pop()`` to consume (and, with ``explicit_commit``, ``pop_with_positions()`` and
    ``commit()``); ``close()`` at the end. Sizes are payload sizes, without the 4-byte length:
    nsqd uses min 26 and max max-msg-size + 26.
    """

    name: str
    data_path: Path = attrs.field(converter=Path)
    max_bytes_per_file: int = attrs.field(default=100 * 1024 * 1024, kw_only=True)
    min_msg_size: int = attrs.field(default=26, kw_only=True)
    max_msg_size: int = attrs.field(default=1048576 + 26, kw_only=True)
    sync_every: int = attrs.field(default=2500, kw_only=True)
    sync_timeout: float = attrs.field(default=2.0, kw_only=True)
    logger: logging.Logger = attrs.field(default=None, kw_only=True, converter=_default_logger)
    explicit_commit: bool = attrs.field(default=False, kw_only=True)

    _files: DiskFiles = attrs.field(init=False)
    _depth: int = attrs.field(init=False, default=0)  # records from _read to _write
    _read: Pos = attrs.field(init=False, default=(0, 0))
    _ahead: Pos = attrs.field(init=False, default=(0, 0))
    _write: Pos = attrs.field(init=False, default=(0, 0))
    _buffer: deque[tuple[bytes, Pos]] = attrs.field(init=False, factory=deque)
    _buffered_bytes: int = attrs.field(init=False, default=0)
    # explicit_commit: (start, end) of each popped record not committed yet, oldest first
    _popped: deque[tuple[Pos, Pos]] = attrs.field(init=False, factory=deque)
    _pending: deque[PutRequest] = attrs.field(init=False, factory=deque)
    _ops_since_sync: int = attrs.field(init=False, default=0)
    _need_sync: bool = attrs.field(init=False, default=False)
    _retry_sync: bool = attrs.field(init=False, default=False)
    _left: list[Gone] = attrs.field(init=False, factory=list)  # read past, not committed past
    _finished_files: list[Gone] = attrs.field(init=False, factory=list)  # for the next sync
    _damaged: tuple[int, str] | None = attrs.field(init=False, default=None)
    _healthy: bool = attrs.field(init=False, default=True)
    #: failed writes and syncs since start (for /metrics; counted on failure only)
    write_errors: int = attrs.field(init=False, default=0)
    sync_errors: int = attrs.field(init=False, default=0)
    _closed: bool = attrs.field(init=False, default=False)
    _running: bool = attrs.field(init=False, default=False)
    _io_lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    # Held through each file operation (in a worker thread or inline): what ``detach``,
    # on the Trio thread, waits for.
    _files_busy: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _wake: trio.Event = attrs.field(init=False, factory=trio.Event)
    _readable: trio.Event = attrs.field(init=False, factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.min_msg_size <= self.max_msg_size <= 0x7FFFFFFF:
            raise ValueError("need 0 <= min_msg_size <= max_msg_size < 2**31")
        if self.max_bytes_per_file <= 0 or self.sync_every <= 0 or self.sync_timeout <= 0:
            raise ValueError("max_bytes_per_file, sync_every and sync_timeout must be positive")
        self._files = DiskFiles(self.name, self.data_path, self.max_bytes_per_file,
                                self.min_msg_size, self.max_msg_size, self.logger)
        self._load()

    # ---- public API -------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        """False after a failed write or sync, True again after a successful write."""
        return self._healthy

    def depth(self) -> int:
        """Records not popped yet."""
        return self._depth

    def uncommitted(self) -> int:
        """Records popped but not committed (always 0 without ``explicit_commit``)."""
        return len(self._popped)

    def ready(self) -> int:
        """Records already read ahead: what pop() can return now without waiting."""
        return 0 if self._closed else len(self._buffer)

    async def put(self, records: list[bytes]) -> None:
        """Append ``records``; see the module docstring for what "written" means.

        Raises:
            DiskQueueError: a size outside [min_msg_size, max_msg_size] (nothing written), an
                I/O error (records of this call before the failure may be stored), or closed.
        """
        if self._closed:
            raise DiskQueueClosed
        lo, hi = self.min_msg_size, self.max_msg_size
        for record in records:
            if not lo <= len(record) <= hi:
                raise DiskQueueError(
                    f"invalid message write size ({len(record)}) minMsgSize={lo} maxMsgSize={hi}"
                )
        if not records:
            await trio.lowlevel.checkpoint()
            return
        request = PutRequest(list(records), sum(map(len, records)) + 4 * len(records))
        self._pending.append(request)
        try:
            async with self._io_lock:
                while not request.done:
                    await self._write_pending()
        finally:
            if not request.taken:  # cancelled while waiting for the lock: never written
                self._pending.remove(request)
        if request.closed:
            raise DiskQueueClosed
        if request.error is not None:
            raise DiskQueueError(request.error)

    def peek(self, max_records: int) -> list[bytes]:
        """Up to ``max_records`` of the read-ahead payloads, oldest first, left in place."""
        if self._closed:
            return []
        return [payload for payload, _ in itertools.islice(self._buffer, max_records)]

    def pop(self, max_records: int) -> list[bytes]:
        """Take up to ``max_records`` read-ahead payloads, oldest first; never blocks."""
        return [payload for payload, _ in self.pop_with_positions(max_records)]

    def pop_with_positions(self, max_records: int) -> list[tuple[bytes, Pos]]:
        """As pop(), each payload with the position just after its record (for commit())."""
        buffer = self._buffer
        n = min(max_records, len(buffer))
        if n <= 0 or self._closed:
            return []
        out: list[tuple[bytes, Pos]] = []
        nbytes = 4 * n
        for _ in range(n):
            item = buffer.popleft()
            out.append(item)
            nbytes += len(item[0])
        self._buffered_bytes -= nbytes
        self._depth -= n
        if self.explicit_commit:
            start = self._read
            for _, end in out:
                self._popped.append((start, end))
                start = end
        else:
            self._ops_since_sync += n
            if self._ops_since_sync >= self.sync_every:
                self._need_sync = True
        self._advance_read(out[-1][1])
        if not buffer:
            self._readable = trio.Event()
        if self._need_sync or self._finished_files or (self._ahead < self._write and self._buffer_low()):
            self._wake.set()
        return out

    def commit(self, pos: Pos) -> None:
        """Everything up to ``pos`` (a position from pop_with_positions()) is consumed for good.

        Never blocks: the new committed position is persisted by the sync policy (sync_every
        counts committed records as ops; the sync_timeout tick; close()), by run(). A ``pos``
        at or behind the committed position is ignored, so is any commit after close(); without
        ``explicit_commit`` the committed position is the read position and this does nothing.

        Raises:
            ValueError: ``pos`` is beyond the read position (it was not popped yet).
        """
        if self._closed:
            return
        if pos > self._read:
            raise ValueError(f"commit position {pos} is beyond the read position {self._read}")
        popped = self._popped
        n = 0
        while popped and popped[0][1] <= pos:
            popped.popleft()
            n += 1
        if not n:
            return
        self._ops_since_sync += n
        if self._ops_since_sync >= self.sync_every:
            self._need_sync = True
        self._release()
        if self._need_sync or self._finished_files:
            self._wake.set()

    async def wait_readable(self) -> None:
        """Return when pop() would return a record.

        Raises:
            DiskQueueClosed: the queue is closed, or ``detach`` closed it during the wait
                (nothing will be read any more). A waiter left at close() keeps waiting
                (nsqd is stopping: its task is cancelled).
        """
        if self._closed:
            raise DiskQueueClosed
        if self._buffer:
            await trio.lowlevel.checkpoint()
        while not self._buffer:
            await self._readable.wait()
            if self._closed:
                raise DiskQueueClosed

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The background task: read-ahead, periodic sync, file clean-up. Returns after close()."""
        if self._running:
            raise RuntimeError(f"DiskQueue({self.name}).run() is already running")
        self._running = True
        try:
            task_status.started()
            tick = trio.current_time() + self.sync_timeout
            while not self._closed:
                if trio.current_time() >= tick:
                    tick = trio.current_time() + self.sync_timeout
                    if self._ops_since_sync or self._retry_sync:
                        self._need_sync = True
                async with self._io_lock:
                    more = not self._closed and await self._housekeeping()
                if not more:
                    with trio.move_on_at(tick):
                        await self._wake.wait()
                    self._wake = trio.Event()
        finally:
            self._running = False
            if not self._closed:
                # Cancelled: leave a clean restart point, as close() would.
                with trio.CancelScope(shield=True):
                    async with self._io_lock:
                        await self._sync()

    async def empty(self) -> None:
        """Drop every record: delete the data files and the metadata (go-diskqueue Empty)."""
        if self._closed:
            raise DiskQueueClosed
        self.logger.info("DISKQUEUE(%s): emptying", self.name)
        async with self._io_lock:
            err = await self._remove_files()
            self._reset((self._write[0] + 1, 0))
        if err is not None:
            raise DiskQueueError(err)

    async def close(self) -> None:
        """Write what is queued, fsync, persist the metadata. Later calls raise "exiting"."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self.logger.info("DISKQUEUE(%s): closing", self.name)
        with trio.CancelScope(shield=True):
            async with self._io_lock:
                while self._pending:
                    await self._write_pending()
                err = await self._in_thread(self._files.close, *self._meta(), self._take_finished())
        self._buffer.clear()
        self._readable = trio.Event()
        if err is not None:
            raise DiskQueueError(err)

    def detach(self) -> None:
        """Its channel is deleted: the queue takes no more records, and its files are
        renamed out of the way at once (``deletion.aside_name``), so that a queue made again
        with the same name starts with none of them while ``delete`` removes these (a start
        removes what a crash left so). A file operation under way in a worker thread (one
        write, read or sync at most) is waited for, blocking, so that nothing is written
        under the old name once the files have moved: records being written go with them,
        and records queued to be written after go into the moved files too. Whoever waits
        for records (``wait_readable``: a peek, a respawn) gets ``DiskQueueClosed`` at once:
        the read-ahead stops with the queue, so nothing would ever end that wait."""
        self._closed = True
        self._wake.set()
        self._readable.set()
        name = aside_name(self.name)
        with self._files_busy:
            self._files.rename(name, self._file_range())
            self._files.close_files()
        self.name = name
        self.logger.info("DISKQUEUE(%s): moved aside to be deleted", name)

    async def delete(self) -> None:
        """Close without syncing and remove the data files and metadata (not ``.bad`` files;
        ``detach`` first, when the name may be used again at once)."""
        self._closed = True
        self._wake.set()
        self.logger.info("DISKQUEUE(%s): deleting", self.name)
        with trio.CancelScope(shield=True):
            async with self._io_lock:
                for request in self._pending:
                    request.taken, request.done, request.closed = True, True, True
                self._pending.clear()
                err = await self._remove_files()
                self._reset(self._write)
        if err is not None:
            raise DiskQueueError(err)

    # ---- state changes (event-loop thread) ------------------------------------------------------

    def _load(self) -> None:
        loaded = self._files.load()
        if loaded is not None:
            self._depth, self._read, self._write = loaded.depth, loaded.read, loaded.write
            self._need_sync = loaded.repaired
        self._ahead = self._read  # and, with nothing popped, the committed position
        self._check_tail()

    def _committed(self) -> Pos:
        # The start of the oldest uncommitted record, or the read position when there is none.
        # Between the two there are only records popped and not committed, so when the last of
        # those is committed the position jumps to _read: over the end of a fully-read file,
        # and over a damaged file put aside with none of its records uncommitted.
        return self._popped[0][0] if self._popped else self._read

    def _meta(self) -> tuple[int, Pos, Pos]:
        """What the metadata file gets: depth, read (= committed) and write positions."""
        return self._depth + len(self._popped), self._committed(), self._write

    async def _remove_files(self) -> str | None:
        """Remove every data file and the metadata (empty/delete; lock held). Damaged files
        still waiting for the committed position to pass them are put aside instead."""
        damaged = [num for num, bad in self._left + self._finished_files if bad]
        return await self._in_thread(self._files.remove, self._file_range(), damaged)

    def _file_range(self) -> range:
        """The numbers of the data files the queue may still have."""
        gone = self._left + self._finished_files
        first = min([self._committed()[0], *(num for num, _ in gone)])
        return range(first, self._write[0] + 1)

    def _buffer_low(self) -> bool:
        return self._buffered_bytes < _READ_AHEAD_BYTES // 2 and len(self._buffer) < _READ_AHEAD_RECORDS // 2

    def _advance_read(self, new: Pos, *, delete: bool = True) -> None:
        old_file = self._read[0]
        self._read = new
        if new[0] != old_file:
            if delete:
                self._left.extend((num, False) for num in range(old_file, new[0]))
            self._release()
            self._need_sync = True
        self._check_tail()

    def _release(self) -> None:
        """Hand the files the committed position is past to the next sync, which removes them."""
        left = self._left
        if not left:
            return
        committed_file = self._committed()[0]
        n = 0
        while n < len(left) and left[n][0] < committed_file:
            n += 1
        if n:
            self._finished_files += left[:n]
            del left[:n]

    def _check_tail(self) -> None:
        # At the writer's position every record has been popped, whatever depth says. Depth goes
        # wrong when a corrupt file is put aside with unread records in it.
        if self._read >= self._write and self._depth != 0:
            what = "metadata corruption" if self._depth < 0 else "data loss"
            self.logger.warning("DISKQUEUE(%s) depth %d at tail (%s), resetting 0",
                                self.name, self._depth, what)
            self._depth = 0
            self._need_sync = True

    def _reset(self, pos: Pos) -> None:
        self._read = self._ahead = self._write = pos
        self._depth = self._buffered_bytes = self._ops_since_sync = 0
        self._buffer.clear()
        self._popped.clear()
        self._readable = trio.Event()
        self._left.clear()
        self._finished_files.clear()
        self._damaged = None
        self._need_sync = self._retry_sync = False

    def _take_finished(self) -> list[Gone]:
        finished, self._finished_files = self._finished_files, []
        return finished

    async def _in_thread(self, fn: Callable[..., T], *args: object) -> T:
        # Shielded so that a started file operation is always followed by its bookkeeping.
        with trio.CancelScope(shield=True):
            result = await trio.to_thread.run_sync(holding, self._files_busy, fn, *args)
        return result

    def _write_blocking(
        self, records: list[bytes], start: Pos, depth: int, read: Pos, sync: bool
    ) -> WriteOutcome:
        return self._files.write(records, start, depth, read, sync)

    async def _write_pending(self) -> None:
        """Write queued put() records (lock held); the group commit."""
        batch, records, nbytes = take_batch(self._pending, _WRITE_BATCH_BYTES)
        ops_before = self._ops_since_sync
        sync = ops_before + len(records) >= self.sync_every
        depth, committed, write = self._meta()
        try:
            file_num, pos = write
            inline = (not sync and nbytes <= _INLINE_WRITE_BYTES
                      and pos + nbytes <= self.max_bytes_per_file  # no roll, so no fsync
                      and self._files.can_append_inline(file_num))
            if inline:
                # A write with no fsync due is a copy into the page cache: done here, it costs
                # a few microseconds; a round trip to a worker thread costs far more, and on a
                # stop-and-wait publisher that round trip was most of the disk path's latency.
                with self._files_busy:
                    out = self._write_blocking(records, write, depth, committed, sync)
                await trio.lowlevel.checkpoint()
            else:
                out = await self._in_thread(self._write_blocking, records, write, depth, committed, sync)
        except BaseException:
            for request in batch:  # a bug in the thread; do not leave the callers waiting
                request.done, request.error = True, "internal error"
            raise
        self._write = out.write
        self._depth += out.written
        if out.synced:
            self._ops_since_sync -= ops_before  # pops/commits made meanwhile are not persisted
        else:
            self._ops_since_sync += out.written
        settle(batch, out)
        if out.error is None:
            self._healthy = True
        else:
            self._healthy = False
            self.write_errors += 1
            self.logger.error("DISKQUEUE(%s) failed to write - %s", self.name, out.error)
        if out.written:
            self._wake.set()

    async def _housekeeping(self) -> bool:
        """One round of run()'s work (lock held). True if there is more to do right away."""
        if self._need_sync or self._finished_files:
            await self._sync()
        if self._damaged is not None:
            if self._buffer:
                return False  # deliver the good records before the damage first
            await self._put_aside_damaged()
            return True
        if self._ahead < self._write and self._buffer_low():
            return await self._read_ahead()
        return False

    async def _sync(self) -> None:
        ops = self._ops_since_sync
        finished = self._take_finished()
        self._need_sync = self._retry_sync = False
        err = await self._in_thread(self._files.sync, *self._meta(), finished)
        if err is None:
            self._ops_since_sync -= ops
            return
        self.logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, err)
        self._healthy = False
        self.sync_errors += 1
        self._finished_files[:0] = finished  # keep them until the metadata is past them
        self._retry_sync = True  # at the next tick, not in a tight loop

    async def _read_ahead(self) -> bool:
        file_num, pos = self._ahead
        end = self._write[1] if file_num == self._write[0] else None
        out = await self._in_thread(self._files.read, file_num, pos, end,
                                    _READ_AHEAD_BYTES - self._buffered_bytes,
                                    _READ_AHEAD_RECORDS - len(self._buffer))
        if out.records:
            if not self._buffer:
                self._readable.set()
            for payload, after in out.records:
                self._buffer.append((payload, (file_num, after)))
                self._buffered_bytes += 4 + len(payload)
        self._ahead = (file_num, out.pos)
        if out.error is not None:
            self._found_damage(file_num, out.pos, out.error)
        elif out.finished:
            self._ahead = (file_num + 1, 0)
            if self._buffer:  # popping the last buffered record finishes the file
                payload, _ = self._buffer[-1]
                self._buffer[-1] = (payload, self._ahead)
            else:
                self._advance_read(self._ahead)
        return bool(out.records) or out.finished or out.error is not None

    def _found_damage(self, file_num: int, pos: int, reason: str) -> None:
        self.logger.warning("DISKQUEUE(%s) corrupt data at %d of %s - %s",
                            self.name, pos, self._files.data_file(file_num), reason)
        self._damaged = (file_num, reason)
        if file_num == self._write[0]:
            # The file will be put aside, so nothing more may be written into it. go-diskqueue
            # moves the writer only when it puts the file aside; moving it now also saves the
            # writes made while the good records before the damage are being consumed.
            self._write = (file_num + 1, 0)
            self._need_sync = True

    async def _put_aside_damaged(self) -> None:
        # Every good record before the damage has been popped (the buffer is empty). Reading
        # goes on in the next file. The damaged file is renamed to .bad now unless some of its
        # records are popped but not committed (explicit_commit): those must stay readable, as
        # a crash before their commit delivers them again from the committed position. Then
        # the file waits in _left, like a fully-read one, and _release() hands it to a sync
        # (which renames it instead of deleting it) once the committed position is past it;
        # that happens when its last uncommitted record is committed, as _committed() jumps
        # to the start of the next uncommitted record or to _read. A crash before then reads
        # the file again from the committed position, and meets the damage again.
        assert self._damaged is not None and self._read == self._ahead
        file_num, _ = self._damaged
        if self._popped and self._popped[-1][0][0] == file_num:
            self.logger.warning("DISKQUEUE(%s) jump to next file; %s is put aside once its "
                                "records are committed", self.name, self._files.data_file(file_num))
            self._left.append((file_num, True))
            next_num = file_num + 1
        else:
            next_num = await self._in_thread(self._files.quarantine, file_num, self._write[0])
        self._damaged = None
        self._ahead = (next_num, 0)
        self._advance_read(self._ahead, delete=False)
        self._need_sync = True
