"""One segment file of a topic's log: batches of records (the format: ``segformat``; framed
and parsed by ``segbatch``), appended and read by offset, with its index (``segindex``) in
memory.

Opening a segment takes its index from ``<base>.index`` when that holds and describes the file
as it is (same size, and the last batch's head agrees); otherwise (and always for the active
segment) the file is scanned (``segscan``: damage costs the damaged batch alone).

**Crashes.** A write torn by a crash leaves a short or bad last batch; opening the segment cuts
it off with ``ftruncate`` (which needs no free space) and logs one warning. A failed append
(``ENOSPC``) cuts the file back to its size before the call, so a segment is only ever made of
whole batches that some append() returned for, plus at most a torn tail that the next open cuts.

Used by one thread at a time: the caller serialises (the topic's log does its file work in a
worker thread). Damage raises ``SegmentError`` (``nsqd.errors``); I/O failures are ``OSError``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import struct
from pathlib import Path

from .errors import SegmentError
from .segbatch import MAX_OFFSET as _MAX_OFFSET
from .segbatch import Damaged, DiskRun, frame, parse
from .segformat import BATCH_HEAD, MAGIC
from .segformat import HEAD as _HEAD
from .segindex import SegmentIndex
from .segscan import Scan, keep_aside

__all__ = ["BATCH_HEAD", "MAGIC", "DiskRun", "Segment", "SegmentError"]

_I64 = struct.Struct(">q")
_JOIN_BELOW = 64 << 10  # a write smaller than this is joined into one buffer first
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
_NAME = re.compile(r"(\d{20})\.log")

_logger = logging.getLogger(__name__)


class Segment:
    """One segment: blocking file work, used by one thread at a time (the caller serialises).

    Attributes (read them, never set them):
        base: the offset in the file name (``f"{base:020d}.log"``)
        path: the file
        size: bytes in the file (magic included)
        end: one past the last record's offset (``base`` when empty)
        count: records in it
        damaged_batches, damaged_bytes: damage found in it (by open() or read()), kept aside
        max_timestamp: the newest record's timestamp in ns (0 when empty), from the batch heads
    """

    __slots__ = ("_fd", "_index", "_logger", "_torn", "base", "count", "damaged_batches",
                 "damaged_bytes", "end", "path", "size")

    def __init__(self, path: Path, base: int, fd: int, logger: logging.Logger) -> None:
        # Use create() or open().
        self.path = path
        self.base = base
        self.size = len(MAGIC)
        self.end = base
        self.count = 0
        self._fd = fd
        self._logger = logger
        self._index = SegmentIndex()
        self._torn = False  # a failed append could not be cut back: cut before the next one
        self.damaged_batches = 0  # damage found (scan or read) and kept aside, and its bytes
        self.damaged_bytes = 0

    def __repr__(self) -> str:
        return f"<Segment {self.path} offsets {self.base}..{self.end} {self.size} bytes>"

    @property
    def max_timestamp(self) -> int:
        return self._index.max_timestamp

    @property
    def batches(self) -> int:
        """Batches in the segment (entries in its index)."""
        return len(self._index)

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(".index")

    # ---- creating and opening ---------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base: int, *, logger: logging.Logger | None = None) -> Segment:
        """A new, empty segment for offsets from ``base``: the file and its magic.

        The directory is fsynced too, so that the new file's name survives a power cut.

        Raises:
            FileExistsError: the file exists.
            OSError: it could not be made (nothing is left behind).
        """
        if not 0 <= base <= _MAX_OFFSET:
            raise ValueError(f"base offset out of range: {base}")
        path = Path(directory) / f"{base:020d}.log"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _pwrite_all(fd, [MAGIC], 0, len(MAGIC))
            _sync_directory(path.parent)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        return cls(path, base, fd, logger or _logger)

    @classmethod
    def open(cls, path: Path, *, active: bool, logger: logging.Logger | None = None,
             limit: int = _MAX_OFFSET) -> Segment:
        """Open an existing segment and build its index.

        A segment that is not ``active`` takes its index from ``<base>.index`` when that is
        valid. Otherwise (and always for the active segment, whose index is then removed as
        out of date) the file is scanned batch by batch, in reads of 1 MiB.

        Damage found by the scan costs the damaged bytes alone: the scan looks for the next
        whole batch after them (``_resync``) and reads on from there; the damaged bytes stay
        where they are, out of the index, and a copy is kept aside as
        ``<segment>.damaged-<position>`` (counted in ``damaged_batches`` and
        ``damaged_bytes``, logged as an error). Damage with no whole batch after it is the end
        of the segment: in the active segment that is a torn write (what a crash mid-write
        leaves: cut off with ``ftruncate``, one warning); in a closed one, damage (kept aside,
        then cut). ``limit``: no offset in the segment is at or past it (the next segment's
        base, the ``offsets`` reservation), which tells a damaged base offset from a batch.

        Raises:
            ValueError: the name is not ``<20 digits>.log``.
            SegmentError: shorter than the magic, or a wrong magic.
            OSError: the file could not be opened or read.
        """
        path = Path(path)
        match = _NAME.fullmatch(path.name)
        if match is None:
            raise ValueError(f"not a segment file name: {path.name}")
        logger = logger or _logger
        fd = os.open(path, os.O_RDWR)
        try:
            segment = cls(path, int(match.group(1)), fd, logger)
            size = os.fstat(fd).st_size
            magic = os.pread(fd, len(MAGIC), 0)
            if magic != MAGIC:
                what = "shorter than the magic" if len(magic) < len(MAGIC) else "a wrong magic"
                raise SegmentError(f"segment {path}: {what} ({magic[:len(MAGIC)]!r})")
            if active:
                with contextlib.suppress(FileNotFoundError):
                    segment.index_path.unlink()
                segment._scan(size, active=True, limit=limit)
            elif not segment._load_index(size):
                segment._scan(size, active=False, limit=limit)
        except BaseException:
            os.close(fd)
            raise
        return segment

    def _load_index(self, size: int) -> bool:
        """Take the index from ``<base>.index``; False when it is missing or does not hold."""
        try:
            data = self.index_path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._logger.warning("segment %s: cannot read its index (%s), scanning", self.path, exc)
            return False
        loaded = SegmentIndex.decode(data, self.base, size)
        why: str | None
        if isinstance(loaded, str):
            why = loaded
        else:
            index, count = loaded
            why = self._check_last_head(index, size)
            if why is None:
                self._index, self.size, self.count = index, size, count
                self.end = index.end if index.end is not None else self.base
                return True
        self._logger.warning("segment %s: index not used (%s), scanning", self.path, why)
        return False

    def _check_last_head(self, index: SegmentIndex, size: int) -> str | None:
        """Why ``index`` does not fit the file's last batch, or None when it does."""
        ends, positions = index.ends, index.positions
        if not ends:
            return None if size == len(MAGIC) else "no batches in a non-empty segment"
        head = os.pread(self._fd, _HEAD, positions[-1])
        if len(head) < _HEAD:
            return "the last batch is beyond the file"
        length, base, count, _, _ = BATCH_HEAD.unpack(head)
        if base + count != ends[-1] or positions[-1] + 4 + length != size:
            return "the last batch's head does not agree"
        return None

    def _scan(self, size: int, *, active: bool, limit: int) -> None:
        """Build the index from the batches themselves (``segscan``)."""
        scan = Scan(self._fd, self.path, self.base, self._index, self._keep_aside, self._logger)
        self.size, self.end, self.count = scan.run(size, active=active, limit=limit)
        self._torn = self._torn or scan.torn

    def _keep_aside(self, pos: int, stop: int, problem: str, then: str) -> None:
        """Bytes ``pos..stop`` are damaged: counted, logged and copied aside
        (``segscan.keep_aside``)."""
        self.damaged_batches += 1
        self.damaged_bytes += stop - pos
        keep_aside(self._fd, self.path, pos, stop, problem, then, self._logger)

    # ---- writing ----------------------------------------------------------------------------

    def append(self, runs: list[DiskRun], *, timestamps: list[int] | None = None) -> None:
        """Append each run as one batch, all of them in one write.

        Each run's records get consecutive offsets from its first; the first must be at or past
        ``end`` (gaps allowed). A batch's max timestamp is the largest of its records' own
        (bytes 0-8 of an NSQ record, big-endian ns) unless ``timestamps`` gives one per run.

        Raises:
            ValueError: bad offsets, an empty run, a record shorter than 8 bytes without
                ``timestamps``, or a batch over 4 GiB (nothing written).
            OSError: the write failed (``ENOSPC``...): the file is cut back to its size before
                the call, and the segment is exactly as it was.
        """
        if self._fd < 0:
            raise ValueError(f"segment {self.path} is closed")
        if timestamps is not None and len(timestamps) != len(runs):
            raise ValueError("one timestamp per run")
        index = self._index
        batches_before = len(index)
        bufs: list[bytes] = []
        before = self.size
        try:
            bufs, pos, end, added = frame(runs, index, self.end, before, timestamps)
            if not bufs:
                return
            if self._torn:
                os.ftruncate(self._fd, before)
                self._torn = False
            if pos - before <= _JOIN_BELOW:  # one copy of a few KiB costs less than an iovec
                bufs = [b"".join(bufs)]
            _pwrite_all(self._fd, bufs, before, pos - before)
        except BaseException as exc:
            index.cut(batches_before)
            if bufs and not isinstance(exc, ValueError | struct.error):
                # Cut off whatever part got written: the file ends on a whole batch again.
                try:
                    os.ftruncate(self._fd, before)
                except OSError as cut:
                    self._logger.error("segment %s: cannot cut back a failed write - %s",
                                       self.path, cut)
                    self._torn = True
            raise
        self.size, self.end = pos, end
        self.count += added

    def sync(self) -> None:
        """fdatasync: what was appended survives a power cut."""
        os.fdatasync(self._fd)

    def write_index(self) -> None:
        """Write ``<base>.index`` from the index in memory (no fsync: a bad one is rebuilt).

        Call it when the segment is complete (rolled), after ``sync()`` if the batches must be
        durable before the index says they are there.

        Raises:
            OSError: it could not be written (no partial index file is left).
        """
        data = self._index.encode(self.base, self.size, self.count)
        path = self.index_path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _pwrite_all(fd, [data], 0, len(data))
        except BaseException:
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        finally:
            os.close(fd)

    def cut_to(self, offset: int) -> int:
        """Keep only the records below ``offset`` (a follower's truncation, KIP-101); how
        many records went.

        The file is cut (``ftruncate``) at the start of the batch holding the first record
        at or after ``offset``; when that batch also holds records below ``offset`` they are
        written again after the cut as one batch of their own, and the file is fdatasync'ed.
        The index file goes (the segment is the active one from now on: scanned at the next
        open). A crash between the cut and that write loses those few records from this
        file: the log then ends before them, and its follower fetches them again (a
        restarted replica does not lead before it has).

        Raises:
            SegmentError, OSError: as read() and append(); the file may be cut already.
        """
        if self._fd < 0:
            raise ValueError(f"segment {self.path} is closed")
        index = self._index
        i = index.batch_at(offset)
        if i >= len(index):
            return 0
        kept: list[bytes] = []
        batch_start = index.start_of(i, self.base)
        first = batch_start
        if batch_start < offset:
            for base, records in self.read(batch_start, 0):  # (batch i alone)
                if not kept:
                    first = base
                kept += records[:max(offset - base, 0)]
            i = index.batch_at(offset)  # (again: a damaged batch found is out of the index)
            if i >= len(index):
                return 0
        gone = 0
        positions = index.positions
        for j in range(i, len(index)):
            head = os.pread(self._fd, _HEAD, positions[j])
            if len(head) == _HEAD:
                gone += BATCH_HEAD.unpack(head)[2]
        cut = positions[i]
        with contextlib.suppress(FileNotFoundError):
            self.index_path.unlink()
        os.ftruncate(self._fd, cut)
        index.cut(i)
        self.size = cut
        self.end = index.end if index.end is not None else self.base
        self.count = max(self.count - gone, 0)
        self._torn = False
        if kept:
            self.append([(first, kept)])
        os.fdatasync(self._fd)
        return max(gone - len(kept), 0)

    # ---- reading ----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> list[DiskRun]:
        """Runs of records from the first record at or after ``offset``.

        Whole batches are read, in one ``pread``, until about ``max_bytes`` of the file
        (always the batch holding that first record, whatever its size); batches with
        consecutive offsets come back as one run. Empty when no record is at or after
        ``offset``. A batch that does not hold (a bad crc, not what the index says, sizes
        that do not fill it) is taken out of the index and kept aside (``_keep_aside``): the
        read goes on without it, and so do later ones.

        Raises:
            SegmentError: the file is shorter than the index says.
            OSError: the read failed.
        """
        if self._fd < 0:
            raise ValueError(f"segment {self.path} is closed")
        while True:
            index = self._index
            ends, positions = index.ends, index.positions
            i = index.batch_at(offset)
            last = len(ends) - 1
            if i > last:
                return []
            start = positions[i]
            # Whole batches from i while they end within max_bytes of start; at least batch i.
            limit = start + max_bytes
            k = index.batches_within(i, limit)  # positions[i+1:k] <= limit
            stop_batch = last if k > last and self.size <= limit else max(i, k - 2)
            stop = positions[stop_batch + 1] if stop_batch < last else self.size
            data = os.pread(self._fd, stop - start, start)
            if len(data) != stop - start:
                raise SegmentError(f"segment {self.path}: short read at {start} "
                                   f"({len(data)} of {stop - start} bytes)")
            try:
                return parse(data, start, index, i, stop_batch, offset)
            except Damaged as damaged:  # that batch alone is lost: read again without it
                self._drop(damaged.batch, damaged.why)

    def _drop(self, j: int, why: str) -> None:
        """Batch ``j`` is damaged (found by a read, the index loaded from its file): out of
        the index, its bytes kept aside (``_keep_aside``), left in the file."""
        index = self._index
        ends, positions = index.ends, index.positions
        pos = positions[j]
        stop = positions[j + 1] if j + 1 < len(positions) else self.size
        lost = ends[j] - index.start_of(j, self.base)  # (and any gap before it)
        head = os.pread(self._fd, _HEAD, pos)
        if len(head) == _HEAD:
            _, base, n, _, _ = BATCH_HEAD.unpack(head)
            if base + n == ends[j] and n <= lost:  # the head says how many it held
                lost = n
        index.drop(j)
        self.count -= min(lost, self.count - len(ends))  # a record a batch left, at least
        self._keep_aside(pos, stop, why, "reading on without it")

    def find_time(self, timestamp_ns: int) -> int | None:
        """The offset of the first record whose own timestamp is >= ``timestamp_ns``, or None.

        A bisect on the running max timestamps finds the first batch that can hold one; its
        records' own timestamps (bytes 0-8) say which (records shorter than 8 bytes have none).

        Raises:
            SegmentError, OSError: as read().
        """
        index = self._index
        i = index.batch_at_time(timestamp_ns)
        unpack = _I64.unpack_from
        while i < len(index):
            # One batch at a time: max_bytes=0 reads batch i alone.
            for base, records in self.read(index.start_of(i, self.base), 0):
                for k, record in enumerate(records):
                    if len(record) >= 8 and unpack(record)[0] >= timestamp_ns:
                        return base + k
            i += 1
        return None

    # ---- closing and removing ---------------------------------------------------------------

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def remove(self) -> None:
        """Close, and unlink the file and its index (either missing is fine)."""
        self.close()
        for path in (self.path, self.index_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _pwrite_all(fd: int, bufs: list[bytes], offset: int, total: int) -> None:
    """Write ``bufs`` at ``offset`` in one system call, looping only on a short write."""
    if len(bufs) == 1:
        done = os.pwrite(fd, bufs[0], offset)
    elif len(bufs) <= _IOV_MAX:
        done = os.pwritev(fd, bufs, offset)
    else:
        bufs = [b"".join(bufs)]
        done = os.pwrite(fd, bufs[0], offset)
    if done == total:
        return
    rest = memoryview(b"".join(bufs))[done:]
    while rest:
        n = os.pwrite(fd, rest, offset + done)
        if n <= 0:
            raise OSError(errno.EIO, "write made no progress")
        done += n
        rest = rest[n:]


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
