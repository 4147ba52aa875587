"""Reading a segment file's batches from the start: how a segment's index is built when no
``.index`` can be used (the active segment, a crash, an index that does not hold), and how
damage is found and worked around (docs/design/storage.md, "Segments").

The file is read in 1 MiB reads, batch by batch. **Damage costs the damaged bytes alone**: a
batch that does not hold (a bad crc, a head whose length or count cannot be, offsets below
the batch before it or at ``limit``, the next segment's base or the ``offsets``
reservation) is lost, and the scan looks for the next whole batch after it (``_resync``),
trying every position as a head (a count and length that fit, offsets in order and in range,
a plausible head right after it, and its crc), so a damaged length field costs no more than a
damaged record; a batch after a gap whose base overtakes the next batch's is the damaged one
(its base, which the crc does not cover). The damaged bytes stay where they are, out of the
index, and are copied aside as ``<segment>.damaged-<position>`` (``keep_aside``). Damage with
no whole batch after it ends the segment: in the active segment that is a torn write (what a
crash mid-write leaves: cut off with ``ftruncate``, one warning); in a closed one, damage
(kept aside, then cut).

Blocking; used by the segment's thread.
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path

from .segformat import AFTER_LENGTH, BATCH_HEAD, HEAD, MAGIC
from .segindex import LOWEST, SegmentIndex

__all__ = ["Scan", "keep_aside"]

_SCAN_CHUNK = 1 << 20  # bytes per read while scanning
_NONZERO = re.compile(rb"[^\x00]")


class Scan:
    """One scan of a segment file into ``index`` (empty before it)."""

    __slots__ = ("base", "fd", "index", "keep_aside", "logger", "path", "torn")

    def __init__(self, fd: int, path: Path, base: int, index: SegmentIndex,
                 keep_aside: Callable[[int, int, str, str], None],
                 logger: logging.Logger) -> None:
        self.fd = fd
        self.path = path
        self.base = base
        self.index = index
        #: ``(position, stop, problem, then)``: damaged bytes, to count and keep aside
        self.keep_aside = keep_aside
        self.logger = logger
        self.torn = False  # the damaged end could not be cut off: to cut before a write

    def run(self, size: int, *, active: bool, limit: int) -> tuple[int, int, int]:
        """Build the index from the batches themselves, reading on after damage (see the
        module's docstring); the segment's size, end offset and record count after it."""
        fd, pread, crc32 = self.fd, os.pread, zlib.crc32
        unpack = BATCH_HEAD.unpack_from
        index = self.index
        ends, positions, maxes = index.ends, index.positions, index.maxes
        pos = len(MAGIC)
        end, count, running = self.base, 0, LOWEST
        while True:
            chunk, at = b"", pos  # chunk holds the file's bytes from position ``at``
            view, clen = memoryview(chunk), 0
            problem = None
            suspect: tuple[int, int, int] | None = None  # a batch after a gap: end, pos, n
            while pos < size:
                off = pos - at
                if clen - off < HEAD:
                    chunk, at, off = pread(fd, min(_SCAN_CHUNK, size - pos), pos), pos, 0
                    view, clen = memoryview(chunk), len(chunk)
                    if clen < HEAD:
                        problem = "a short batch head"
                        break
                length, base, n, max_ts, crc = unpack(chunk, off)
                stop = off + 4 + length
                if n == 0 or length < AFTER_LENGTH + 4 * n:
                    problem = f"a bad batch head (length {length}, count {n})"
                    break
                if stop > clen:
                    if pos + 4 + length > size:
                        problem = f"a short batch ({4 + length} bytes, {size - pos} in the file)"
                        break
                    chunk = pread(fd, max(4 + length, min(_SCAN_CHUNK, size - pos)), pos)
                    at, off = pos, 0
                    view, clen, stop = memoryview(chunk), len(chunk), 4 + length
                    if clen < stop:
                        problem = "a short read"
                        break
                if crc32(view[off + HEAD : stop]) != crc:
                    problem = "a bad crc"
                    break
                if base < end or base + n > limit:
                    if suspect is None or not suspect[0] <= base < end or base + n > limit:
                        problem = f"offsets out of order (base {base} after end {end})"
                        break
                    # The batch before came after a gap and overtakes this one: its base
                    # offset is the damaged one (the crc does not cover it), not all of
                    # these after it. Out of the index it goes, kept aside.
                    end, before, size_before = suspect
                    index.cut(len(ends) - 1)
                    count -= size_before
                    running = index.running
                    self.keep_aside(before, pos, "a base offset past the next batch's",
                                    f"reading on from position {pos}")
                suspect = (end, pos, n) if base > end else None
                end = base + n
                count += n
                if max_ts > running:
                    running = max_ts
                ends.append(end)  # (``index.add``, without a call per batch)
                positions.append(pos)
                maxes.append(running)
                pos += 4 + length
            if problem is None:
                break
            found = self._resync(pos, size, end, limit)
            if found is None:  # nothing whole after it: the end of the file
                if active:
                    self.logger.warning("segment %s: %s at position %d: cutting off the "
                                        "last %d bytes", self.path, problem, pos, size - pos)
                else:
                    self.keep_aside(pos, size, problem,
                                    f"cutting off the last {size - pos} bytes")
                try:
                    os.ftruncate(fd, pos)
                except OSError as exc:
                    self.logger.error("segment %s: cannot cut off the damaged end - %s",
                                      self.path, exc)
                    self.torn = True
                size = pos
                break
            self.keep_aside(pos, found, problem, f"reading on from position {found}")
            pos = found
        return size, end, count

    def _resync(self, pos: int, size: int, end: int, limit: int) -> int | None:
        """The position of the first whole batch after the damage at ``pos`` (None: none).

        Every position after it is tried as a batch head: a count and length that fit, offsets
        from ``end`` (the last whole batch's) and below ``limit``, a plausible head right after
        it (or the end of the file), and its crc. A length field damaged costs no more than
        one damaged in the records: the scan finds the next batch by its own head."""
        fd, pread, unpack = self.fd, os.pread, BATCH_HEAD.unpack_from
        search = _NONZERO.search
        p = pos + 1
        while p + HEAD <= size:
            chunk = pread(fd, min(_SCAN_CHUNK + HEAD, size - p), p)
            last = len(chunk) - HEAD  # heads at chunk[i] for i in 0..last
            if last < 0:
                return None
            i = 0
            while i <= last:
                length, base, n, _, crc = unpack(chunk, i)
                if length == 0:  # (a run of zeros, say a tail a power cut left: skipped in C)
                    found = search(chunk, i + 4)
                    i = max(i + 1, found.start() - 3) if found else last + 1
                    continue
                at = p + i
                if (n and AFTER_LENGTH + 4 * n <= length and at + 4 + length <= size
                        and end <= base and base + n <= limit
                        and self._followed(at + 4 + length, size, base + n, limit)
                        and self._crc_holds(at, length, crc)):
                    return at
                i += 1
            p += last + 1
        return None

    def _followed(self, pos: int, size: int, end: int, limit: int) -> bool:
        """Whether what comes at ``pos`` may follow a batch ending at offset ``end``: the end
        of the file, a torn head, or a plausible head."""
        if size - pos < HEAD:
            return True
        length, base, n, _, _ = BATCH_HEAD.unpack(os.pread(self.fd, HEAD, pos))
        return bool(n > 0 and AFTER_LENGTH + 4 * n <= length and end <= base
                    and base + n <= limit)

    def _crc_holds(self, pos: int, length: int, crc: int) -> bool:
        data = os.pread(self.fd, length - AFTER_LENGTH, pos + HEAD)
        return len(data) == length - AFTER_LENGTH and zlib.crc32(data) == crc


def keep_aside(fd: int, path: Path, pos: int, stop: int, problem: str, then: str,
               logger: logging.Logger) -> None:
    """Bytes ``pos..stop`` of segment ``path`` are damaged: logged, and copied to
    ``<segment>.damaged-<pos>`` for inspection (left as it is when there already)."""
    aside = path.with_name(f"{path.name}.damaged-{pos}")
    logger.error("segment %s: %s at position %d: %d bytes lost, kept aside as %s; %s",
                 path, problem, pos, stop - pos, aside.name, then)
    try:
        if aside.exists() and aside.stat().st_size == stop - pos:
            return
        with open(aside, "wb") as out:
            at = pos
            while at < stop:
                data = os.pread(fd, min(_SCAN_CHUNK, stop - at), at)
                if not data:
                    break
                out.write(data)
                at += len(data)
    except OSError as exc:
        logger.error("segment %s: cannot keep the damaged bytes aside - %s", path, exc)
