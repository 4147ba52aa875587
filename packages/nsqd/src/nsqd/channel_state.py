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
from .channel_journal import TOMBSTONE, held_extras, saved_deferred
from .channel_limits import Limits
from .channel_read import Source
from .channel_waiting import READ_BATCH, Waiting
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

__all__ = ["PULLER", "READ_BATCH", "TOMBSTONE", "Host", "MessageStates", "Source"]

#: The owner (``client_id``) of messages in flight to HTTP pullers (client ids start at 1).
PULLER = -1

#: Told of every transition: the state before, the event, the state after, how many messages.
Observer = Callable[[State, Event, State, int], None]


class Host(Protocol):
    """What the states need of their channel: to be pumped, to tell everyone waiting, and its
    private queues, made when first needed (by the broker)."""

    def mark_dirty(self) -> None: ...

    def changed(self) -> None: ...

    def new_dead_letters(self) -> DeadLetters: ...

    def new_own_queue(self) -> Backlog: ...


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
        self.max_msg_timeout = max_msg_timeout
        self.e2e = e2e
        self.observer: Observer | None = None
        self.stale_popped = False  # the last take with ``stop_at_stale`` stopped at one
        self.in_flight = InFlightQueue()
        self.deferred = DeferredQueue()
        self.pulled_ttr: dict[bytes, float] = {}  # of each message in flight to a puller
        self._dead_letters: DeadLetters | None = None  # made with the first dead letter
        self.waiting = Waiting(topic, cursor, self.in_flight, host.new_own_queue, limits=limits,
                               ephemeral=ephemeral, mem_queue_size=mem_queue_size, own=own)
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

    @property
    def log(self) -> TopicLog:
        return self.topic.log

    # -- taking: WAITING to a verdict --------------------------------------------------------
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
            batch = self.waiting.next(want, self.decoded)
            if batch is None:
                break
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
        if self.waiting.tombstones and msg.offset in self.waiting.tombstones:
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
                    self.waiting.tombstones.add(msg.offset)
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
            self.waiting.tombstones.discard(msg.offset)
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
            if self.waiting.own is not None:
                self.waiting.own.ack(msg.id)
        else:
            self.cursor.ack(msg.offset)

    def _requeue(self, msgs: list[QueuedMessage]) -> None:
        """WAITING again, held apart: REQ, a timeout, a consumer gone, a deferral due."""
        self.waiting.put_back(msgs)
        self.host.changed()

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
                    if entry_offset(entry) == OWN and self.waiting.own is not None:
                        self.waiting.own.ack(entry_id(entry))
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
        self.waiting.reader.forget_rewound()
        self._move(State.WAITING, Event.EMPTY, len(self.waiting.requeued))
        self.waiting.requeued.clear()
        self.waiting.tombstones.clear()
        if self.waiting.own is not None:
            self._move(State.WAITING, Event.EMPTY, len(self.waiting.own))
            self.waiting.own.clear_memory()
            self.waiting.own.ack_all()
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
        requeued = self.waiting.requeued.clear()
        self._move(State.WAITING, Event.REWIND, len(requeued))
        held = [*requeued, *deferred]
        self.waiting.tombstones.clear()
        own = [m for m in held if m.offset == OWN]
        if own and self.waiting.own is not None:
            self.waiting.own.put_back(own)
        offset = min(max(offset, self.log.start), self.log.end)
        self.waiting.reader.rewind(offset)

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
        waiting = self.waiting.requeued.find(message_id)
        if waiting is not None:
            if waiting.offset != OWN:
                self.waiting.tombstones.add(waiting.offset)
            else:
                self.waiting.requeued.remove(message_id)
                self._settle([waiting], State.WAITING, Event.DELETE)
            return True
        if self.waiting.own is not None:
            msg = self.waiting.own.remove_waiting(message_id)
            if msg is not None:
                self._settle([msg], State.WAITING, Event.DELETE)
                return True
        return None

    def tombstone(self, offset: int) -> None:
        """DELETE of the message waiting in the log at ``offset``: done with when reached."""
        self.waiting.tombstones.add(offset)

    async def purge_ready(self) -> int:
        """EMPTY of every message waiting and due (lmstfy's destroy): those deferred, in
        flight or whose due time has not come stay (DEFER). How many went."""
        from .record import decode_record, is_plain

        wall = self.clock.wall_ns()
        requeued = self.waiting.requeued.clear()
        count = len(requeued)
        self._settle(requeued, State.WAITING, Event.EMPTY)
        if self.waiting.own is not None:
            for msg in self.waiting.own.take(len(self.waiting.own)):
                if msg.due > wall:
                    self.set_aside(msg, Event.DEFER)
                else:
                    self._move(State.WAITING, Event.EMPTY)
                    self.waiting.own.ack(msg.id)
                    count += 1
        async for offset, record in self.waiting.unread_records():
            if not is_plain(record):
                msg = decode_record(record, offset)
                if msg.due > wall and offset not in self.waiting.tombstones:
                    self.set_aside(msg, Event.DEFER)
                    continue
            self._move(State.WAITING, Event.EMPTY)
            self.cursor.ack(offset)
            count += 1
        self.waiting.tombstones.clear()
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
            LogError: they could not be written (they stay pending).
        """
        if self._dead_letters is not None and self._dead_letters.pending:
            for msg in await self._dead_letters.store():
                self._done(msg)

    def respawned(self, msgs: list[QueuedMessage]) -> None:
        """RESPAWN: ``msgs``, dead letters now in the own queue, waiting again."""
        self._move(State.DEAD, Event.RESPAWN, len(msgs))
        self.waiting.respawned()
        self.host.changed()

    def dead_ended(self, event: Event, msgs: list[QueuedMessage] | int) -> None:
        """DELETE of ``msgs``, stored dead letters taken off their store, or EMPTY of every
        one (how many): done with."""
        self._move(State.DEAD, event, msgs if isinstance(msgs, int) else len(msgs))
        if self._dead_letters is not None:
            self._dead_letters.forget_deleted(None if isinstance(msgs, int) else msgs)

    def deleted_dead_among(self, msgs: list[QueuedMessage]) -> set[bytes]:
        """The ids of ``msgs`` (dead letters taken off their store) whose jobs were deleted
        (DONE already: ``delete_dead``), forgotten now that their entries go too."""
        return self.dead_letters.forget_deleted(msgs)

    def find_dead(self, message_id: bytes) -> QueuedMessage | None:
        """The dead letter ``message_id``, unless it was deleted."""
        dead = self._dead_letters
        return dead.find(message_id) if dead is not None else None

    def delete_dead(self, message_id: bytes) -> None:
        """DELETE of a dead letter: gone, its entry left (``DeadLetters.mark_deleted``)."""
        self._move(State.DEAD, Event.DELETE)
        self.dead_letters.mark_deleted(message_id)

    # -- for the journal, and the next start (``channel_journal``) ---------------------------
    def held_extras(self, *, in_flight: bool) -> dict[int, tuple[int, int]]:
        """For the cursor's journal: what it keeps of the messages held (``in_flight``: those
        in flight too, for a clean shutdown)."""
        return held_extras(in_flight=self.in_flight if in_flight else None,
                           requeued=self.waiting.requeued, deferred=self.deferred,
                           tombstones=self.waiting.tombstones, now=self.clock.now(),
                           wall=self.clock.wall_ns())

    def cursor_state(self, *, in_flight: bool = False) -> CursorState:
        return self.cursor.state(self.held_extras(in_flight=in_flight))

    async def restore_deferred(self) -> None:
        """At start: the messages the last run held deferred deferred again, ahead of the
        cursor, with what is left of their delay."""
        async for msg, (attempts, due) in saved_deferred(self.cursor, self.log):
            msg.attempts = max(msg.attempts, attempts)
            msg.deadline = self.clock.now() + max(due - self.clock.wall_ns(), 0) / 1e9
            self._defer(msg, State.WAITING, Event.DEFER)
            self.cursor.hold_ahead(msg.offset)
