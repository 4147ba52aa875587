"""A segment's offset and time index (docs/design/storage.md, "Segments"): in memory, and
its ``.index`` file.

One entry per batch of the segment, in three arrays (24 bytes a batch, no object per batch,
so a batch of one message per ``--sync-every=1`` write stays cheap): the batch's *end* offset
(base + count), its file position, and the largest max timestamp of the batches up to and
including it. Ends rather than bases: the batch holding the first record at or after any
offset is ``bisect_right(ends, offset)``, gaps or not (a follower's append keeps its leader's),
and the batch head read with it gives the base. A running maximum rather than each batch's
own: a clock that steps back cannot break the bisect of a time lookup. Positions need not
follow each other: damaged bytes left in the file lie between two entries.

The same arrays are written to ``<base>.index`` when the segment rolls and at a clean
shutdown (``encode``)::

    NSQIDX1\\n | segment base u64 | segment size u64 | records u64 | batches u64 |
    ends (batches x u64) | positions (batches x u64) | running max timestamps (batches x i64) |
    crc32 u32 of everything before it

``decode`` takes one back when its crc holds and it was made for the segment as it is (its
base and size); the segment checks its last batch's head against the file too.

The segment's reads and appends and the scan (``segscan``) use the arrays directly in their
hot loops (``ends``, ``positions``, ``maxes``: no call per batch); everything else goes through
the methods here.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from bisect import bisect_left, bisect_right

__all__ = ["INDEX_MAGIC", "LOWEST", "SegmentIndex"]

INDEX_MAGIC = b"NSQIDX1\n"
_INDEX_HEAD = struct.Struct(">QQQQ")  # segment base, segment size, records, batches
_CRC = struct.Struct(">I")
_FIXED = len(INDEX_MAGIC) + _INDEX_HEAD.size
_NATIVE_IS_BIG = sys.byteorder == "big"
#: The running maximum before the first batch.
LOWEST = -(1 << 63)


class SegmentIndex:
    """The index of one segment: used by one thread at a time (its segment's)."""

    __slots__ = ("ends", "maxes", "positions")

    def __init__(self) -> None:
        self.ends = array("Q")  # per batch: one past its last offset
        self.positions = array("Q")  # its file position
        self.maxes = array("q")  # the running maximum of the batches' max timestamps

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def end(self) -> int | None:
        """The last batch's end offset (None: no batch)."""
        return self.ends[-1] if self.ends else None

    @property
    def max_timestamp(self) -> int:
        """The newest batch head's max timestamp (0: no batch)."""
        return self.maxes[-1] if self.maxes else 0

    @property
    def running(self) -> int:
        """The running maximum a next batch starts from."""
        return self.maxes[-1] if self.maxes else LOWEST

    # -- changes ------------------------------------------------------------------------------
    def add(self, end: int, position: int, running: int) -> None:
        """A batch ending at offset ``end`` at ``position``; ``running``: the running maximum
        with its max timestamp (the caller keeps it, as it adds many)."""
        self.ends.append(end)
        self.positions.append(position)
        self.maxes.append(running)

    def cut(self, batches: int) -> None:
        """Keep the first ``batches`` entries only (an append that failed)."""
        del self.ends[batches:], self.positions[batches:], self.maxes[batches:]

    def drop(self, j: int) -> None:
        """Entry ``j`` is gone (a damaged batch); the running maxima after it stay (a bound
        still, and the bisect stays sorted)."""
        del self.ends[j], self.positions[j], self.maxes[j]

    # -- lookups ------------------------------------------------------------------------------
    def batch_at(self, offset: int) -> int:
        """The batch holding the first record at or after ``offset`` (``len``: none)."""
        return bisect_right(self.ends, offset)

    def batch_at_time(self, timestamp_ns: int) -> int:
        """The first batch that can hold a record at or after ``timestamp_ns`` (``len``:
        none)."""
        return bisect_left(self.maxes, timestamp_ns)

    def start_of(self, j: int, base: int) -> int:
        """An offset from which batch ``j`` is the first read (the end of the one before it;
        ``base`` for the first)."""
        return self.ends[j - 1] if j else base

    def batches_within(self, i: int, limit: int) -> int:
        """``k``: batches ``i + 1 .. k - 1`` start at or before file position ``limit``."""
        return bisect_right(self.positions, limit, i + 1)

    # -- the .index file ----------------------------------------------------------------------
    def encode(self, base: int, size: int, count: int) -> bytes:
        """The ``.index`` file of a segment from ``base`` of ``size`` bytes and ``count``
        records."""
        ends, positions, maxes = array("Q", self.ends), array("Q", self.positions), array(
            "q", self.maxes)
        if not _NATIVE_IS_BIG:
            ends.byteswap()
            positions.byteswap()
            maxes.byteswap()
        head = _INDEX_HEAD.pack(base, size, count, len(ends))
        data = b"".join([INDEX_MAGIC, head, ends.tobytes(), positions.tobytes(), maxes.tobytes()])
        return data + _CRC.pack(zlib.crc32(data))

    @classmethod
    def decode(cls, data: bytes, base: int, size: int) -> tuple[SegmentIndex, int] | str:
        """The index in ``data`` (an ``.index`` file) and the records it counts, when it holds
        and was made for a segment from ``base`` of ``size`` bytes; else why not."""
        if len(data) < _FIXED + _CRC.size or not data.startswith(INDEX_MAGIC):
            return "too short or a wrong magic"
        if _CRC.unpack_from(data, len(data) - _CRC.size)[0] != zlib.crc32(memoryview(data)[:-4]):
            return "bad crc"
        indexed_base, indexed_size, count, batches = _INDEX_HEAD.unpack_from(
            data, len(INDEX_MAGIC))
        if len(data) != _FIXED + 24 * batches + _CRC.size:
            return "wrong length"
        if indexed_base != base:
            return f"base {indexed_base} is not the segment's"
        if indexed_size != size:
            return f"made for {indexed_size} bytes, the segment has {size}"
        cut = 8 * batches
        index = cls()
        index.ends.frombytes(data[_FIXED : _FIXED + cut])
        index.positions.frombytes(data[_FIXED + cut : _FIXED + 2 * cut])
        index.maxes.frombytes(data[_FIXED + 2 * cut : _FIXED + 3 * cut])
        if not _NATIVE_IS_BIG:
            index.ends.byteswap()
            index.positions.byteswap()
            index.maxes.byteswap()
        return index, count
