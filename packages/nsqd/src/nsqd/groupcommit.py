"""A topic log's group commit: appends that must be written wait in order, and the next write
takes every one waiting when it starts, as one group (one write, one fsync under
``--sync-every=1``), under the log's I/O lock (docs/design/storage.md, "When things are
written").

An append is a leader's (``at`` None: the offsets follow on from the end) or a follower's (the
offsets it is given, gaps kept); ``place`` gives each of a group its first offset in the order
they came, and refuses (``OffsetOverlap``) a follower's that asks for offsets below the end
before it. What is written, and how, is the log's (``topiclog``): this module keeps the queue,
the order and the outcome of each append.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import trio

from .errors import LogError, OffsetOverlap

__all__ = ["Append", "GroupCommit", "overlap", "place", "refuse"]


class Append:
    """One append waiting for a write: its records, and what became of them."""

    __slots__ = ("at", "done", "error", "first", "plain", "records")

    def __init__(self, records: Sequence[bytes], plain: bool, at: int | None) -> None:
        self.records = records
        self.plain = plain
        self.at = at  # the offset asked for (a follower's append), None: the log's end
        self.first = -1
        self.done = False
        self.error: LogError | None = None

    def place(self, first: int) -> None:
        """Its records are at ``first`` on."""
        self.first = first

    def refuse(self, error: LogError) -> None:
        """Its records are not stored: its caller gets ``error``."""
        self.error = error

    def finish(self) -> None:
        """A write took it (stored, or refused): its caller goes on."""
        self.done = True


class GroupCommit:
    """The appends waiting for a write (``waiting``), committed one group at a time by
    ``commit`` under ``lock``."""

    __slots__ = ("_commit", "_lock", "committing", "waiting")

    def __init__(self, lock: trio.Lock,
                 commit: Callable[[list[Append]], Awaitable[None]]) -> None:
        self._lock = lock
        #: Stores a group (lock held): places each (``place``), sets its ``error`` when it
        #: is refused; every one of the group is done after it, stored or not.
        self._commit = commit
        self.waiting: deque[Append] = deque()
        self.committing = False

    @property
    def idle(self) -> bool:
        """No append waits and none is being written: an append may go on ahead (into
        memory) without breaking the order."""
        return not self.waiting and not self.committing

    async def submit(self, records: Sequence[bytes], plain: bool, at: int | None) -> int:
        """Wait for the write that takes this append (the next one to start); the offset of
        its first record.

        Raises:
            LogError: it was refused (``OffsetOverlap``) or could not be written; none of
                its records is stored.
        """
        request = Append(records, plain, at)
        self.waiting.append(request)
        try:
            async with self._lock:
                if not request.done:
                    await self._commit_waiting()
        finally:
            if not request.done:  # cancelled while waiting: never stored
                self.waiting.remove(request)
        if request.error is not None:
            raise request.error
        return request.first

    async def _commit_waiting(self) -> None:
        """Store every waiting append (lock held)."""
        group = list(self.waiting)
        self.waiting.clear()
        self.committing = True
        try:
            await self._commit(group)
        finally:
            self.committing = False
            for request in group:
                request.finish()

    def refuse_waiting(self, error: LogError) -> None:
        """Every waiting append is refused with ``error`` (the log deleted)."""
        for request in self.waiting:
            request.refuse(error)
            request.finish()
        self.waiting.clear()


def refuse(group: list[Append], error: LogError) -> None:
    for request in group:
        request.refuse(error)


def place(group: list[Append], end: int) -> tuple[list[Append], int]:
    """The offsets of each append of the group, in order (``first``), from the log's ``end``;
    those a follower's append asks for below the end before it are refused
    (``OffsetOverlap``). The appends placed, and the end after them."""
    placed = []
    for request in group:
        if request.at is None:
            request.place(end)
        elif request.at < end:
            request.refuse(overlap(request.at, len(request.records), end))
            continue
        else:
            request.place(request.at)
        end = request.first + len(request.records)
        placed.append(request)
    return placed, end


def overlap(first: int, n: int, end: int) -> OffsetOverlap:
    return OffsetOverlap(f"offsets {first}-{first + n - 1 if n else first} overlap the log, "
                         f"whose end is {end}")
