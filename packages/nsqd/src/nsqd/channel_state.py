"""A channel's state, and how it takes its next messages (docs/design/storage.md).

A channel is a cursor into its topic's log, shared by its subscribers. It takes messages, in
order, from: those requeued to it (REQ, timeouts, a consumer gone, deferred ones now due), its
own queue (respawned dead letters, messages brought from Go's files), then its topic's log
from its cursor. What becomes of each is ``lifecycle.verdict``'s to say; the channel acts on
it (``_take``, ``_set_aside``). This module holds that state and the taking;
``channel_dead`` adds the dead letters' front door, ``channel_pull`` HTTP pulling and lmstfy's
(peek, find, delete, purge), and ``channel.Channel`` delivery to TCP consumers and the answers
from them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import trio
from nsq_common import is_ephemeral

from . import lifecycle
from .inflight import DeferredQueue, InFlightQueue
from .lifecycle import Event
from .message import OWN
from .record import decode_record, decode_records
from .runs import cut, pass_gaps, without_acked

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .backlog import Backlog
    from .clock import Clock
    from .cursor import Cursor
    from .deadletters import DeadLetters
    from .e2e import LatencyStream
    from .message import QueuedMessage
    from .runs import Run
    from .topiclog import TopicLog


#: The owner (``client_id``) of messages in flight to HTTP pullers (client ids start at 1).
PULLER = -1
#: Most records a pump or a pull reads from the log at a time.
READ_BATCH = 4096
#: The due time that marks a tombstone among a cursor's extras.
TOMBSTONE = -1


class Consumer(Protocol):
    """What a channel needs of a subscribed client (``client.Client`` is one; tests use
    fakes): its id, its RDY window, its counters, a way to send, and a way to drop it."""

    id: int
    in_flight: int
    message_count: int
    finish_count: int
    requeue_count: int
    msg_timeout: float
    sample_rate: int
    disconnect: Callable[[], None]

    def ready_slots(self) -> int: ...

    def send_messages(self, msgs: list[QueuedMessage]) -> None: ...

    def send_records(self, records: Sequence[bytes]) -> None:
        """Send plain records (see ``record``) as message frames, one attempt more."""
        ...



class Source(Protocol):
    """What a channel needs of its topic: the log, and how far it may read in it."""

    name: str
    log: TopicLog
    sync_every: int

    @property
    def visible_end(self) -> int:
        """The log's end, or where the topic was paused."""
        ...

    def persist_soon(self) -> None: ...

    async def persist_cursors(self, *, in_flight: bool = False) -> None: ...



