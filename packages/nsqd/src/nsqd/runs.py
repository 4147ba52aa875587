"""Records held in memory by offset: a topic log's memory tail and its cache of disk reads.

A *run* is consecutive records from one offset: ``(first offset, records, plain)``, where
``plain`` says every record of it is known to be plain (``record.is_plain``: PUB and MPUB
make only those) so a channel can deliver them as they are without looking at each. A
``RunStore`` keeps runs in offset order, with gaps allowed between them, and answers "the
records from offset N" with a bisect and slices: no object per record, the record bytes shared
by every channel that reads them.

Why chunks, and tuples: records are ``bytes``, which the cyclic garbage collector does not
track, and a tuple of them it stops tracking at its first collection; but a list of millions
of records is one tracked object whose every element each full collection visits (92 ms per
``gc.collect()`` with 4 million records in one deque, 4 ms in tuples of 200, measured for the
queue this replaces). So a run grows as a list up to ``CHUNK`` records and is then frozen
into a tuple.
"""

from __future__ import annotations

import bisect
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cursor import Cursor

#: Records a chunk grows to before it is frozen into a tuple.
CHUNK = 4096

Run = tuple[int, Sequence[bytes], bool]


class RunStore:
    __slots__ = ("_firsts", "_plain", "_records", "bytes", "count")

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._records: list[list[bytes] | tuple[bytes, ...]] = []
        self._plain: list[bool] = []
        self.bytes = 0  # record bytes held
        self.count = 0  # records held

    def __bool__(self) -> bool:
        return bool(self._firsts)

    @property
    def start(self) -> int:
        """The first offset held (meaningless when empty)."""
        return self._firsts[0]

    @property
    def end(self) -> int:
        """One past the last offset held (meaningless when empty)."""
        return self._firsts[-1] + len(self._records[-1])

    def append(self, first: int, records: Sequence[bytes], plain: bool) -> None:
        """Hold ``records`` from offset ``first``, after everything held."""
        if not records:
            return
        self.bytes += sum(map(len, records))
        self.count += len(records)
        if self._firsts:
            last = self._records[-1]
            if (isinstance(last, list) and self._plain[-1] == plain
                    and self._firsts[-1] + len(last) == first and len(last) < CHUNK):
                last += records
                if len(last) >= CHUNK:
                    self._records[-1] = tuple(last)
                return
        self._firsts.append(first)
        self._records.append(list(records) if len(records) < CHUNK else tuple(records))
        self._plain.append(plain)

    def insert(self, first: int, records: Sequence[bytes], plain: bool) -> None:
        """Hold ``records`` from ``first`` wherever they fall (a cache of disk reads); a run
        overlapping what is held is trimmed to what is new."""
        i = bisect.bisect_right(self._firsts, first) - 1
        if i >= 0:  # cut what the run before covers
            covered = self._firsts[i] + len(self._records[i]) - first
            if covered >= len(records):
                return
            if covered > 0:
                records, first = records[covered:], first + covered
        j = i + 1
        if j < len(self._firsts) and self._firsts[j] < first + len(records):
            records = records[:self._firsts[j] - first]
        if not records:
            return
        self._firsts.insert(j, first)
        self._records.insert(j, tuple(records))
        self._plain.insert(j, plain)
        self.bytes += sum(map(len, records))
        self.count += len(records)

    def read(self, offset: int, n: int) -> list[Run]:
        """Up to ``n`` records from the first offset held at or after ``offset``, as runs."""
        firsts = self._firsts
        i = bisect.bisect_right(firsts, offset) - 1
        out: list[Run] = []
        if i < 0:
            i = 0
        elif offset >= firsts[i] + len(self._records[i]):
            i += 1  # in the gap after run i
        while n > 0 and i < len(firsts):
            first, records = firsts[i], self._records[i]
            skip = max(offset - first, 0)
            part = records[skip:skip + n] if skip or n < len(records) else records
            if part:
                out.append((first + skip, part, self._plain[i]))
                n -= len(part)
            i += 1
        return out

    def covers(self, offset: int) -> bool:
        """Whether ``offset`` itself is held."""
        i = bisect.bisect_right(self._firsts, offset) - 1
        return i >= 0 and offset < self._firsts[i] + len(self._records[i])

    def runs_between(self, start: int, end: int) -> list[tuple[int, Sequence[bytes]]]:
        """The runs of records at offsets in [start, end) (for writing them)."""
        out = []
        for first, records, _ in self.read(start, end - start):
            if first >= end:
                break
            out.append((first, records[:end - first]))
        return out

    def count_between(self, start: int, end: int) -> int:
        """How many records are held at offsets in [start, end)."""
        firsts, chunks = self._firsts, self._records
        i = max(bisect.bisect_right(firsts, start) - 1, 0)
        n = 0
        while i < len(firsts) and firsts[i] < end:
            first = firsts[i]
            n += max(min(end, first + len(chunks[i])) - max(start, first), 0)
            i += 1
        return n

    def drop_first(self, n: int) -> int:
        """Forget the oldest ``n`` records (gaps between them or not); how many were."""
        runs = self.read(self._firsts[0], n) if self._firsts else []
        if not runs:
            return 0
        first, records, _ = runs[-1]
        return self.drop_before(first + len(records))

    def drop_before(self, offset: int) -> int:
        """Forget every record below ``offset``; how many were dropped."""
        dropped = 0
        firsts, chunks = self._firsts, self._records
        while firsts and firsts[0] + len(chunks[0]) <= offset:
            dropped += len(chunks[0])
            self.bytes -= sum(map(len, chunks[0]))
            del firsts[0], chunks[0], self._plain[0]
        if firsts and firsts[0] < offset:
            cut = offset - firsts[0]
            head = chunks[0]
            self.bytes -= sum(map(len, head[:cut]))
            chunks[0] = head[cut:]
            firsts[0] = offset
            dropped += cut
        self.count -= dropped
        return dropped

    def drop_from(self, offset: int) -> int:
        """Forget every record at or after ``offset`` (a follower's truncation); how many
        were dropped."""
        dropped = 0
        firsts, chunks = self._firsts, self._records
        while firsts and firsts[-1] >= offset:
            dropped += len(chunks[-1])
            self.bytes -= sum(map(len, chunks[-1]))
            del firsts[-1], chunks[-1], self._plain[-1]
        if firsts and firsts[-1] + len(chunks[-1]) > offset:
            keep = offset - firsts[-1]
            tail = chunks[-1]
            self.bytes -= sum(map(len, tail[keep:]))
            dropped += len(tail) - keep
            chunks[-1] = list(tail[:keep])
        self.count -= dropped
        return dropped

    def drop_oldest_run(self, keep: Container[int] = ()) -> int:
        """Forget the oldest run but those starting at an offset of ``keep`` (a cache making
        room, keeping what was just read for a waiting reader); how many records it held (0:
        nothing to drop)."""
        i = next((i for i, first in enumerate(self._firsts) if first not in keep), -1)
        if i < 0:
            return 0
        records = self._records[i]
        self.bytes -= sum(map(len, records))
        self.count -= len(records)
        del self._firsts[i], self._records[i], self._plain[i]
        return len(records)

    def clear(self) -> None:
        self._firsts.clear()
        self._records.clear()
        self._plain.clear()
        self.bytes = self.count = 0


