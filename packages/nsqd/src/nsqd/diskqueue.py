"""A file-backed FIFO of byte records, readable by (and able to read) go-diskqueue v1.1.0 data.

Files in ``data_path``::

    <name>.diskqueue.000000.dat      records, one after another; the next file number starts
    <name>.diskqueue.000001.dat      when a record would take a file past max_bytes_per_file
    <name>.diskqueue.meta.dat        b"<depth>\\n<readFileNum>,<readPos>\\n<writeFileNum>,<writePos>\\n"
    <name>.diskqueue.000000.dat.bad  a file that could not be read, left for an operator

Each record::

    +--------+--------+--------+--------+==================+
    |   payload length, int32 big-endian | payload ...      |
    +--------+--------+--------+--------+==================+

Positions are ``(file_num, offset)`` tuples, so "is the reader behind the writer" is a tuple
comparison. Three of them move:

* ``_write``: where the next record goes.
* ``_ahead``: how far the read-ahead has got; the records between ``_read`` and ``_ahead`` sit
  in memory (``_buffer``, bounded to about 1 MiB / a few thousand records).
* ``_read``: everything before it has been popped. This is the position the metadata keeps.

Concurrency. Every file operation runs in a worker thread, and one ``trio.Lock`` serialises
them, so the file descriptors only ever see one thread at a time. ``put()`` queues its records
and then takes the lock; whoever gets it writes *everything* queued in one thread call (group
commit), and the callers behind it find their records already written. ``run()`` does the rest:
read-ahead, the periodic sync, deleting fully-read files and putting aside corrupt ones. ``pop()``
only touches memory. Thread calls are shielded from cancellation: once started they finish and
their result is applied before the cancellation is delivered, so memory always matches the files.

Durability. ``put()`` returns after the OS accepted the bytes (a killed process loses nothing).
The metadata always names the current write file: it is persisted before the first byte goes
into a new file. So after a crash the only stale numbers are the write offset, depth and read
offset, and loading repairs those as go-diskqueue does (writing resumes in a fresh file, the
reader salvages the old one, records may be delivered twice, never lost).

Errors: a failed operation raises ``DiskQueueError`` (bad arguments to the constructor raise
``ValueError``). Read-side problems are logged and handled, never raised.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import re
import struct
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

import attrs
import trio

_LENGTH = struct.Struct(">i")
_READ_AHEAD_BYTES = 1 << 20  # refill when under half of these
_READ_AHEAD_RECORDS = 4096
_WRITE_BATCH_BYTES = 8 << 20  # per thread call; a single larger put() still goes in one call
_INLINE_WRITE_BYTES = 256 << 10  # a write this small, with no fsync due, skips the thread
_META = re.compile(rb"(-?\d+)\n(-?\d+),(-?\d+)\n(-?\d+),(-?\d+)\n?\Z")

Pos = tuple[int, int]
T = TypeVar("T")


class DiskQueueError(Exception):
    """A put/empty/close/delete that failed (I/O error, bad size, queue closed)."""


class _Corrupt(Exception):
    """Raised in the reader for bytes that cannot be a record."""


def _default_logger(logger: logging.Logger | None) -> logging.Logger:
    return logger if logger is not None else logging.getLogger(__name__)


@attrs.define(eq=False)
class _PutRequest:
    records: list[bytes]
    nbytes: int
    taken: bool = False  # handed to a writer; from then on only the writer completes it
    done: bool = False
    error: str | None = None


@attrs.frozen
class _WriteOutcome:
    write: Pos
    written: int  # records now in the files
    acked: int  # of those, how many can be reported as stored (0 if the promised fsync failed)
    synced: bool
    error: str | None


@attrs.frozen
class _ReadOutcome:
    records: list[tuple[bytes, int]]  # payload, offset just past it
    pos: int
    finished: bool  # a complete (older) file was read to its end
    error: str | None


@attrs.define(eq=False)
class DiskQueue:
    """One named queue in ``data_path``.

    Construction loads the metadata (blocking, small: a missing file means a fresh queue, and
    only after a crash are the unsynced records at the end of the write file counted). Then:
    ``run()`` in a nursery for reading and syncing; ``put()`` from any task (it writes by itself,
    so it also works while ``run()`` is not running, e.g. at shutdown); ``wait_readable()`` and
    ``pop()`` to consume; ``close()`` at the end. Sizes are payload sizes, without the 4-byte
    length: nsqd uses min 26 and max max-msg-size + 26.
    """

    name: str
    data_path: Path = attrs.field(converter=Path)
    max_bytes_per_file: int = attrs.field(default=100 * 1024 * 1024, kw_only=True)
    min_msg_size: int = attrs.field(default=26, kw_only=True)
    max_msg_size: int = attrs.field(default=1048576 + 26, kw_only=True)
    sync_every: int = attrs.field(default=2500, kw_only=True)
    sync_timeout: float = attrs.field(default=2.0, kw_only=True)
    logger: logging.Logger = attrs.field(default=None, kw_only=True, converter=_default_logger)

    _depth: int = attrs.field(init=False, default=0)
    _read: Pos = attrs.field(init=False, default=(0, 0))
    _ahead: Pos = attrs.field(init=False, default=(0, 0))
    _write: Pos = attrs.field(init=False, default=(0, 0))
    _buffer: deque[tuple[bytes, Pos]] = attrs.field(init=False, factory=deque)
    _buffered_bytes: int = attrs.field(init=False, default=0)
    _pending: deque[_PutRequest] = attrs.field(init=False, factory=deque)
    _ops_since_sync: int = attrs.field(init=False, default=0)
    _need_sync: bool = attrs.field(init=False, default=False)
    _retry_sync: bool = attrs.field(init=False, default=False)
    _finished_files: list[int] = attrs.field(init=False, factory=list)
    _damaged: tuple[int, str] | None = attrs.field(init=False, default=None)
    _healthy: bool = attrs.field(init=False, default=True)
    _closed: bool = attrs.field(init=False, default=False)
    _running: bool = attrs.field(init=False, default=False)
    _io_lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _wake: trio.Event = attrs.field(init=False, factory=trio.Event)
    _readable: trio.Event = attrs.field(init=False, factory=trio.Event)
    # Touched only by the holder of _io_lock (mostly from worker threads):
    _meta_write_file: int | None = attrs.field(init=False, default=None)
    _write_fd: int | None = attrs.field(init=False, default=None)
    _write_fd_num: int = attrs.field(init=False, default=-1)
    _read_file: IO[bytes] | None = attrs.field(init=False, default=None)
    _read_file_num: int = attrs.field(init=False, default=-1)

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.min_msg_size <= self.max_msg_size <= 0x7FFFFFFF:
            raise ValueError("need 0 <= min_msg_size <= max_msg_size < 2**31")
        if self.max_bytes_per_file <= 0 or self.sync_every <= 0 or self.sync_timeout <= 0:
            raise ValueError("max_bytes_per_file, sync_every and sync_timeout must be positive")
        self._load()

    # ---- public API -------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        """False after a failed write or sync, True again after a successful write."""
        return self._healthy

    def depth(self) -> int:
        return self._depth

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
            raise DiskQueueError("exiting")
        lo, hi = self.min_msg_size, self.max_msg_size
        for record in records:
            if not lo <= len(record) <= hi:
                raise DiskQueueError(
                    f"invalid message write size ({len(record)}) minMsgSize={lo} maxMsgSize={hi}"
                )
        if not records:
            await trio.lowlevel.checkpoint()
            return
        request = _PutRequest(list(records), sum(map(len, records)) + 4 * len(records))
        self._pending.append(request)
        try:
            async with self._io_lock:
                while not request.done:
                    await self._write_pending()
        finally:
            if not request.taken:  # cancelled while waiting for the lock: never written
                self._pending.remove(request)
        if request.error is not None:
            raise DiskQueueError(request.error)

    def pop(self, max_records: int) -> list[bytes]:
        """Take up to ``max_records`` read-ahead payloads, oldest first; never blocks."""
        n = min(max_records, len(self._buffer))
        if n <= 0 or self._closed:
            return []
        out: list[bytes] = []
        nbytes = 0
        after = self._read
        for _ in range(n):
            payload, after = self._buffer.popleft()
            out.append(payload)
            nbytes += 4 + len(payload)
        self._buffered_bytes -= nbytes
        self._depth -= n
        self._ops_since_sync += n
        if self._ops_since_sync >= self.sync_every:
            self._need_sync = True
        self._advance_read(after)
        if not self._buffer:
            self._readable = trio.Event()
        if self._need_sync or self._finished_files or (self._ahead < self._write and self._buffer_low()):
            self._wake.set()
        return out

    async def wait_readable(self) -> None:
        """Return when pop() would return a record (a waiter left at close() keeps waiting)."""
        if self._closed:
            raise DiskQueueError("exiting")
        if self._buffer:
            await trio.lowlevel.checkpoint()
        while not self._buffer:
            await self._readable.wait()

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
            raise DiskQueueError("exiting")
        self.logger.info("DISKQUEUE(%s): emptying", self.name)
        async with self._io_lock:
            first = min([self._read[0], *self._finished_files])
            files = range(first, self._write[0] + 1)
            err = await self._in_thread(self._remove_blocking, files)
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
                err = await self._in_thread(
                    self._close_blocking, self._depth, self._read, self._write, self._take_finished()
                )
        self._buffer.clear()
        self._readable = trio.Event()
        if err is not None:
            raise DiskQueueError(err)

    async def delete(self) -> None:
        """Close without syncing and remove the data files and metadata (not ``.bad`` files)."""
        self._closed = True
        self._wake.set()
        self.logger.info("DISKQUEUE(%s): deleting", self.name)
        with trio.CancelScope(shield=True):
            async with self._io_lock:
                for request in self._pending:
                    request.taken, request.done, request.error = True, True, "exiting"
                self._pending.clear()
                first = min([self._read[0], *self._finished_files])
                files = range(first, self._write[0] + 1)
                err = await self._in_thread(self._remove_blocking, files)
                self._reset(self._write)
        if err is not None:
            raise DiskQueueError(err)

    # ---- state changes (event-loop thread) ------------------------------------------------------

    def _load(self) -> None:
        path = self._meta_path()
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return  # a fresh queue
        except OSError as exc:
            self.logger.error("DISKQUEUE(%s) failed to read metadata - %s", self.name, exc)
            return
        match = _META.match(text)
        if match is None:
            self.logger.error("DISKQUEUE(%s) failed to parse metadata %s", self.name, path)
            return
        depth, rnum, rpos, wnum, wpos = map(int, match.groups())
        self._depth, self._read, self._write = depth, (rnum, rpos), (wnum, wpos)
        self._meta_write_file = wnum
        if self._read > self._write:
            self.logger.error(
                "DISKQUEUE(%s) read position %s beyond write position %s, corruption, "
                "skipping to a new file and resetting 0",
                self.name,
                self._read,
                self._write,
            )
            self._read = self._write = (max(rnum, wnum) + 1, 0)
            self._depth = 0
            self._need_sync = True
        else:
            self._check_write_file()
        self._ahead = self._read
        self._check_tail()

    def _check_write_file(self) -> None:
        # After a crash the write file can hold more than the metadata says (it was not synced
        # since) or, after an OS crash, less. Either way that file is left to the reader, and
        # writing resumes in a new one. go-diskqueue handles only the first case; it also
        # leaves depth stale there, while we count the extra records so depth stays exact.
        wnum, wpos = self._write
        path = self._data_file(wnum)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size == wpos:
            return
        if wpos < size:
            extra = _count_records(path, wpos, size, self.min_msg_size, self.max_msg_size)
            self._depth += extra
            self.logger.warning(
                "DISKQUEUE(%s) %s metadata writePos %d < file size of %d, skipping to new file "
                "(%d more records found)",
                self.name,
                path,
                wpos,
                size,
                extra,
            )
        else:
            self.logger.warning(
                "DISKQUEUE(%s) %s metadata writePos %d > file size of %d, skipping to new file",
                self.name,
                path,
                wpos,
                size,
            )
        self._write = (wnum + 1, 0)
        self._need_sync = True

    def _buffer_low(self) -> bool:
        return self._buffered_bytes < _READ_AHEAD_BYTES // 2 and len(self._buffer) < _READ_AHEAD_RECORDS // 2

    def _advance_read(self, new: Pos, *, delete: bool = True) -> None:
        old_file = self._read[0]
        self._read = new
        if new[0] != old_file:
            if delete:
                self._finished_files.extend(range(old_file, new[0]))
            self._need_sync = True
        self._check_tail()

    def _check_tail(self) -> None:
        # At the writer's position every record has been popped, whatever depth says. Depth goes
        # wrong when a corrupt file is put aside with unread records in it.
        if self._read >= self._write and self._depth != 0:
            what = "metadata corruption" if self._depth < 0 else "data loss"
            self.logger.warning(
                "DISKQUEUE(%s) depth %d at tail (%s), resetting 0", self.name, self._depth, what
            )
            self._depth = 0
            self._need_sync = True

    def _reset(self, pos: Pos) -> None:
        self._read = self._ahead = self._write = pos
        self._depth = self._buffered_bytes = self._ops_since_sync = 0
        self._buffer.clear()
        self._readable = trio.Event()
        self._finished_files.clear()
        self._damaged = None
        self._need_sync = self._retry_sync = False

    def _take_finished(self) -> list[int]:
        finished, self._finished_files = self._finished_files, []
        return finished

    async def _in_thread(self, fn: Callable[..., T], *args: object) -> T:
        # Shielded so that a started file operation is always followed by its bookkeeping.
        with trio.CancelScope(shield=True):
            return await trio.to_thread.run_sync(fn, *args)

    async def _write_pending(self) -> None:
        """Write queued put() records (lock held); the group commit."""
        batch: list[_PutRequest] = []
        nbytes = 0
        while self._pending and (not batch or nbytes + self._pending[0].nbytes <= _WRITE_BATCH_BYTES):
            request = self._pending.popleft()
            request.taken = True
            batch.append(request)
            nbytes += request.nbytes
        records = batch[0].records if len(batch) == 1 else [r for q in batch for r in q.records]
        ops_before = self._ops_since_sync
        sync = ops_before + len(records) >= self.sync_every
        try:
            file_num, pos = self._write
            inline = (not sync and nbytes <= _INLINE_WRITE_BYTES
                      and pos + nbytes <= self.max_bytes_per_file  # no roll, so no fsync
                      and self._meta_write_file == file_num and self._write_fd is not None)
            if inline:
                # A write with no fsync due is a copy into the page cache: done here, it costs
                # a few microseconds; a round trip to a worker thread costs far more, and on a
                # stop-and-wait publisher that round trip was most of the disk path's latency.
                out = self._write_blocking(records, self._write, self._depth, self._read, sync)
                await trio.lowlevel.checkpoint()
            else:
                out = await self._in_thread(
                    self._write_blocking, records, self._write, self._depth, self._read, sync
                )
        except BaseException:
            for request in batch:  # a bug in the thread; do not leave the callers waiting
                request.done, request.error = True, "internal error"
            raise
        self._write = out.write
        self._depth += out.written
        if out.synced:
            self._ops_since_sync -= ops_before  # pops made meanwhile are not in the metadata
        else:
            self._ops_since_sync += out.written
        acked = out.acked
        for request in batch:
            request.done = True
            if acked >= len(request.records):
                acked -= len(request.records)
            else:
                acked = 0
                request.error = out.error
        if out.error is None:
            self._healthy = True
        else:
            self._healthy = False
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
        err = await self._in_thread(self._sync_blocking, self._depth, self._read, self._write, finished)
        if err is None:
            self._ops_since_sync -= ops
            return
        self.logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, err)
        self._healthy = False
        self._finished_files[:0] = finished  # keep them until the metadata is past them
        self._retry_sync = True  # at the next tick, not in a tight loop

    async def _read_ahead(self) -> bool:
        file_num, pos = self._ahead
        end = self._write[1] if file_num == self._write[0] else None
        out = await self._in_thread(
            self._read_blocking,
            file_num,
            pos,
            end,
            _READ_AHEAD_BYTES - self._buffered_bytes,
            _READ_AHEAD_RECORDS - len(self._buffer),
        )
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
        self.logger.warning(
            "DISKQUEUE(%s) corrupt data at %d of %s - %s",
            self.name,
            pos,
            self._data_file(file_num),
            reason,
        )
        self._damaged = (file_num, reason)
        if file_num == self._write[0]:
            # The file will be put aside, so nothing more may be written into it. go-diskqueue
            # moves the writer only when it puts the file aside; moving it now also saves the
            # writes made while the good records before the damage are being consumed.
            self._write = (file_num + 1, 0)
            self._need_sync = True

    async def _put_aside_damaged(self) -> None:
        assert self._damaged is not None and self._read == self._ahead
        file_num, _ = self._damaged
        next_num = await self._in_thread(self._quarantine_blocking, file_num, self._write[0])
        self._damaged = None
        self._ahead = (next_num, 0)
        self._advance_read(self._ahead, delete=False)
        self._need_sync = True

    # ---- file work (worker threads, _io_lock held) --------------------------------------------

    def _data_file(self, num: int) -> Path:
        return self.data_path / f"{self.name}.diskqueue.{num:06d}.dat"

    def _meta_path(self) -> Path:
        return self.data_path / f"{self.name}.diskqueue.meta.dat"

    def _write_blocking(
        self, records: list[bytes], start: Pos, depth: int, read: Pos, sync: bool
    ) -> _WriteOutcome:
        file_num, pos = start
        limit = self.max_bytes_per_file
        done = 0
        syncing = False
        try:
            while done < len(records):
                if pos > 0 and pos + 4 + len(records[done]) > limit:
                    self._fsync_write_fd(close=True)  # go-diskqueue syncs on every roll
                    file_num, pos = file_num + 1, 0
                if self._meta_write_file != file_num:
                    self._persist(depth + done, read, (file_num, pos))
                fd = self._open_write_fd(file_num)
                parts: list[bytes] = []
                end, stop = pos, done
                while stop < len(records):
                    size = len(records[stop])
                    if end > 0 and end + 4 + size > limit:
                        break
                    parts += (_LENGTH.pack(size), records[stop])
                    end += 4 + size
                    stop += 1
                self._append(fd, b"".join(parts), pos)
                done, pos = stop, end
            if sync:
                syncing = True
                self._fsync_write_fd()
                self._persist(depth + done, read, (file_num, pos))
        except OSError as exc:
            return _WriteOutcome((file_num, pos), done, 0 if syncing else done, False, str(exc))
        return _WriteOutcome((file_num, pos), done, done, sync, None)

    def _open_write_fd(self, file_num: int) -> int:
        if self._write_fd is not None and self._write_fd_num == file_num:
            return self._write_fd
        self._drop_write_fd()
        path = self._data_file(file_num)
        self._write_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._write_fd_num = file_num
        self.logger.info("DISKQUEUE(%s): opened %s for writing", self.name, path)
        return self._write_fd

    def _append(self, fd: int, data: bytes, pos: int) -> None:
        view = memoryview(data)
        done = 0
        try:
            while done < len(view):
                n = os.pwrite(fd, view[done:], pos + done)
                if n <= 0:
                    raise OSError(errno.EIO, "write made no progress")
                done += n
        except OSError:
            # Cut off any partial record so the file ends on a record boundary again.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, pos)
            self._drop_write_fd()
            raise

    def _fsync_write_fd(self, *, close: bool = False) -> None:
        if self._write_fd is None:
            return
        try:
            os.fsync(self._write_fd)
        except OSError:
            self._drop_write_fd()  # as go-diskqueue: reopen (and seek) on the next write
            raise
        if close:
            self._drop_write_fd()

    def _drop_write_fd(self) -> None:
        if self._write_fd is not None:
            fd, self._write_fd, self._write_fd_num = self._write_fd, None, -1
            with contextlib.suppress(OSError):
                os.close(fd)

    def _persist(self, depth: int, read: Pos, write: Pos) -> None:
        """Atomically replace the metadata: temp file, fsync, rename (mode 0600)."""
        text = b"%d\n%d,%d\n%d,%d\n" % (depth, read[0], read[1], write[0], write[1])
        final = self._meta_path()
        tmp = final.with_name(f"{final.name}.{random.getrandbits(62)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                if os.write(fd, text) != len(text):
                    raise OSError(errno.EIO, "short write of metadata")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, final)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._meta_write_file = write[0]

    def _sync_blocking(self, depth: int, read: Pos, write: Pos, finished: list[int]) -> str | None:
        try:
            self._fsync_write_fd(close=self._write_fd_num != write[0])
            self._persist(depth, read, write)
        except OSError as exc:
            return str(exc)
        # Only now that the metadata has moved past them (a crash before this re-reads them).
        for num in finished:
            try:
                self._data_file(num).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.logger.error("DISKQUEUE(%s) failed to remove - %s", self.name, exc)
        return None

    def _close_blocking(self, depth: int, read: Pos, write: Pos, finished: list[int]) -> str | None:
        err = self._sync_blocking(depth, read, write, finished)
        self._close_reader()
        self._drop_write_fd()
        return err

    def _remove_blocking(self, files: range) -> str | None:
        self._close_reader()
        self._drop_write_fd()
        error = None
        for path in [*map(self._data_file, files), self._meta_path()]:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.logger.error("DISKQUEUE(%s) failed to remove %s - %s", self.name, path, exc)
                error = error or str(exc)
        self._meta_write_file = None  # the first write persists fresh metadata
        return error

    def _read_blocking(
        self, file_num: int, pos: int, end: int | None, max_bytes: int, max_records: int
    ) -> _ReadOutcome:
        """Read whole records from ``pos``; ``end`` is the write offset, None for older files."""
        records: list[tuple[bytes, int]] = []
        lo, hi = self.min_msg_size, self.max_msg_size
        try:
            f = self._reader(file_num)
            if end is None:
                end = os.fstat(f.fileno()).st_size
                complete = True
            else:
                complete = False
            if f.tell() != pos:
                f.seek(pos)
            used = 0
            while pos < end and used < max_bytes and len(records) < max_records:
                header = f.read(4) if end - pos >= 4 else b""
                if len(header) < 4:
                    raise _Corrupt(f"short read of a length ({end - pos} bytes left)")
                (size,) = _LENGTH.unpack(header)
                if size < lo or size > hi:
                    raise _Corrupt(f"invalid message read size ({size})")
                payload = f.read(size) if pos + 4 + size <= end else b""
                if len(payload) < size:
                    raise _Corrupt(f"short read of a {size} byte message")
                pos += 4 + size
                used += 4 + size
                records.append((payload, pos))
        except (OSError, _Corrupt) as exc:
            self._close_reader()
            return _ReadOutcome(records, pos, False, str(exc))
        finished = complete and pos >= end
        if finished:
            self._close_reader()
        return _ReadOutcome(records, pos, finished, None)

    def _reader(self, file_num: int) -> IO[bytes]:
        if self._read_file is not None and self._read_file_num == file_num:
            return self._read_file
        self._close_reader()
        path = self._data_file(file_num)
        self._read_file = open(path, "rb", buffering=256 * 1024)  # noqa: SIM115 (kept open)
        self._read_file_num = file_num
        self.logger.info("DISKQUEUE(%s): opened %s for reading", self.name, path)
        return self._read_file

    def _close_reader(self) -> None:
        if self._read_file is not None:
            f, self._read_file, self._read_file_num = self._read_file, None, -1
            f.close()

    def _quarantine_blocking(self, file_num: int, write_num: int) -> int:
        """Rename a damaged file to ``.bad``; return the file number to read next."""
        self._close_reader()
        path = self._data_file(file_num)
        bad = path.with_name(path.name + ".bad")
        self.logger.warning("DISKQUEUE(%s) jump to next file and saving bad file as %s", self.name, bad)
        try:
            os.rename(path, bad)
        except FileNotFoundError:
            # Missing, not damaged: jump over the whole gap of missing numbers in one step
            # (go-diskqueue takes one step, and logs two errors, per missing number).
            later = [n for n in self._file_numbers() if file_num < n < write_num]
            return min(later, default=max(write_num, file_num + 1))
        except OSError as exc:
            self.logger.error("DISKQUEUE(%s) failed to rename %s - %s", self.name, path, exc)
        return file_num + 1

    def _file_numbers(self) -> list[int]:
        pattern = re.compile(re.escape(self.name) + r"\.diskqueue\.(\d+)\.dat")
        try:
            names = os.listdir(self.data_path)
        except OSError:
            return []
        return [int(m.group(1)) for m in map(pattern.fullmatch, names) if m is not None]


def _count_records(path: Path, start: int, end: int, lo: int, hi: int) -> int:
    """Count the whole valid records in ``path`` between two offsets (headers only)."""
    count = 0
    try:
        with open(path, "rb", buffering=256 * 1024) as f:
            f.seek(start)
            while end - start >= 4:
                header = f.read(4)
                if len(header) < 4:
                    break
                (size,) = _LENGTH.unpack(header)
                if size < lo or size > hi or start + 4 + size > end:
                    break
                f.seek(size, os.SEEK_CUR)
                start += 4 + size
                count += 1
    except OSError:
        pass
    return count
