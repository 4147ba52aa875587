"""A segment's batches as bytes (the format: ``segformat``): runs of records framed into
batches for an append (the size prefixes, the head, the crc32 of the records, the max
timestamp), and batches read back from the file checked (their crc, the offsets the index
says, sizes that fill them) and parsed into records. No file work: ``segment`` writes and
reads the bytes, ``segscan`` finds batches in a file it scans.

Both are on the hot path of every write and read: the loops are written for speed (a batch of
one record packed at once, records of one size sliced in a comprehension), and the index's
arrays are filled in place as batches are framed.
"""

from __future__ import annotations

import struct
import zlib

from .packed import PackedBySize
from .segformat import AFTER_LENGTH, BATCH_HEAD, HEAD
from .segindex import SegmentIndex

__all__ = ["MAX_OFFSET", "Damaged", "DiskRun", "frame", "max_timestamp", "parse"]

#: Records at consecutive offsets as a segment writes and reads them: (offset of the first
#: record, the records). (In memory, a run also says whether its records are plain:
#: ``runs.Run``.)
DiskRun = tuple[int, list[bytes]]

#: Offsets are u64 on disk; kept below 2**63 (signed everywhere else).
MAX_OFFSET = (1 << 63) - 1

_SIZE = struct.Struct(">I")
_I64 = struct.Struct(">q")
_HEAD_AND_SIZE = struct.Struct(">IQIqII")  # the head of a batch of one record, and its size
_MAX_LENGTH = 0xFFFFFFFF
#: the 4-byte size prefix of a record of each size, looked up in C (see nsqd.packed)
_size_prefix = PackedBySize(_SIZE.pack).__getitem__


class Damaged(Exception):
    """Batch ``batch`` of the index did not hold when read (the segment drops it)."""

    def __init__(self, batch: int, why: str) -> None:
        super().__init__(why)
        self.batch = batch
        self.why = why


def frame(runs: list[DiskRun], index: SegmentIndex, end: int, pos: int,
          timestamps: list[int] | None) -> tuple[list[bytes], int, int, int]:
    """Each run as one batch, to be written at file position ``pos`` of a segment whose end
    offset is ``end``; each batch is added to ``index`` as it is framed (the caller cuts it
    back if the write fails). The buffers to write, and the file position, end offset and
    records added after them.

    Raises:
        ValueError: bad offsets, an empty run, a record shorter than 8 bytes without
            ``timestamps``, or a batch over 4 GiB.
    """
    ends, positions, maxes = index.ends, index.positions, index.maxes
    bufs: list[bytes] = []
    added = 0
    running = index.running
    crc32 = zlib.crc32
    for k, (first, records) in enumerate(runs):
        n = len(records)
        if first < end or n == 0:
            raise ValueError(f"offset {first} is below the segment's end {end}" if n
                             else "an empty run")
        end = first + n
        if end > MAX_OFFSET:
            raise ValueError(f"offset {end} out of range")
        if n == 1:
            # A batch of one record (--mem-queue-size=0, --sync-every=1): its head and
            # the record's size in one pack, the crc over both parts without a join.
            record = records[0]
            size = len(record)
            if timestamps is not None:
                max_ts = timestamps[k]
            elif size >= 8:
                max_ts = _I64.unpack_from(record)[0]
            else:
                raise ValueError("a record shorter than 8 bytes has no timestamp: "
                                 "give timestamps")
            length = AFTER_LENGTH + 4 + size
            if length > _MAX_LENGTH:
                raise ValueError(f"a batch of {length} bytes is over 4 GiB")
            crc = crc32(record, crc32(_size_prefix(size)))
            bufs += (_HEAD_AND_SIZE.pack(length, first, 1, max_ts, crc, size), record)
        else:
            # The size prefixes and records interleaved by slice assignment, in C.
            parts = [b""] * (2 * n)
            parts[0::2] = map(_size_prefix, map(len, records))
            parts[1::2] = records
            body = b"".join(parts)
            length = AFTER_LENGTH + len(body)
            if length > _MAX_LENGTH:
                raise ValueError(f"a batch of {length} bytes is over 4 GiB")
            max_ts = max_timestamp(records) if timestamps is None else timestamps[k]
            bufs += (BATCH_HEAD.pack(length, first, n, max_ts, crc32(body)), body)
        if max_ts > running:
            running = max_ts
        ends.append(end)
        positions.append(pos)
        maxes.append(running)
        pos += 4 + length
        added += n
    return bufs, pos, end, added


