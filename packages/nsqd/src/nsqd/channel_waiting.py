"""Where a channel's WAITING messages wait, and which comes next.

A message waiting is requeued (held apart from the log, each for its turn:
``channel_requeued``), in the channel's own queue (respawned dead letters, messages brought
from Go's files), or in the topic's log past the cursor (read by ``channel_read``); some of
those in the log were deleted while they wait (tombstones). ``Waiting`` holds them all: how
many there are, and the order they come out in (requeued ones once the cursor is past what
they went behind, the own queue likewise, then the log). It changes only when the channel's
``MessageStates`` (``channel_state``) asks it: every move into or out of WAITING is the
states', by ``lifecycle``'s table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from .channel_read import LogReader
from .channel_requeued import Requeued

if TYPE_CHECKING:
    from .backlog import Backlog
    from .channel_limits import Limits
    from .channel_read import Source
    from .cursor import Cursor
    from .inflight import InFlightQueue
    from .message import QueuedMessage
    from .runs import Run
    from .topiclog import TopicLog

__all__ = ["READ_BATCH", "Waiting"]

#: Most records a pump or a pull reads from the log at a time.
READ_BATCH = 4096


class Waiting:
    """A channel's waiting messages: requeued, in its own queue, in the log past its cursor."""

    def __init__(self, topic: Source, cursor: Cursor, in_flight: InFlightQueue,
                 new_own_queue: Callable[[], Backlog], *, limits: Limits, ephemeral: bool,
                 mem_queue_size: int, own: Backlog | None = None) -> None:
        self.topic = topic
        self.cursor = cursor
        self.limits = limits
        self.mem_queue_size = mem_queue_size
        self.own = own  # made with its first message; at start when it has some on disk
        self._new_own_queue = new_own_queue
        self.requeued = Requeued()  # held apart from the log, each for its turn
        # Offsets of messages deleted while waiting (lmstfy's DELETE): they keep their place
        # until reached, as lmstfy's stale ready-list entries do (``size`` counts them, a
        # consume that meets one finds nothing), then are done with.
        self.tombstones: set[int] = set()
        self.reader = LogReader(topic, cursor, in_flight, ephemeral=ephemeral,
                                mem_queue_size=mem_queue_size)

    @property
    def log(self) -> TopicLog:
        return self.topic.log

    @property
    def own_queue(self) -> Backlog:
        if self.own is None:
            self.own = self._new_own_queue()
        return self.own

    # -- how many ------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Messages waiting (NSQ's depth: not in flight, not deferred)."""
        own = len(self.own) if self.own is not None else 0
        return len(self.requeued) + own + self.cursor.unread(self.topic.visible_end)

    @property
    def backend_depth(self) -> int:
        """Those of ``depth`` that are on disk only."""
        on_disk = max(0, self.cursor.unread(min(self.log.written_end, self.topic.visible_end)))
        return on_disk + (self.own.disk_depth if self.own is not None else 0)

    def has_waiting(self) -> bool:
        return (bool(self.requeued) or self._own_has_ready()
                or self.cursor.read < self.topic.visible_end)

    # -- which comes next ----------------------------------------------------------------------
    def _own_has_ready(self) -> bool:
        """The own queue has messages to hand out now, and may (not on a follower of a
        replicated topic)."""
        own = self.own
        return own is not None and own.has_ready() and self.topic.delivers_own

    def own_ready(self) -> bool:
        return self._own_has_ready() and self.requeued.own_turn <= self.cursor.read

    def requeued_ready(self) -> bool:
        return self.requeued.ready(self.cursor.read)

    def room(self) -> int:
        """How far the log may be read before a held-back requeued or respawned message's
        turn comes."""
        first = self.requeued.next_turn()
        turns = [first] if first is not None else []
        if self._own_has_ready():
            turns.append(self.requeued.own_turn)
        return min(turns) - self.cursor.read if turns else READ_BATCH

    def records_fit(self) -> bool:
        """The next messages can go out as the log's records: nothing requeued or of the
        own queue comes first, and nothing needs a look at each (an attempt limit, state
        the cursor kept for them, a tombstone)."""
        return (not self.requeued_ready() and not self.own_ready()
                and not self.limits.attempt_limit
                and not self.cursor.extras and not self.tombstones)

    def read_log(self, n: int) -> list[Run] | None:
        """Up to ``n`` records from the cursor on (``LogReader.read``)."""
        return self.reader.read(n)

    def next(self, want: int, decoded: Callable[[list[Run]], list[QueuedMessage]]
             ) -> list[QueuedMessage] | None:
        """Up to ``want`` of the messages whose turn it is, taken out (``decoded`` makes
        those of the log messages, and may keep some back: it can return none); None when
        none waits now. Requeued ones once the cursor is past what they went behind
        (``channel_requeued``), the own queue likewise, then the log, never read past a
        held-back message's turn: a count of n takes what n takes of one would, in their
        order (and peek shows: ``channel_pull``); the log read to its end releases those
        held back."""
        while True:
            if self.requeued_ready():
                return self.requeued.take(want, self.cursor.read)
            if self.own_ready():
                return self.own.take(want)  # type: ignore[union-attr]
            runs = self.read_log(min(want, READ_BATCH, self.room()))
            if runs:
                return decoded(runs)
            if runs is None or not self.requeued.release():
                return None

    # -- coming back ---------------------------------------------------------------------------
    def put_back(self, msgs: list[QueuedMessage]) -> None:
        """``msgs`` waiting again, held apart, at the back of the queue: behind what NSQ's
        memory queue held, or (``requeue_behind``: lmstfy's ready list) behind every message
        waiting."""
        msgs = self.reader.coming_back(msgs)  # (after a rewind the log delivers some again)
        self.requeued.add(msgs, self.turn())

    def turn(self) -> int:
        """The turn a message coming back now waits for: behind what the memory queue holds
        (up to --mem-queue-size), or on lmstfy's queues behind every message waiting."""
        end = self.topic.visible_end
        if self.limits.requeue_behind:
            return end
        return min(end, self.cursor.read + self.mem_queue_size)

    def respawned(self) -> None:
        """Dead letters were respawned into the own queue: on lmstfy's queues they go behind
        what is waiting now."""
        if self.limits.requeue_behind:
            self.requeued.respawned(self.topic.visible_end)

    async def unread_records(self) -> AsyncIterator[tuple[int, bytes]]:
        """Each record waiting in the log (offset, record), from the cursor's read position to
        what is visible now, but those the cursor passes (done with, or deferred already:
        held ahead); the read position moved past each run once its records are given
        (lmstfy's destroy: ``MessageStates.purge_ready``)."""
        cursor = self.cursor
        end = self.topic.visible_end
        while cursor.read < end:
            runs = await self.log.read_at(cursor.read, READ_BATCH)
            if not runs:
                break
            for first, records, _ in runs:
                for i, record in enumerate(records):
                    offset = first + i
                    if offset >= end:
                        break
                    if not cursor.passes(offset):
                        yield offset, record
                cursor.advance_read(min(first + len(records), end))
                cursor.passed(cursor.read)
