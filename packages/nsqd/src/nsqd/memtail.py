"""A topic log's memory tail (docs/design/storage.md): its newest records, in memory.

Records from ``written_end`` on are *unwritten* (NSQ's memory queue: at most
``--mem-queue-size`` of them, written when more come or at a clean stop); records below it
are on disk (or were never to be written: every cursor passed them first) and stay as a
cache, up to ``TAIL_CACHE_BYTES``, so that a consume right after a publish reads memory even
with ``--mem-queue-size=0``. Gaps between records are allowed (a follower's append keeps its
leader's), so nothing here counts records by subtracting offsets.

The log decides when records come, are written and go (``topiclog``); this keeps the count.
Used on the Trio thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from .runs import RunStore

__all__ = ["TAIL_CACHE_BYTES", "MemoryTail"]

#: Written records kept in memory as a cache (bytes).
TAIL_CACHE_BYTES = 16 << 20


class MemoryTail(RunStore):
    """The records of a ``RunStore``, and which of them are written."""

    __slots__ = ("unwritten", "written_end")

    def __init__(self) -> None:
        super().__init__()
        self.written_end = 0  # every offset below is on disk, or was never to be written
        self.unwritten = 0  # records held at offsets >= written_end

    def add(self, first: int, records: Sequence[bytes], plain: bool) -> None:
        """New records, unwritten, after everything held."""
        self.append(first, records, plain)
        self.unwritten += len(records)

    def oldest_unwritten(self, n: int) -> list[tuple[int, Sequence[bytes]]]:
        """The ``n`` oldest unwritten records, as runs (to write them)."""
        return [(first, records) for first, records, _ in self.read(self.written_end, n)]

    def unwritten_runs(self) -> list[tuple[int, Sequence[bytes]]]:
        """Every unwritten record, as runs."""
        return self.oldest_unwritten(self.unwritten)

    def written(self, end: int, n: int) -> None:
        """The ``n`` oldest unwritten records, the last of them below ``end``, are written."""
        self.written_end = end
        self.unwritten -= n

    def written_from(self, offset: int) -> None:
        """Nothing is held; offsets below ``offset`` are on disk or never to be written (a
        log opened, its end moved on)."""
        assert not self, "the tail holds records"
        self.written_end = offset

    def skip_below(self, needed: int) -> None:
        """Unwritten records below ``needed`` (every durable cursor passed them) are never
        written: they go."""
        if needed > self.written_end:
            self.unwritten -= self.count_between(self.written_end, needed)
            self.written_end = needed
            self.drop_before(needed)

    def drop_oldest(self, n: int) -> int:
        """A log in memory only: its ``n`` oldest records go (what does not fit, as NSQ
        drops); how many did."""
        dropped = self.drop_first(n)
        self.unwritten = self.count
        return dropped

    def trim(self, needed: int, *, keep_written: bool, memory_only: bool) -> None:
        """Drop what nobody needs (below ``needed``; in a log with files, only what is
        written, and nothing of that when ``keep_written``: a retention), and, written,
        what is past ``TAIL_CACHE_BYTES``."""
        if not self:
            return
        if memory_only:
            self.drop_before(needed)
            self.unwritten = self.count
            return
        written_end = self.written_end
        keep = needed if not keep_written else 0
        if keep > self.start and keep <= written_end:
            self.drop_before(keep)
        elif keep > written_end:
            self.drop_before(written_end)
        while self and self.start < written_end and self.bytes > TAIL_CACHE_BYTES:
            self.drop_before(min(written_end, self.start + max(self.count // 4, 1)))

    def clear(self) -> None:
        super().clear()
        self.unwritten = 0