def cut(runs: list[Run], end: int) -> list[Run]:
    """``runs`` without the records at ``end`` or after."""
    out: list[Run] = []
    for first, records, plain in runs:
        if first >= end:
            break
        if first + len(records) > end:
            records = records[:end - first]
        out.append((first, records, plain))
    return out



def pass_gaps(runs: list[Run], read: int, cursor: Cursor) -> None:
    """Offsets between ``read`` and the runs, or between two runs, hold no message (never
    stored: reserved offsets a crash left unused, a torn write): done with, so that the
    mark-delete position moves on over them."""
    for first, records, _ in runs:
        if first > read:
            cursor.skip(read, first)
        read = first + len(records)



def without_acked(runs: list[Run], cursor: Cursor) -> list[Run]:
    """``runs`` without the records the cursor passes over (acknowledged, or held ahead)."""
    out: list[Run] = []
    for first, records, plain in runs:
        start = None
        for i in range(len(records)):
            if cursor.passes(first + i):
                if start is not None:
                    out.append((first + start, records[start:i], plain))
                    start = None
            elif start is None:
                start = i
        if start is not None:
            out.append((first + start, records[start:] if start else records, plain))
    return out



def split(runs: list[Run], pos: int, n: int) -> list[tuple[int, Sequence[bytes]]]:
    """``n`` records from position ``pos`` of the runs' records laid end to end, as
    ``(first offset, records)`` pieces of the runs they come from."""
    out: list[tuple[int, Sequence[bytes]]] = []
    for first, records, _ in runs:
        if pos >= len(records):
            pos -= len(records)
            continue
        part = records[pos:pos + n]
        out.append((first + pos, part))
        n -= len(part)
        pos = 0
        if not n:
            break
    return out