def parse(data: bytes, start: int, index: SegmentIndex, first: int, last: int, offset: int
          ) -> list[DiskRun]:
    """The records of batches ``first..last`` of ``index`` in ``data`` (file bytes from
    ``start``), from ``offset`` on, each batch checked against its crc and the index.

    Raises:
        Damaged: a batch that does not hold (a bad crc, not what the index says, sizes that
            do not fill it).
    """
    runs: list[DiskRun] = []
    view = memoryview(data)
    unpack_head, unpack_size, crc32 = BATCH_HEAD.unpack_from, _SIZE.unpack_from, zlib.crc32
    ends, positions = index.ends, index.positions
    records: list[bytes] = []
    append = records.append
    run_end = -1
    j = first
    try:
        for j in range(first, last + 1):
            p = positions[j] - start  # (damaged bytes may lie between two batches)
            batch_stop = positions[j + 1] - start if j < last else len(data)
            if p + HEAD > batch_stop:
                raise Damaged(j, "a short batch")
            length, base, n, _, crc = unpack_head(data, p)
            q = p + HEAD  # the records part is data[q:p] once p is moved past the batch
            p += 4 + length
            if base + n != ends[j] or p > batch_stop or n == 0:
                raise Damaged(j, "a batch that is not what the index says")
            if crc32(view[q:p]) != crc:
                raise Damaged(j, "a bad crc")
            if offset > base:
                for _ in range(offset - base):
                    q += 4 + unpack_size(data, q)[0]
                n -= offset - base
                base = offset
            if base != run_end:
                records = []
                append = records.append
                runs.append((base, records))
            run_end = base + n
            if n == 1:
                if unpack_size(data, q)[0] != p - q - 4:
                    raise struct.error("a size that does not fill the batch")
                append(data[q + 4 : p])
                continue
            # Records of one size (the checks of its size prefixes done in C, by strided
            # slices): sliced in a comprehension, 25% less per record than the loop below.
            stride, rest = divmod(p - q, n)
            if not rest and stride >= 4:
                prefix = _size_prefix(stride - 4)
                if (data[q + 3 : p : stride] == prefix[3:] * n
                        and data[q + 2 : p : stride] == prefix[2:3] * n
                        and data[q + 1 : p : stride] == prefix[1:2] * n
                        and data[q:p:stride] == prefix[:1] * n):
                    size = stride - 4
                    records += [data[k : k + size] for k in range(q + 4, p + 4, stride)]
                    continue
            for _ in range(n):
                (size,) = unpack_size(data, q)
                q += 4
                append(data[q : q + size])
                q += size
            if q != p:
                raise struct.error("sizes that do not fill the batch")
    except struct.error:  # sizes that run past their batch, in a batch whose crc holds
        raise Damaged(j, "a malformed batch") from None
    return runs


def max_timestamp(records: list[bytes]) -> int:
    """The largest of ``records``' own timestamps.

    Raises:
        ValueError: a record shorter than 8 bytes (it has none).
    """
    # Big-endian bytes compare as unsigned numbers, so the largest record (compared in C, no
    # slice per record) starts with the largest timestamp, unless some have the sign bit set.
    top = max(records)
    if len(top) >= 8:
        value: int = _I64.unpack_from(top)[0]
        if value >= 0:
            return value
    if min(map(len, records)) < 8:
        raise ValueError("a record shorter than 8 bytes has no timestamp: give timestamps")
    return max(int(_I64.unpack_from(r)[0]) for r in records)