class ChannelState:
    """A channel's queues, counters and cursor, and how it takes its next messages."""

    def __init__(self, topic: Source, name: str, *, cursor: Cursor,
                 clock: Clock, max_msg_timeout: float, mem_queue_size: int = 10000,
                 own: Backlog | None = None, e2e: LatencyStream | None = None) -> None:
        self.topic = topic
        self.topic_name = topic.name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.cursor = cursor
        self.clock = clock
        self.max_msg_timeout = max_msg_timeout
        self.mem_queue_size = mem_queue_size
        self.own = own  # made with its first message; at start when it has some on disk
        self.e2e = e2e
        self.requeued: deque[QueuedMessage] = deque()
        # A message coming back goes to the back of the queue, as in nsqd: behind what its
        # memory queue held (up to --mem-queue-size), or, with ``requeue_behind`` (lmstfy's
        # ready list), behind every message waiting when it came back. For each requeued
        # message in order, the offset the cursor must reach before it goes out again.
        self.requeue_behind = False
        self._requeued_after: deque[int] = deque()
        self._own_after = 0  # the same for what was last respawned into the own queue
        # Offsets of messages deleted while waiting (lmstfy's DELETE): they keep their place
        # until reached, as lmstfy's stale ready-list entries do (``size`` counts them, a
        # consume that meets one finds nothing), then are done with.
        self.tombstones: set[int] = set()
        # Ids of dead letters deleted (lmstfy's DELETE of a dead job): as in lmstfy, the entry
        # stays in the dead letters (counted, respawned) but the job is gone (``find``).
        self.dead_deleted: set[bytes] = set()
        self.stale_popped = False  # the last take with ``stop_at_stale`` stopped at one
        # A rewind while messages of the log are in flight: their offsets (to their ids). A
        # record read again while its message is still in flight is passed over (its one
        # copy is the one in flight, which its FIN acknowledges or its timeout requeues); one
        # coming back before the cursor reads it again is dropped (the log delivers it).
        self._rewound: dict[int, bytes] = {}
        self.in_flight = InFlightQueue()
        self.deferred = DeferredQueue()
        self.clients: dict[int, Consumer] = {}
        self.paused = False
        self.deleted = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.expired_count = 0
        self._rotation = 0
        # Attempt limits (beyond NSQ): this channel's own (0: none), else nsqd's --max-attempts.
        self.max_attempts = 0
        self.default_max_attempts = 0
        self.dead_letter_expired = False  # expired messages to the dead letters, not dropped
        self._dead_letters: DeadLetters | None = None  # made with the first dead letter
        # HTTP pulling: the ttr of each message pulled and still in flight, and the event
        # that pullers waiting for messages sleep on (made by the first of them)
        self._pulled_ttr: dict[bytes, float] = {}
        self._pullers_wakeup: trio.Event | None = None

    # -- what the broker gives (through ``Channel``, which knows it) --------------------------
    def _mark_dirty(self) -> None:
        """Have the broker pump this channel soon."""
        raise NotImplementedError

    def _new_dead_letters(self) -> DeadLetters:
        raise NotImplementedError

    def _new_own_queue(self) -> Backlog:
        raise NotImplementedError

    @property
    def log(self) -> TopicLog:
        return self.topic.log

    def changed(self) -> None:
        """Messages may be deliverable now: the broker pumps the channel, waiting HTTP
        pullers look again."""
        self._mark_dirty()
        self.wake_pullers()

    def wake_pullers(self) -> None:
        if self._pullers_wakeup is not None:
            self._pullers_wakeup.set()
            self._pullers_wakeup = None

    @property
    def depth(self) -> int:
        """Messages waiting (NSQ's depth: not in flight, not deferred)."""
        own = len(self.own) if self.own is not None else 0
        return len(self.requeued) + own + self.cursor.unread(self.topic.visible_end)

    @property
    def backend_depth(self) -> int:
        """Those of ``depth`` that are on disk only."""
        on_disk = max(0, min(self.log.written_end, self.topic.visible_end) - self.cursor.read)
        return on_disk + (self.own.disk_depth if self.own is not None else 0)

    def _has_waiting(self) -> bool:
        own = self.own
        return (bool(self.requeued) or (own is not None and own.has_ready())
                or self.cursor.read < self.topic.visible_end)

    def _read_log(self, n: int) -> list[Run] | None:
        """Up to ``n`` records from the cursor on, the cursor moved past them (those it
        passes over skipped: acknowledged, or held ahead); empty at the end of what it may
        read; None while they are read from disk (the log wakes the channel)."""
        cursor = self.cursor
        end = self.topic.visible_end
        while True:
            read = cursor.read
            if read >= end:
                return []
            if self.ephemeral and end - read > self.mem_queue_size:
                read = cursor.read = end - self.mem_queue_size  # past its memory: dropped
            runs = self.log.read(read, min(n, end - read))
            if not runs:
                if runs is not None:  # never stored (lost to a crash or a torn write): passed
                    cursor.skip(read, end)
                    cursor.read = end
                return runs
            last_first, last_records, _ = runs[-1]
            stop = last_first + len(last_records)
            if stop > end:  # never past where the topic was paused
                runs = cut(runs, end)
                stop = end
            if runs[0][0] > read or len(runs) > 1:
                pass_gaps(runs, read, cursor)
            cursor.read = stop
            if self._rewound:
                runs = self._without_in_flight(runs)
            acked = cursor.acked
            if not cursor.ahead and not (acked and acked.count_in(read, stop)):
                if runs:
                    return runs
                continue
            runs = without_acked(runs, cursor)
            cursor.passed(stop)
            if runs:
                return runs

    def _without_in_flight(self, runs: list[Run]) -> list[Run]:
        """``runs`` without the records whose messages are still in flight from before a
        rewind (see ``_rewound``)."""
        rewound = self._rewound
        out: list[Run] = []
        for first, records, plain in runs:
            start = 0
            for i in range(len(records)):
                message_id = rewound.pop(first + i, None)
                if message_id is not None and message_id in self.in_flight:
                    if i > start:
                        out.append((first + start, records[start:i], plain))
                    start = i + 1
            if start < len(records):
                out.append((first + start, records[start:] if start else records, plain))
        return out

    def _take(self, n: int, *, stop_at_stale: bool = False) -> list[QueuedMessage]:
        """Up to ``n`` messages to deliver now, each with its verdict acted on (deferred,
        expired, dead-lettered ones kept apart): requeued ones once the cursor is past what
        they went behind (see ``_requeued_after``), the own queue, then the log.
        ``stop_at_stale``: stop after a message deleted or expired while waiting (a consume
        of lmstfy's that pops one finds nothing)."""
        out: list[QueuedMessage] = []
        wall = self.clock.wall_ns()
        limit = self.max_attempts or self.default_max_attempts
        self.stale_popped = False
        while len(out) < n:
            want = 1 if stop_at_stale else n - len(out)
            if self.requeued and self._requeued_ready():
                requeued = self.requeued
                after = self._requeued_after
                batch: list[QueuedMessage] = []
                while requeued and len(batch) < want and after[0] <= self.cursor.read:
                    batch.append(requeued.popleft())
                    after.popleft()
            elif self._own_ready():
                batch = self.own.take(want)  # type: ignore[union-attr]
            else:
                # never read past a held-back message's turn: a count of n takes what n
                # consumes of one would, in their order (and peek shows: ``_waiting``)
                runs = self._read_log(min(want, READ_BATCH, self._room()))
                if not runs:
                    if runs is not None and (self.requeued or self._own_after):
                        self._requeued_after = deque([0] * len(self.requeued))
                        self._own_after = 0
                        continue  # the log is read to its end: those held back now
                    break
                batch = self._decoded(runs)
            for msg in batch:
                event = self._verdict(msg, wall, limit)
                if event is Event.DELIVER:
                    out.append(msg)
                else:
                    self._set_aside(msg, event)
                    if stop_at_stale and event in (Event.DELETE, Event.EXPIRE):
                        self.stale_popped = True
                        return out
        return out

    def _room(self) -> int:
        """How far the log may be read before a held-back requeued or respawned message's
        turn comes."""
        turns = [self._requeued_after[0]] if self.requeued else []
        if self.own is not None and self.own.has_ready():
            turns.append(self._own_after)
        return min(turns) - self.cursor.read if turns else READ_BATCH

    def _own_ready(self) -> bool:
        own = self.own
        return own is not None and own.has_ready() and self._own_after <= self.cursor.read

    def _requeued_ready(self) -> bool:
        return self._requeued_after[0] <= self.cursor.read

    def _verdict(self, msg: QueuedMessage, wall: int, limit: int) -> Event:
        if self.tombstones and msg.offset in self.tombstones:
            return Event.DELETE
        return lifecycle.verdict(msg, wall, limit)

    def _decoded(self, runs: list[Run]) -> list[QueuedMessage]:
        """Messages of ``runs``, with what the cursor saved for them at the last shutdown
        (their attempts; a REQ's delay still running puts them back in ``deferred``)."""
        msgs: list[QueuedMessage] = []
        for first, records, _ in runs:
            msgs += decode_records(records, first)
        cursor = self.cursor
        if not cursor.extras:
            return msgs
        now = self.clock.now()
        wall = self.clock.wall_ns()
        kept: list[QueuedMessage] = []
        for msg in msgs:
            extra = cursor.take_extra(msg.offset)
            if extra is not None:
                attempts, due = extra
                msg.attempts = max(msg.attempts, attempts)
                if due == TOMBSTONE:
                    self.tombstones.add(msg.offset)
                elif due > wall:
                    msg.deadline = now + (due - wall) / 1e9
                    self.deferred.add(msg)
                    continue
            kept.append(msg)
        return kept

    def _set_aside(self, msg: QueuedMessage, event: Event) -> None:
        """A message taken that is not delivered now: DEFER, EXPIRE, EXHAUST, or DELETE (a
        tombstone reached)."""
        if event is Event.DELETE:
            self.tombstones.discard(msg.offset)
            self._done(msg)
        elif event is Event.DEFER:
            msg.deadline = self.clock.now() + (msg.due - self.clock.wall_ns()) / 1e9
            self.deferred.add(msg)
        elif event is Event.EXPIRE:
            self.expired_count += 1
            if self.dead_letter_expired:
                self._to_dead_letters([msg])
            else:
                self._done(msg)
        else:
            self._to_dead_letters([msg])

    def _put_in_flight(self, msgs: list[QueuedMessage], owner: int, now: float, deadline: float
                       ) -> None:
        """One more delivery of each of ``msgs``, in flight to ``owner`` until ``deadline``."""
        for msg in msgs:
            if msg.attempts < 65535:
                msg.attempts += 1
            msg.client_id = owner
            msg.delivered = now
            msg.deadline = deadline
        self.in_flight.add_many(msgs, deadline)

    def _done(self, msg: QueuedMessage) -> None:
        """DONE (or EXPIRED, or stored as a dead letter): acknowledged where it came from."""
        if msg.offset == OWN:
            if self.own is not None:
                self.own.ack(msg.id)
        else:
            self.cursor.ack(msg.offset)

    def _to_dead_letters(self, msgs: list[QueuedMessage]) -> None:
        self.dead_letters.pending.extend(msgs)
        self._mark_dirty()  # the broker stores them after this pump

    @property
    def dead_letters(self) -> DeadLetters:
        if self._dead_letters is None:
            self._dead_letters = self._new_dead_letters()
        return self._dead_letters

    @property
    def dead_letters_if_any(self) -> DeadLetters | None:
        return self._dead_letters

    @property
    def dead_letters_pending(self) -> bool:
        return self._dead_letters is not None and bool(self._dead_letters.pending)

    @property
    def dead_letter_count(self) -> int:
        return len(self._dead_letters) if self._dead_letters is not None else 0

    @property
    def own_queue(self) -> Backlog:
        if self.own is None:
            self.own = self._new_own_queue()
        return self.own

    def _finished(self, msg: QueuedMessage) -> None:
        """A FIN (over TCP or HTTP): the message is done with, its latency observed."""
        self._done(msg)
        if self.e2e is not None:
            self.e2e.observe(self.clock.wall_ns() - msg.timestamp)

    def _put_back(self, msg: QueuedMessage, delay: float, now: float) -> None:
        """A REQ (over TCP or HTTP): back to the queue at once, or deferred by ``delay``."""
        self.requeue_count += 1
        if delay > 0:
            msg.deadline = now + delay
            self.deferred.add(msg)
        else:
            self._requeue([msg])

    def _requeue(self, msgs: list[QueuedMessage]) -> None:
        """WAITING again: REQ, a timeout, a consumer gone, a deferral due."""
        if self._rewound:  # the log delivers these again anyway (see ``_rewound``)
            read, rewound = self.cursor.read, self._rewound
            msgs = [m for m in msgs if m.offset < read or rewound.pop(m.offset, None) is None]
        self.requeued.extend(msgs)
        end = self.topic.visible_end
        behind = end if self.requeue_behind else min(end, self.cursor.read + self.mem_queue_size)
        self._requeued_after.extend([behind] * len(msgs))
        self.changed()

    def _restart_timeout(self, msg: QueuedMessage, timeout: float, now: float) -> None:
        """TOUCH: ``timeout`` again from now, never past delivery + max-msg-timeout."""
        self.in_flight.remove(msg.id)
        msg.deadline = min(now + timeout, msg.delivered + self.max_msg_timeout)
        self.in_flight.add(msg)

    def _find_dead(self, message_id: bytes) -> QueuedMessage | None:
        """The dead letter ``message_id``, unless it was deleted."""
        dead = self.dead_letters_if_any
        if dead is None or message_id in self.dead_deleted:
            return None
        for msg in dead.peek(len(dead)):
            if msg.id == message_id:
                return msg
        return None

    def _unread_runs(self, n: int) -> list[Run]:
        """Up to ``n`` records the cursor has not reached yet that are in memory, without
        those done with (never reads the disk, never moves the cursor)."""
        cursor = self.cursor
        end = self.topic.visible_end
        runs = self.log.read(cursor.read, min(n, end - cursor.read)) if cursor.read < end else []
        if not runs:
            return []
        runs = cut(runs, end)
        if cursor.acked or cursor.ahead:
            runs = without_acked(runs, cursor)
        return runs

    def _waiting(self, n: int) -> Iterator[QueuedMessage]:
        """What would be delivered next, in order, without taking it: ``_take``'s order,
        played on a copy of the cursor's position. A requeued message (a deferral come due,
        a timeout) waits until the log is read past what it went behind, a respawned one
        (the own queue) the same; at the log's end (what is in memory) the rest of both."""
        requeued = list(zip(self._requeued_after, self.requeued, strict=True))
        own = self.own.peek(n) if self.own is not None else []
        own_after = self._own_after
        read = self.cursor.read
        r = o = 0
        for msg in self._decoded_copy(self._unread_runs(n)):
            while True:
                if r < len(requeued) and requeued[r][0] <= read:
                    yield requeued[r][1]
                    r += 1
                elif o < len(own) and own_after <= read:
                    yield own[o]
                    o += 1
                else:
                    break
            read = msg.offset + 1
            yield msg
        yield from (msg for _, msg in requeued[r:])
        yield from own[o:]

    def _decoded_copy(self, runs: list[Run]) -> list[QueuedMessage]:
        out: list[QueuedMessage] = []
        extras = self.cursor.extras
        for first, records, _ in runs:
            for i, record in enumerate(records):
                msg = decode_record(record, first + i)
                if extras and msg.offset in extras:
                    msg.attempts = max(msg.attempts, extras[msg.offset][0])
                out.append(msg)
        return out

    def _take_pulled(self, message_id: bytes) -> QueuedMessage | None:
        msg = self.in_flight.get(message_id)
        if msg is None or msg.client_id != PULLER:
            return None
        self.in_flight.remove(message_id)
        del self._pulled_ttr[message_id]
        return msg
