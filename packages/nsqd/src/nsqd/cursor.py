"""A channel's cursor into its topic's log (docs/design/storage.md).

``mark_delete``: every offset below it is done with. ``acked``: offsets at or above it done
with too (acknowledged out of order, or skipped: a topic emptied while paused, a job deleted
before it was reached). ``read``: the next offset the channel takes from the log. Between
``mark_delete`` and ``read`` every message not acknowledged is the channel's: in flight,
requeued, deferred, or on its way to the dead letters.

``ahead``: offsets at or above ``read`` the channel holds already (a DPUB or a delayed job,
deferred the moment it was published): reading passes over them, and they are not counted as
unread.

The cursor owns these positions (as Pulsar's ManagedCursor does): others read them, and move
them only through its methods (``ack``, ``skip``, ``advance_read``, ``hold_ahead``,
``move_to``, ``take_extra``).

``extras`` are what a cursor knows of a message beyond its record, for the next start: the
attempts of messages delivered and not done, the due time of deferred ones. They are written
with the cursor (``state``) and given back to the channel when it reads those offsets again
(``take_extra``).

Persistence is the owner's (the topic's task, by ``--sync-every``/``--sync-timeout``, and
``flush`` for an lmstfy DELETE that must be durable before it is answered): concurrent
flushes share one write (a group commit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from functools import partial
from typing import TYPE_CHECKING

import trio

from .ackranges import AckRanges
from .cursorfile import MAX_EXTRAS, CursorState

if TYPE_CHECKING:
    from .cursorfile import CursorJournal


class Cursor:
    __slots__ = ("_ahead", "_extras", "_flush_lock", "_flushed", "_mark_delete", "_read",
                 "_synced", "acked", "changes", "journal")

    def __init__(self, position: int, journal: CursorJournal | None = None) -> None:
        self._mark_delete = position
        self._read = position
        self.acked = AckRanges()
        self._ahead: set[int] = set()
        self._extras: dict[int, tuple[int, int]] = {}  # offset -> (attempts, due ns)
        self.journal = journal  # None: never persisted (ephemeral channels, tests)
        self.changes = 0  # acknowledgements and moves since start
        self._flushed = 0  # ``changes`` when the last persisted state was taken
        self._synced = 0  # ... and fsynced
        self._flush_lock = trio.Lock()

    # -- the positions, read-only: moved by the methods below ----------------------------------
    @property
    def mark_delete(self) -> int:
        return self._mark_delete

    @property
    def read(self) -> int:
        return self._read

    @property
    def ahead(self) -> AbstractSet[int]:
        return self._ahead

    @property
    def extras(self) -> Mapping[int, tuple[int, int]]:
        return self._extras

    def restore(self, state: CursorState, start: int) -> None:
        """Take up where a previous run left (``start``: the earliest offset stored; what is
        below it was done with, whatever the journal says)."""
        self._mark_delete = self._read = max(state.mark_delete, start)
        self.acked.clear()
        for first, end in state.ranges:
            if end > self._mark_delete:
                self.acked.add_range(max(first, self._mark_delete), end)
        self._mark_delete = self._read = self.acked.pop_prefix(self._mark_delete)
        self._extras = {offset: (attempts, due) for offset, attempts, due in state.extras
                       if offset >= self._mark_delete and offset not in self.acked}

    # -- acknowledgements ----------------------------------------------------------------
    def ack(self, offset: int) -> None:
        """``offset`` is done with."""
        md = self._mark_delete
        if offset == md:
            acked = self.acked
            md = self._mark_delete = acked.pop_prefix(md + 1) if acked else md + 1
            if self._read < md:  # a message held ahead of ``read`` (deferred) was the first
                self._read = md
        elif offset > md:
            self.acked.add(offset)
        if self._ahead:
            self._ahead.discard(offset)
        self.changes += 1

    def ack_many(self, offsets: list[int]) -> None:
        """``ack`` of each (FINs in bulk: in order, mark-delete just moves along)."""
        md = self._mark_delete
        acked = self.acked
        for offset in offsets:
            if offset == md:
                md += 1
            elif offset > md:
                acked.add(offset)
        if acked:
            md = acked.pop_prefix(md)
        if self._ahead:
            self._ahead.difference_update(offsets)
        self._mark_delete = md
        if self._read < md:  # as in ``ack``: acknowledged ranges ahead of ``read`` passed
            self._read = md
        self.changes += len(offsets)

    def skip(self, start: int, end: int) -> None:
        """Offsets [start, end) are done with without being read (a topic emptied while
        paused; a job deleted before it was reached)."""
        if end <= self._mark_delete:
            return
        start = max(start, self._mark_delete)
        self.acked.add_range(start, end)
        if self._ahead:
            self._ahead = {o for o in self._ahead if not start <= o < end}
        self._mark_delete = self.acked.pop_prefix(self._mark_delete)
        if self._read < self._mark_delete:
            self._read = self._mark_delete
        self.changes += 1

    def is_done(self, offset: int) -> bool:
        return offset < self._mark_delete or offset in self.acked

    def passes(self, offset: int) -> bool:
        """Reading skips ``offset``: done with, or held ahead."""
        return offset < self._mark_delete or offset in self.acked or offset in self._ahead

    def passed(self, stop: int) -> None:
        """Reading has moved to ``stop``: what was held ahead below it is passed."""
        if self._ahead:
            self._ahead = {o for o in self._ahead if o >= stop}

    def advance_read(self, offset: int) -> None:
        """Reading goes on from ``offset`` (never back: ``move_to`` moves it back). What it
        passes is not acknowledged: those records were taken, or are dropped (an ephemeral
        channel past its memory) or skipped (``skip``)."""
        if offset > self._read:
            self._read = offset

    def hold_ahead(self, offset: int) -> None:
        """The channel holds ``offset`` already (deferred the moment it was published, or
        deferred again at start): reading passes over it."""
        self._ahead.add(offset)

    def move_to(self, offset: int) -> None:
        """Everything before ``offset`` done with, nothing after it (empty, rewind)."""
        self._mark_delete = self._read = offset
        self.acked.clear()
        self._ahead.clear()
        self._extras.clear()
        self.changes += 1

    def unread(self, end: int) -> int:
        """Messages in [read, end) not done with."""
        read = self._read
        if read >= end:
            return 0
        acked = self.acked
        return end - read - (acked.count_in(read, end) if acked else 0) - len(self._ahead)

    def take_extra(self, offset: int) -> tuple[int, int] | None:
        return self._extras.pop(offset, None) if self._extras else None

    # -- persistence ---------------------------------------------------------------------
    def state(self, extras: dict[int, tuple[int, int]] | None = None) -> CursorState:
        """What to persist: the position, the acknowledged ranges, and ``extras`` (the
        channel's, of messages it holds now) with the cursor's own not read back yet."""
        merged = dict(self._extras)
        if extras:
            merged.update(extras)
        items = sorted((o, a, d) for o, (a, d) in merged.items() if o >= self._mark_delete)
        return CursorState(self._mark_delete, self.acked.ranges(), tuple(items[:MAX_EXTRAS]))

    @property
    def dirty(self) -> int:
        """Changes not persisted yet."""
        return self.changes - self._flushed

    async def flush(self, state_of: Callable[[], CursorState] | None = None, *,
                    sync: bool, force: bool = False) -> None:
        """Persist the cursor with every change made before this call (fsynced when
        ``sync``); one write serves every flush that waited meanwhile. ``state_of`` gives the
        state to write (the channel's, with its extras), ``state()`` when not given.

        Raises:
            OSError: the write failed (the caller decides what that means).
        """
        journal = self.journal
        if journal is None:
            return
        wanted = self.changes
        async with self._flush_lock:
            if (self._synced if sync else self._flushed) >= wanted and wanted and not force:
                return
            taken = self.changes
            state = state_of() if state_of is not None else self.state()
            await trio.to_thread.run_sync(partial(journal.append, state, sync=sync))
            self._flushed = max(self._flushed, taken)
            if sync:
                self._synced = max(self._synced, taken)

    async def forget(self) -> None:
        """The channel is gone: its journal is removed (once no flush is writing it)."""
        journal, self.journal = self.journal, None
        if journal is not None:
            async with self._flush_lock:
                await trio.to_thread.run_sync(journal.remove)
