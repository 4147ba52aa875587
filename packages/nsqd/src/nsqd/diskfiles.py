"""The files of one disk queue (``nsqd.diskqueue``), in go-diskqueue v1.1.0's format.

Files in ``data_path``::

    <name>.diskqueue.000000.dat      records, one after another; the next file number starts
    <name>.diskqueue.000001.dat      when a record would take a file past max_bytes_per_file
    <name>.diskqueue.meta.dat        b"<depth>\\n<readFileNum>,<readPos>\\n<writeFileNum>,<writePos>\\n"
    <name>.diskqueue.000000.dat.bad  a file that could not be read, left for an operator

Each record::

    +--------+--------+--------+--------+==================+
    |   payload length, int32 big-endian | payload ...      |
    +--------+--------+--------+--------+==================+

``DiskFiles`` does every blocking file operation of a queue: loading the metadata, appending
records, reading them back, syncing, removing and putting aside files. It keeps the open file
descriptors, and it is used by one thread at a time (the queue's I/O lock holder); it keeps no
queue state of its own beyond that, so positions and depths come in as arguments.
``take_batch`` and ``settle`` group queued put() requests into one write and report back.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import struct
from collections import deque
from pathlib import Path
from typing import IO

import attrs
from nsq_common import write_atomically

from .packed import PackedBySize

Pos = tuple[int, int]
Gone = tuple[int, bool]  # a file the queue is done with: (file number, damaged)

LENGTH = struct.Struct(">i")
#: The 4-byte length prefix of a record of each size (27 ns a record less than packing each:
#: batches of 200 records of one size, in process).
_length_prefix = PackedBySize(LENGTH.pack).__getitem__
_CHUNK = 64 * 1024  # read beyond max_bytes by this much: the record that crosses it
_META = re.compile(rb"(-?\d+)\n(-?\d+),(-?\d+)\n(-?\d+),(-?\d+)\n?\Z")


class _Corrupt(Exception):
    """Raised in the reader for bytes that cannot be a record."""


@attrs.frozen
class WriteOutcome:
    write: Pos
    written: int  # records now in the files
    acked: int  # of those, how many can be reported as stored (0 if the promised fsync failed)
    synced: bool
    error: str | None


@attrs.define(eq=False)
class PutRequest:
    records: list[bytes]
    nbytes: int
    taken: bool = False  # handed to a writer; from then on only the writer completes it
    done: bool = False
    error: str | None = None
    closed: bool = False  # dropped unwritten: the queue was deleted


def take_batch(pending: deque[PutRequest], max_bytes: int) -> tuple[list[PutRequest], list[bytes], int]:
    """The queued put() requests one write takes (group commit): the first, then while the
    batch stays under ``max_bytes``. Returns them, their records and their size on disk."""
    batch: list[PutRequest] = []
    nbytes = 0
    while pending and (not batch or nbytes + pending[0].nbytes <= max_bytes):
        request = pending.popleft()
        request.taken = True
        batch.append(request)
        nbytes += request.nbytes
    records = batch[0].records if len(batch) == 1 else [r for q in batch for r in q.records]
    return batch, records, nbytes


def settle(batch: list[PutRequest], out: WriteOutcome) -> None:
    """Complete the requests of a written batch: the error goes to those not all acked."""
    acked = out.acked
    for request in batch:
        request.done = True
        if acked >= len(request.records):
            acked -= len(request.records)
        else:
            acked = 0
            request.error = out.error


@attrs.frozen
class ReadOutcome:
    records: list[tuple[bytes, int]]  # payload, offset just past it
    pos: int
    finished: bool  # a complete (older) file was read to its end
    error: str | None


@attrs.frozen
class Loaded:
    depth: int
    read: Pos
    write: Pos
    repaired: bool  # the positions differ from the metadata file: persist them soon


@attrs.define(eq=False)
class DiskFiles:
    name: str
    data_path: Path
    max_bytes_per_file: int
    min_msg_size: int
    max_msg_size: int
    logger: logging.Logger

    _meta_write_file: int | None = attrs.field(init=False, default=None)
    _write_fd: int | None = attrs.field(init=False, default=None)
    _write_fd_num: int = attrs.field(init=False, default=-1)
    _read_file: IO[bytes] | None = attrs.field(init=False, default=None)
    _read_file_num: int = attrs.field(init=False, default=-1)

    def data_file(self, num: int) -> Path:
        return self.data_path / f"{self.name}.diskqueue.{num:06d}.dat"

    def meta_path(self) -> Path:
        return self.data_path / f"{self.name}.diskqueue.meta.dat"

    def can_append_inline(self, file_num: int) -> bool:
        """Whether a write into ``file_num`` needs neither an open() nor a metadata update."""
        return self._meta_write_file == file_num and self._write_fd is not None

    # ---- loading ------------------------------------------------------------------------------

    def load(self) -> Loaded | None:
        """The positions the metadata gives, repaired after a crash; None for a fresh queue."""
        path = self.meta_path()
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.logger.error("DISKQUEUE(%s) failed to read metadata - %s", self.name, exc)
            return None
        match = _META.match(text)
        if match is None:
            self.logger.error("DISKQUEUE(%s) failed to parse metadata %s", self.name, path)
            return None
        depth, rnum, rpos, wnum, wpos = map(int, match.groups())
        self._meta_write_file = wnum
        if (rnum, rpos) > (wnum, wpos):
            self.logger.error(
                "DISKQUEUE(%s) read position %s beyond write position %s, corruption, "
                "skipping to a new file and resetting 0",
                self.name,
                (rnum, rpos),
                (wnum, wpos),
            )
            fresh = (max(rnum, wnum) + 1, 0)
            return Loaded(0, fresh, fresh, True)
        extra, write = self._check_write_file((wnum, wpos))
        return Loaded(depth + extra, (rnum, rpos), write, write != (wnum, wpos))

    def _check_write_file(self, write: Pos) -> tuple[int, Pos]:
        # After a crash the write file can hold more than the metadata says (it was not synced
        # since) or, after an OS crash, less. Either way that file is left to the reader, and
        # writing resumes in a new one. go-diskqueue handles only the first case; it also
        # leaves depth stale there, while we count the extra records so depth stays exact.
        wnum, wpos = write
        path = self.data_file(wnum)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size == wpos:
            return 0, write
        extra = 0
        if wpos < size:
            extra = _count_records(path, wpos, size, self.min_msg_size, self.max_msg_size)
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
        return extra, (wnum + 1, 0)

    # ---- writing and syncing ------------------------------------------------------------------

    def write(self, records: list[bytes], start: Pos, depth: int, read: Pos, sync: bool) -> WriteOutcome:
        """Append ``records`` from ``start``, rolling files; ``depth`` and ``read`` are what the
        metadata gets when it has to be persisted (a new write file, or ``sync``)."""
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
                rest = records[done:] if done else records
                total = sum(map(len, rest)) + 4 * len(rest)
                if pos + total <= limit:
                    # The usual case, everything left fits in this file: its length prefixes
                    # and records interleaved by slice assignment, in C (105 ns a record, 72
                    # with the prefixes looked up, where the loop below takes 245: batches of
                    # 200, in process).
                    parts = [b""] * (2 * len(rest))
                    parts[0::2] = map(_length_prefix, map(len, rest))
                    parts[1::2] = rest
                    self._append(fd, b"".join(parts), pos)
                    done, pos = len(records), pos + total
                    continue
                parts = []
                end, stop = pos, done
                while stop < len(records):
                    size = len(records[stop])
                    if end > 0 and end + 4 + size > limit:
                        break
                    parts += (LENGTH.pack(size), records[stop])
                    end += 4 + size
                    stop += 1
                self._append(fd, b"".join(parts), pos)
                done, pos = stop, end
            if sync:
                syncing = True
                self._fsync_write_fd()
                self._persist(depth + done, read, (file_num, pos))
        except OSError as exc:
            return WriteOutcome((file_num, pos), done, 0 if syncing else done, False, str(exc))
        return WriteOutcome((file_num, pos), done, done, sync, None)

    def sync(self, depth: int, read: Pos, write: Pos, gone: list[Gone]) -> str | None:
        """fsync the write file and persist the metadata; then delete (or, for damaged ones,
        rename to ``.bad``) the files in ``gone``. Returns an error text or None."""
        try:
            self._fsync_write_fd(close=self._write_fd_num != write[0])
            self._persist(depth, read, write)
        except OSError as exc:
            return str(exc)
        # Only now that the metadata has moved past them (a crash before this re-reads them).
        for num, damaged in gone:
            if damaged:
                self._rename_bad(num)
                continue
            try:
                self.data_file(num).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.logger.error("DISKQUEUE(%s) failed to remove - %s", self.name, exc)
        return None

    def close(self, depth: int, read: Pos, write: Pos, gone: list[Gone]) -> str | None:
        err = self.sync(depth, read, write, gone)
        self._close_reader()
        self._drop_write_fd()
        return err

    def close_files(self) -> None:
        """Close the files without persisting anything (a queue that was only read)."""
        self._close_reader()
        self._drop_write_fd()

    def remove(self, files: range, damaged: list[int]) -> str | None:
        """Remove the data files in ``files`` (and any other of the queue's name there) and
        the metadata; ``damaged`` ones become ``.bad``."""
        self._close_reader()
        self._drop_write_fd()
        for num in damaged:
            self._rename_bad(num)
        error = None
        numbers = sorted({*files, *self._file_numbers()})
        for path in [*map(self.data_file, numbers), self.meta_path()]:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.logger.error("DISKQUEUE(%s) failed to remove %s - %s", self.name, path, exc)
                error = error or str(exc)
        self._meta_write_file = None  # the first write persists fresh metadata
        return error

    def rename(self, name: str, files: range) -> None:
        """Rename every file of the queue (the data files in ``files`` and any other of its
        name there, and the metadata; not ``.bad`` ones) and go on under ``name``. Open files
        stay open (a rename does not touch them). One that cannot be renamed is logged."""
        numbers = sorted({*files, *self._file_numbers()})
        old = [*map(self.data_file, numbers), self.meta_path()]
        self.name = name
        new = [*map(self.data_file, numbers), self.meta_path()]
        for source, target in zip(old, new, strict=True):
            try:
                os.rename(source, target)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.logger.error("DISKQUEUE(%s) failed to rename %s - %s", name, source, exc)

    def _open_write_fd(self, file_num: int) -> int:
        if self._write_fd is not None and self._write_fd_num == file_num:
            return self._write_fd
        self._drop_write_fd()
        path = self.data_file(file_num)
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
        write_atomically(self.meta_path(), text, mode=0o600)
        self._meta_write_file = write[0]

    # ---- reading and damage -------------------------------------------------------------------

    def read(self, file_num: int, pos: int, end: int | None, max_bytes: int, max_records: int) -> ReadOutcome:
        """Read whole records from ``pos``; ``end`` is the write offset, None for older files.

        The file is read in large chunks (``os.pread``, about ``max_bytes`` at a time) and the
        records are sliced out of each chunk: one system call and no buffered-reader calls per
        record, where reading each record's length and payload with ``read()`` cost two calls
        per record (see docs/performance.md, consuming from disk). A record longer than the
        chunk is read whole by itself.
        """
        records: list[tuple[bytes, int]] = []
        lo, hi = self.min_msg_size, self.max_msg_size
        unpack = LENGTH.unpack_from
        pread = os.pread
        try:
            f = self._reader(file_num)
            fd = f.fileno()
            if end is None:
                end = os.fstat(fd).st_size
                complete = True
            else:
                complete = False
            chunk = b""
            base = pos  # chunk holds the file's bytes from base
            used = 0
            while pos < end and used < max_bytes and len(records) < max_records:
                off = pos - base
                if len(chunk) - off < 4:
                    if end - pos >= 4:
                        chunk = pread(fd, min(end - pos, max(max_bytes - used, 0) + _CHUNK), pos)
                        base, off = pos, 0
                    if len(chunk) - off < 4:
                        raise _Corrupt(f"short read of a length ({end - pos} bytes left)")
                (size,) = unpack(chunk, off)
                if size < lo or size > hi:
                    raise _Corrupt(f"invalid message read size ({size})")
                stop = off + 4 + size
                if stop > len(chunk):
                    if pos + 4 + size <= end:
                        chunk = pread(fd, max(min(end - pos, max_bytes - used + _CHUNK), 4 + size),
                                      pos)
                        base, off, stop = pos, 0, 4 + size
                    if stop > len(chunk):
                        raise _Corrupt(f"short read of a {size} byte message")
                pos = base + stop
                used += 4 + size
                records.append((chunk[off + 4 : stop], pos))
        except (OSError, _Corrupt) as exc:
            self._close_reader()
            return ReadOutcome(records, pos, False, str(exc))
        finished = complete and pos >= end
        if finished:
            self._close_reader()
        return ReadOutcome(records, pos, finished, None)

    def _reader(self, file_num: int) -> IO[bytes]:
        if self._read_file is not None and self._read_file_num == file_num:
            return self._read_file
        self._close_reader()
        path = self.data_file(file_num)
        self._read_file = open(path, "rb", buffering=0)  # noqa: SIM115 (kept open; read by pread)
        self._read_file_num = file_num
        self.logger.info("DISKQUEUE(%s): opened %s for reading", self.name, path)
        return self._read_file

    def _close_reader(self) -> None:
        if self._read_file is not None:
            f, self._read_file, self._read_file_num = self._read_file, None, -1
            f.close()

    def quarantine(self, file_num: int, write_num: int) -> int:
        """Rename a damaged file to ``.bad``; return the file number to read next."""
        if self._rename_bad(file_num, "jump to next file and saving bad file as"):
            return file_num + 1
        # Missing, not damaged: jump over the whole gap of missing numbers in one step
        # (go-diskqueue takes one step, and logs two errors, per missing number).
        later = [n for n in self._file_numbers() if file_num < n < write_num]
        return min(later, default=max(write_num, file_num + 1))

    def _rename_bad(self, file_num: int, why: str = "saving damaged file as") -> bool:
        """Put a damaged file aside as ``.bad``; False if it does not exist."""
        if self._read_file_num == file_num:
            self._close_reader()
        path = self.data_file(file_num)
        bad = path.with_name(path.name + ".bad")
        self.logger.warning("DISKQUEUE(%s) %s %s", self.name, why, bad)
        try:
            os.rename(path, bad)
        except FileNotFoundError:
            return False
        except OSError as exc:
            self.logger.error("DISKQUEUE(%s) failed to rename %s - %s", self.name, path, exc)
        return True

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
                (size,) = LENGTH.unpack(header)
                if size < lo or size > hi or start + 4 + size > end:
                    break
                f.seek(size, os.SEEK_CUR)
                start += 4 + size
                count += 1
    except OSError:
        pass
    return count
