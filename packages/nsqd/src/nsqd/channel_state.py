"""The one owner of a channel's message states (docs/design/storage.md).

A message of a channel is in one of ``lifecycle.State``: WAITING (in the log past the cursor's
read position, requeued, or in the channel's own queue), DEFERRED, IN_FLIGHT, or an end (DONE,
EXPIRED, DEAD). Which one is which collection holds it; ``MessageStates`` holds them all, and
every change of a message's state is one of its methods, which asks ``lifecycle.after``: an
event the table does not allow raises ``lifecycle.IllegalTransition`` (a bug).
The rest of the channel (``channel.Channel``, its TCP delivery ``channel_delivery``, its HTTP
pulling ``channel_pull``, its dead letters ``channel_dead``) asks it, never the collections.

It takes messages, in order, from: those requeued (REQ, timeouts, a consumer gone, deferred
ones now due), the own queue (respawned dead letters, messages brought from Go's files), then
the topic's log from the cursor (``channel_read``). What becomes of each is
``lifecycle.verdict``'s to say; this acts on it (``take``, ``set_aside``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from . import lifecycle
from .channel_read import LogReader, Source
from .channel_requeued import Requeued
from .errors import NotOwner
from .inflight import DeferredQueue, InFlightQueue, entry_id, entry_offset, entry_timestamp
from .lifecycle import Event, State
from .message import OWN
from .record import decode_records

if TYPE_CHECKING:
    from .backlog import Backlog
    from .clock import Clock
    from .cursor import Cursor
    from .cursorfile import CursorState
    from .deadletters import DeadLetters
    from .e2e import LatencyStream
    from .inflight import Delivery
    from .message import QueuedMessage
    from .runs import Run
    from .topiclog import TopicLog

__all__ = ["PULLER", "READ_BATCH", "TOMBSTONE", "Host", "Limits", "MessageStates", "Source"]

#: The owner (``client_id``) of messages in flight to HTTP pullers (client ids start at 1).
PULLER = -1
#: Most records a pump or a pull reads from the log at a time.
READ_BATCH = 4096
#: The due time that marks a tombstone among a cursor's extras.
TOMBSTONE = -1

#: Told of every transition: the state before, the event, the state after, how many messages.
Observer = Callable[[State, Event, State, int], None]


class Host(Protocol):
    """What the states need of their channel: to be pumped, to tell everyone waiting, and its
    private queues, made when first needed (by the broker)."""

    def mark_dirty(self) -> None: ...

    def changed(self) -> None: ...

    def new_dead_letters(self) -> DeadLetters: ...

    def new_own_queue(self) -> Backlog: ...


class Limits:
    """A channel's settings beyond NSQ that decide verdicts: its attempt limit (0: none, then
    nsqd's ``--max-attempts``), expired messages kept as dead letters, and where a message
    coming back waits (``requeue_behind``: behind every message waiting, lmstfy's ready list;
    else behind what NSQ's memory queue held)."""

    __slots__ = ("dead_letter_expired", "default_max_attempts", "max_attempts",
                 "requeue_behind")

    def __init__(self, default_max_attempts: int = 0) -> None:
        self.max_attempts = 0
        self.default_max_attempts = default_max_attempts
        self.dead_letter_expired = False
        self.requeue_behind = False

    @property
    def attempt_limit(self) -> int:
        return self.max_attempts or self.default_max_attempts

    def update(self, *, max_attempts: int | None, default_max_attempts: int | None,
               dead_letter_expired: bool | None, requeue_behind: bool | None) -> bool:
        """Change the settings given (None: as it is); whether one changed."""
        before = (self.max_attempts, self.default_max_attempts, self.dead_letter_expired,
                  self.requeue_behind)
        if max_attempts is not None:
            self.max_attempts = max_attempts
        if default_max_attempts is not None:
            self.default_max_attempts = default_max_attempts
        if dead_letter_expired is not None:
            self.dead_letter_expired = dead_letter_expired
        if requeue_behind is not None:
            self.requeue_behind = requeue_behind
        return before != (self.max_attempts, self.default_max_attempts,
                          self.dead_letter_expired, self.requeue_behind)


class MessageStates:
    """A channel's messages, by state, and every move between states."""

    def __init__(self, topic: Source, cursor: Cursor, host: Host, *, clock: Clock,
                 limits: Limits, ephemeral: bool, mem_queue_size: int, max_msg_timeout: float,
                 own: Backlog | None = None, e2e: LatencyStream | None = None) -> None:
        self.topic = topic
        self.cursor = cursor
        self.host = host
        self.clock = clock
        self.limits = limits
        self.mem_queue_size = mem_queue_size
        self.max_msg_timeout = max_msg_timeout
        self.own = own  # made with its first message; at start when it has some on disk
        self.e2e = e2e
        self.observer: Observer | None = None
        self.requeued = Requeued()  # WAITING, held apart from the log, each for its turn
        # Offsets of messages deleted while waiting (lmstfy's DELETE): they keep their place
        # until reached, as lmstfy's stale ready-list entries do (``size`` counts them, a
        # consume that meets one finds nothing), then are done with.
        self.tombstones: set[int] = set()
        # Ids of dead letters deleted (lmstfy's DELETE of a dead job): as in lmstfy, the entry
        # stays in the dead letters (counted, respawned) but the job is gone (``find``).
        self.dead_deleted: set[bytes] = set()
        self.stale_popped = False  # the last take with ``stop_at_stale`` stopped at one
        self.in_flight = InFlightQueue()
        self.deferred = DeferredQueue()
        self.pulled_ttr: dict[bytes, float] = {}  # of each message in flight to a puller
        self._dead_letters: DeadLetters | None = None  # made with the first dead letter
        self.reader = LogReader(topic, cursor, self.in_flight, ephemeral=ephemeral,
                                mem_queue_size=mem_queue_size)
        self.requeue_count = 0
        self.timeout_count = 0
        self.expired_count = 0

    # -- the table ---------------------------------------------------------------------------
    def _move(self, state: State, event: Event, n: int = 1) -> State:
        """The state ``event`` moves ``n`` messages in ``state`` to, by the table.

        Raises:
            lifecycle.IllegalTransition: the table does not allow it (nothing has moved).
        """
        to = lifecycle.after(state, event)
        if self.observer is not None and n:
            self.observer(state, event, to, n)
        return to

    # -- what waits --------------------------------------------------------------------------
    @property
    def log(self) -> TopicLog:
        return self.topic.log

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

    def has_waiting(self) -> bool:
        own = self.own
        return (bool(self.requeued) or (own is not None and own.has_ready())
                or self.cursor.read < self.topic.visible_end)

    def own_ready(self) -> bool:
        own = self.own
        return (own is not None and own.has_ready()
                and self.requeued.own_turn <= self.cursor.read)

    def requeued_ready(self) -> bool:
        return self.requeued.ready(self.cursor.read)

    def room(self) -> int:
        """How far the log may be read before a held-back requeued or respawned message's
        turn comes."""
        first = self.requeued.next_turn()
        turns = [first] if first is not None else []
        if self.own is not None and self.own.has_ready():
            turns.append(self.requeued.own_turn)
        return min(turns) - self.cursor.read if turns else READ_BATCH

    def records_fit(self) -> bool:
        """The next messages can go out as the log's records: nothing requeued or of the
        own queue comes first, and nothing needs a look at each (an attempt limit, state
        the cursor kept for them, a tombstone)."""
        return (not self.requeued_ready() and not self.own_ready()
                and not self.limits.attempt_limit
                and not self.cursor.extras and not self.tombstones)

    @property
    def own_queue(self) -> Backlog:
        if self.own is None:
            self.own = self.host.new_own_queue()
        return self.own

    # -- taking: WAITING to a verdict --------------------------------------------------------
    def read_log(self, n: int) -> list[Run] | None:
        """Up to ``n`` records from the cursor on (``LogReader.read``)."""
        return self.reader.read(n)

    def take(self, n: int, *, stop_at_stale: bool = False) -> list[QueuedMessage]:
        """Up to ``n`` messages to deliver now, each with its verdict acted on (deferred,
        expired, dead-lettered ones kept apart): requeued ones once the cursor is past what
        they went behind (``channel_requeued``), the own queue, then the log. The caller
        puts those returned in flight (``put_in_flight``). ``stop_at_stale``: stop after a
        message deleted or expired while waiting (a consume of lmstfy's that pops one finds
        nothing)."""
        out: list[QueuedMessage] = []
        wall = self.clock.wall_ns()
        limit = self.limits.attempt_limit
        self.stale_popped = False
        while len(out) < n:
            want = 1 if stop_at_stale else n - len(out)
            if self.requeued_ready():
                batch = self.requeued.take(want, self.cursor.read)
            elif self.own_ready():
                batch = self.own.take(want)  # type: ignore[union-attr]
            else:
                # never read past a held-back message's turn: a count of n takes what n
                # consumes of one would, in their order (and peek shows: ``channel_pull``)
                runs = self.read_log(min(want, READ_BATCH, self.room()))
                if not runs:
                    if runs is not None and self.requeued.release():
                        continue  # the log is read to its end: those held back now
                    break
                batch = self.decoded(runs)
            for msg in batch:
                event = self.verdict(msg, wall, limit)
                if event is Event.DELIVER:
                    out.append(msg)
                else:
                    self.set_aside(msg, event)
                    if stop_at_stale and event in (Event.DELETE, Event.EXPIRE):
                        self.stale_popped = True
                        return out
        return out

    def keep(self, msg: QueuedMessage, wall: int) -> bool:
        """``msg``, taken from the log, is to be delivered; otherwise its verdict is acted on."""
        event = self.verdict(msg, wall, self.limits.attempt_limit)
        if event is Event.DELIVER:
            return True
        self.set_aside(msg, event)
        return False

    def verdict(self, msg: QueuedMessage, wall: int, limit: int) -> Event:
        if self.tombstones and msg.offset in self.tombstones:
            return Event.DELETE
        return lifecycle.verdict(msg, wall, limit)

    def decoded(self, runs: list[Run]) -> list[QueuedMessage]:
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
                    self._defer(msg, State.WAITING, Event.DEFER)
                    continue
            kept.append(msg)
        return kept

    def set_aside(self, msg: QueuedMessage, event: Event) -> None:
        """A message taken (WAITING) that is not delivered now: DEFER, EXPIRE, EXHAUST, or
        DELETE (a tombstone reached)."""
        if event is Event.DELETE:
            self.tombstones.discard(msg.offset)
        elif event is Event.DEFER:
            msg.deadline = self.clock.now() + (msg.due - self.clock.wall_ns()) / 1e9
        self._settle([msg], State.WAITING, event)

    def _settle(self, msgs: list[QueuedMessage], state: State, event: Event) -> None:
        """``msgs``, taken out of ``state``, where ``event`` puts them by the table (an
        expiry on a ``dead_letter_expired`` channel kept as a dead letter). Not IN_FLIGHT:
        that is ``put_in_flight``'s."""
        if event is Event.EXPIRE and self.limits.dead_letter_expired:
            event = Event.EXPIRE_KEPT
        to = self._move(state, event, len(msgs))
        if event in (Event.EXPIRE, Event.EXPIRE_KEPT):
            self.expired_count += len(msgs)
        if to is State.WAITING:
            self._requeue(msgs)
        elif to is State.DEFERRED:
            for msg in msgs:
                self.deferred.add(msg)
        elif to is State.DEAD:
            self.dead_letters.pending.extend(msgs)
            self.host.mark_dirty()  # the broker stores them after this pump
        else:
            assert to is not State.IN_FLIGHT, event
            for msg in msgs:
                self._done(msg)

    def _defer(self, msg: QueuedMessage, state: State, event: Event) -> None:
        self._move(state, event)
        self.deferred.add(msg)

    def _done(self, msg: QueuedMessage) -> None:
        """DONE (or EXPIRED, or stored as a dead letter): acknowledged where it came from."""
        if msg.offset == OWN:
            if self.own is not None:
                self.own.ack(msg.id)
        else:
            self.cursor.ack(msg.offset)

    def _requeue(self, msgs: list[QueuedMessage]) -> None:
        """WAITING again, held apart: REQ, a timeout, a consumer gone, a deferral due."""
        msgs = self.reader.coming_back(msgs)  # (after a rewind the log delivers some again)
        self.requeued.add(msgs, self.requeue_turn())
        self.host.changed()

    def requeue_turn(self) -> int:
        """The turn a message coming back now waits for: behind what the memory queue holds
        (up to --mem-queue-size), or on lmstfy's queues behind every message waiting."""
        end = self.topic.visible_end
        if self.limits.requeue_behind:
            return end
        return min(end, self.cursor.read + self.mem_queue_size)

    # -- publish -----------------------------------------------------------------------------
    def published_deferred(self, msgs: Sequence[QueuedMessage]) -> None:
        """Messages just published with a due time (DPUB, delayed jobs): DEFERRED now, held
        ahead of the cursor, as nsqd puts a DPUB straight into a channel's deferred queue."""
        now, wall = self.clock.now(), self.clock.wall_ns()
        for msg in msgs:
            if msg.offset >= self.cursor.read:
                msg.deadline = now + max(msg.due - wall, 0) / 1e9
                self._defer(msg, State.WAITING, Event.DEFER)
                self.cursor.hold_ahead(msg.offset)

    # -- IN_FLIGHT ---------------------------------------------------------------------------
    def put_in_flight(self, msgs: list[QueuedMessage], owner: int, now: float, deadline: float
                      ) -> None:
        """DELIVER: one more delivery of each of ``msgs`` (taken), in flight to ``owner``
        until ``deadline``."""
        self._move(State.WAITING, Event.DELIVER, len(msgs))
        for msg in msgs:
            if msg.attempts < 65535:
                msg.attempts += 1
            msg.client_id = owner
            msg.delivered = now
            msg.deadline = deadline
        self.in_flight.add_many(msgs, deadline)

    def put_records_in_flight(self, records: Sequence[bytes], delivery: Delivery, first: int
                              ) -> None:
        """DELIVER of plain records read from the log, from offset ``first``: they stay
        records in flight (``InFlightQueue.add_records``)."""
        self._move(State.WAITING, Event.DELIVER, len(records))
        self.in_flight.add_records(records, delivery, first)

    def sampled_out(self, msgs: list[QueuedMessage]) -> None:
        """NSQ's sampling: messages taken but not drawn are consumed without delivery."""
        self._settle(msgs, State.WAITING, Event.SAMPLED_OUT)

    def owned(self, owner: int, message_id: bytes) -> QueuedMessage | None:
        """The message ``message_id`` in flight to ``owner``; None if it is not in flight.

        Raises:
            NotOwner: it is in flight to another.
        """
        msg = self.in_flight.get(message_id)
        if msg is not None and msg.client_id != owner:
            raise NotOwner
        return msg

    def take_in_flight(self, msg: QueuedMessage) -> None:
        """``msg`` (in flight) leaves the in-flight table, to be answered (FIN, REQ...)."""
        self.in_flight.remove(msg.id)
        if msg.client_id == PULLER:
            del self.pulled_ttr[msg.id]

    def finished(self, msg: QueuedMessage, event: Event = Event.FIN) -> None:
        """FIN (over TCP or HTTP; lmstfy's DELETE of a pulled job) of ``msg``, taken out of
        flight: done with, its latency observed."""
        self._settle([msg], State.IN_FLIGHT, event)
        if self.e2e is not None:
            self.e2e.observe(self.clock.wall_ns() - msg.timestamp)

    def finish_owned(self, message_ids: list[bytes], owner: int) -> tuple[int, list[tuple[
            bytes, bool]]]:
        """FIN of each of ``message_ids`` in flight to ``owner``, in one pass (the consumer's
        path): how many, and the ids that failed, each with whether it is another's."""
        taken, failed = self.in_flight.take_owned(message_ids, owner)
        done = len(taken)
        if done:
            self._move(State.IN_FLIGHT, Event.FIN, done)
            offsets = [entry_offset(entry) for entry in taken]
            if OWN in offsets:
                for entry in taken:
                    if entry_offset(entry) == OWN and self.own is not None:
                        self.own.ack(entry_id(entry))
                offsets = [o for o in offsets if o != OWN]
            self.cursor.ack_many(offsets)
            e2e = self.e2e
            if e2e is not None:
                now_ns = self.clock.wall_ns()
                for entry in taken:
                    e2e.observe(now_ns - entry_timestamp(entry))
        return done, failed

    def put_back(self, msg: QueuedMessage, delay: float, now: float) -> None:
        """REQ (over TCP or HTTP) of ``msg``, taken out of flight: back to waiting at once, or
        deferred by ``delay``."""
        self.requeue_count += 1
        if delay > 0:
            msg.deadline = now + delay
            self._defer(msg, State.IN_FLIGHT, Event.REQ_DELAYED)
        else:
            self._settle([msg], State.IN_FLIGHT, Event.REQ)

    def touch(self, msg: QueuedMessage, timeout: float, now: float) -> None:
        """TOUCH: ``timeout`` again from now, never past delivery + max-msg-timeout."""
        self._move(State.IN_FLIGHT, Event.TOUCH)
        self.in_flight.remove(msg.id)
        msg.deadline = min(now + timeout, msg.delivered + self.max_msg_timeout)
        self.in_flight.add(msg)

    def gave_up(self, msg: QueuedMessage) -> None:
        """GIVE_UP: a pulled message (taken out of flight) its consumer gives up on: a dead
        letter now."""
        self._settle([msg], State.IN_FLIGHT, Event.GIVE_UP)

    def owner_gone(self, owner: int) -> int:
        """GONE: every message in flight to ``owner`` waiting again; how many."""
        mine = self.in_flight.take_all_owned(owner)
        if mine:
            self._settle(mine, State.IN_FLIGHT, Event.GONE)
        return len(mine)

    def scan(self, now: float) -> list[QueuedMessage] | None:
        """Timed-out in-flight messages (TIMEOUT, TIMEOUT_EXHAUSTED, or EXPIRE) and due
        deferred ones (DUE, or EXPIRE) where the table puts them; the timed-out ones (their
        consumers have a slot free again), or None if nothing was due."""
        expired = self.in_flight.pop_due(now) if self.in_flight else []
        due = self.deferred.pop_due(now) if self.deferred else []
        if not expired and not due:
            return None
        limit = self.limits.attempt_limit
        wall = self.clock.wall_ns()
        back: list[QueuedMessage] = []
        for msg in expired:
            if msg.client_id == PULLER:
                del self.pulled_ttr[msg.id]
            event = lifecycle.timeout_event(msg, wall, limit)
            if event is Event.TIMEOUT:
                self._move(State.IN_FLIGHT, event)
                back.append(msg)
            else:  # no delivery left: a dead letter now; or past its expiry: never waiting
                self._settle([msg], State.IN_FLIGHT, event)
        self.timeout_count += len(expired)
        for msg in due:
            event = lifecycle.due_event(msg, wall)
            if event is Event.DUE:
                self._move(State.DEFERRED, event)
                msg.due = 0  # waiting again (a job's delay has passed)
                back.append(msg)
            else:
                self._settle([msg], State.DEFERRED, event)
        if back:
            self._requeue(back)
        else:  # in-flight slots were freed: their clients may take more
            self.host.mark_dirty()
        return expired

    def next_deadline(self) -> float | None:
        times = [t for t in (self.in_flight.next_deadline(), self.deferred.next_deadline())
                 if t is not None]
        return min(times) if times else None

    # -- a channel's whole ---------------------------------------------------------------------
    def empty(self, end: int) -> None:
        """EMPTY: every message held (requeued, own, in flight, deferred) done with, the
        cursor moved to ``end`` (NSQ's channel empty); the own queue's files are dropped by
        the caller (it is I/O)."""
        self.reader.forget_rewound()
        self._move(State.WAITING, Event.EMPTY, len(self.requeued))
        self.requeued.clear()
        self.tombstones.clear()
        if self.own is not None:
            self._move(State.WAITING, Event.EMPTY, len(self.own))
            self.own.clear_memory()
            self.own.ack_all()
        self._move(State.IN_FLIGHT, Event.EMPTY, len(self.in_flight))
        self.in_flight.clear()
        self.pulled_ttr.clear()
        self._move(State.DEFERRED, Event.EMPTY, len(self.deferred))
        self.deferred.clear()
        self.cursor.move_to(end)

    def rewind(self, offset: int) -> None:
        """REWIND to ``offset`` (clamped to what the log still holds, and to its end: nothing
        moves a cursor past it): in-flight messages stay in flight, requeued and deferred
        ones come again from the log (the own queue's go back there)."""
        deferred = self.deferred.clear()
        self._move(State.DEFERRED, Event.REWIND, len(deferred))
        requeued = self.requeued.clear()
        self._move(State.WAITING, Event.REWIND, len(requeued))
        held = [*requeued, *deferred]
        self.tombstones.clear()
        own = [m for m in held if m.offset == OWN]
        if own and self.own is not None:
            self.own.put_back(own)
        offset = min(max(offset, self.log.start), self.log.end)
        self.reader.rewind(offset)

    # -- lmstfy: delete, destroy -------------------------------------------------------------
    def delete_held(self, message_id: bytes) -> bool | None:
        """DELETE of a message the channel holds: in flight to a puller (finished; to a TCP
        consumer: left to it, False), deferred (done with at once), requeued (a tombstone,
        or done with from the own queue), or waiting in the own queue. None if it holds none
        such (it may wait in the log: ``tombstone``)."""
        msg = self.in_flight.get(message_id)
        if msg is not None:
            if msg.client_id != PULLER:
                return False
            self.take_in_flight(msg)
            self.finished(msg, Event.DELETE)
            return True
        msg = self.deferred.remove(message_id)
        if msg is not None:
            self._settle([msg], State.DEFERRED, Event.DELETE)
            return True
        waiting = self.requeued.find(message_id)
        if waiting is not None:
            if waiting.offset != OWN:
                self.tombstones.add(waiting.offset)
            else:
                self.requeued.remove(message_id)
                self._settle([waiting], State.WAITING, Event.DELETE)
            return True
        if self.own is not None:
            msg = self.own.remove_waiting(message_id)
            if msg is not None:
                self._settle([msg], State.WAITING, Event.DELETE)
                return True
        return None

    def tombstone(self, offset: int) -> None:
        """DELETE of the message waiting in the log at ``offset``: done with when reached."""
        self.tombstones.add(offset)

    async def purge_ready(self) -> int:
        """EMPTY of every message waiting and due (lmstfy's destroy): those deferred, in
        flight or whose due time has not come stay (DEFER). How many went."""
        from .record import decode_record, is_plain

        wall = self.clock.wall_ns()
        requeued = self.requeued.clear()
        count = len(requeued)
        self._settle(requeued, State.WAITING, Event.EMPTY)
        if self.own is not None:
            for msg in self.own.take(len(self.own)):
                if msg.due > wall:
                    self.set_aside(msg, Event.DEFER)
                else:
                    self._move(State.WAITING, Event.EMPTY)
                    self.own.ack(msg.id)
                    count += 1
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
                    if cursor.passes(offset):  # done with, or deferred already (held ahead)
                        continue
                    if not is_plain(record):
                        msg = decode_record(record, offset)
                        if msg.due > wall and offset not in self.tombstones:
                            self.set_aside(msg, Event.DEFER)
                            continue
                    self._move(State.WAITING, Event.EMPTY)
                    cursor.ack(offset)
                    count += 1
                cursor.advance_read(min(first + len(records), end))
                cursor.passed(cursor.read)
        self.tombstones.clear()
        self.host.changed()
        return count

    # -- DEAD ----------------------------------------------------------------------------------
    @property
    def dead_letters(self) -> DeadLetters:
        if self._dead_letters is None:
            self._dead_letters = self.host.new_dead_letters()
        return self._dead_letters

    @property
    def dead_letters_if_any(self) -> DeadLetters | None:
        return self._dead_letters

    async def store_dead_letters(self) -> None:
        """Write the dead letters decided since the last call, then acknowledge their
        originals.

        Raises:
            DiskQueueError: they could not be written (they stay pending).
        """
        if self._dead_letters is not None and self._dead_letters.pending:
            for msg in await self._dead_letters.store():
                self._done(msg)

    def respawned(self, msgs: list[QueuedMessage]) -> None:
        """RESPAWN: ``msgs``, dead letters now in the own queue, waiting again."""
        self._move(State.DEAD, Event.RESPAWN, len(msgs))
        if self.limits.requeue_behind:  # lmstfy: respawned jobs go behind what is ready now
            self.requeued.respawned(self.topic.visible_end)
        self.host.changed()

    def dead_ended(self, event: Event, msgs: list[QueuedMessage] | int) -> None:
        """DELETE of ``msgs``, stored dead letters taken off their store, or EMPTY of every
        one (how many): done with."""
        if isinstance(msgs, int):
            self._move(State.DEAD, event, msgs)
            self.dead_deleted.clear()
            return
        self._move(State.DEAD, event, len(msgs))
        for msg in msgs:
            self.dead_deleted.discard(msg.id)

    def deleted_dead_among(self, msgs: list[QueuedMessage]) -> set[bytes]:
        """The ids of ``msgs`` (dead letters taken off their store) whose jobs were deleted
        (DONE already: see ``dead_deleted``), forgotten now that their entries go too."""
        deleted = self.dead_deleted
        gone = {m.id for m in msgs if m.id in deleted} if deleted else set()
        deleted.difference_update(gone)
        return gone

    def find_dead(self, message_id: bytes) -> QueuedMessage | None:
        """The dead letter ``message_id``, unless it was deleted."""
        dead = self._dead_letters
        if dead is None or message_id in self.dead_deleted:
            return None
        for msg in dead.peek(len(dead)):
            if msg.id == message_id:
                return msg
        return None

    def delete_dead(self, message_id: bytes) -> None:
        """DELETE of a dead letter: gone, its entry left (see ``dead_deleted``)."""
        self._move(State.DEAD, Event.DELETE)
        self.dead_deleted.add(message_id)

    # -- for the journal, and the next start ---------------------------------------------------
    def held_extras(self, *, in_flight: bool) -> dict[int, tuple[int, int]]:
        """For the cursor's journal: the attempts of each message of the log this channel
        holds (requeued, deferred and, with ``in_flight``, in flight: that is for a clean
        shutdown, too many to write every few seconds) and the due time of deferred ones."""
        out: dict[int, tuple[int, int]] = {}
        now = self.clock.now()
        wall = self.clock.wall_ns()
        for offset, attempts in (self.in_flight.attempts_by_offset() if in_flight else ()):
            if offset != OWN:
                out[offset] = (attempts, 0)
        for msg in self.requeued:
            if msg.offset != OWN and msg.attempts:
                out[msg.offset] = (msg.attempts, 0)
        for msg in self.deferred:
            if msg.offset != OWN:
                out[msg.offset] = (msg.attempts, wall + int(max(0.0, msg.deadline - now) * 1e9))
        for offset in self.tombstones:
            out[offset] = (0, TOMBSTONE)
        return out

    def cursor_state(self, *, in_flight: bool = False) -> CursorState:
        return self.cursor.state(self.held_extras(in_flight=in_flight))

    async def restore_deferred(self) -> None:
        """At start: the messages the last run held deferred (its cursor's extras with a due
        time) deferred again, ahead of the cursor, with what is left of their delay."""
        from .record import decode_record

        cursor = self.cursor
        wanted = sorted(o for o, (_, due) in cursor.extras.items()
                        if due > 0 and o >= cursor.read)
        for offset in wanted:
            runs = await self.log.read_at(offset, 1)
            extra = cursor.take_extra(offset)
            if not runs or runs[0][0] != offset or extra is None or cursor.passes(offset):
                continue
            msg = decode_record(runs[0][1][0], offset)
            msg.attempts = max(msg.attempts, extra[0])
            msg.deadline = self.clock.now() + max(extra[1] - self.clock.wall_ns(), 0) / 1e9
            self._defer(msg, State.WAITING, Event.DEFER)
            cursor.hold_ahead(offset)
