"""A channel: a cursor into its topic's log, shared by its subscribers (docs/design/storage.md).

Each message goes to exactly one subscribed client. A client takes messages while its
in-flight count is below its RDY (a standing window, never decremented by delivery, as nsqd
does it). A channel takes messages, in order, from: those requeued to it (REQ, timeouts, a
consumer gone, deferred ones now due), its own queue (respawned dead letters, messages brought
from Go's files), then its topic's log from its cursor. What becomes of each is
``lifecycle.verdict``'s to say; the channel acts on it. Plain records of the log are
delivered as they are (no message made, nothing decoded: ``output.record_frames``) unless the
channel must look at each (an attempt limit, state saved for them at the last shutdown).

Nothing here awaits or spawns: delivery happens in ``pump``, which the broker's pump task calls
for every channel marked dirty, so one read of 2,000 FINs costs one pump, not 2,000. The few
things that need the disk (finding a job not in memory, storing dead letters) are async and
said so.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Protocol

import trio
from nsq_common import is_ephemeral

from . import lifecycle
from .errors import InFlightError, NotInFlight, NotOwner
from .inflight import DeferredQueue, Delivery, InFlightQueue, entry_id, entry_offset, entry_timestamp
from .lifecycle import Event
from .message import OWN
from .record import decode_record, decode_records, is_plain, record_id

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .backlog import Backlog
    from .clock import Clock
    from .cursor import Cursor
    from .cursorfile import CursorState
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


class Owner(Protocol):
    """What a channel needs from the broker."""

    def mark_dirty(self, channel: Channel) -> None: ...

    def channel_emptied_of_clients(self, channel: Channel) -> None: ...

    def dead_letters_for(self, channel: Channel) -> DeadLetters: ...

    def own_queue_for(self, channel: Channel) -> Backlog: ...


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


def spread(total: int, slots: list[int]) -> list[int]:
    """Split ``total`` messages over clients with ``slots`` free each, as evenly as their
    windows allow: shares differ by at most one, except where a window is full, and what a
    small window cannot take goes to the bigger ones. With ``total <= sum(slots)`` every
    message gets a client.

    Smallest window first, each takes its window or an equal share of what is left, so the
    rounding remainder falls to the last clients (ties keep their order, which the caller
    rotates).
    """
    counts = [0] * len(slots)
    left = len(slots)
    for i in sorted(range(len(slots)), key=slots.__getitem__):
        n = min(slots[i], total // left)
        counts[i] = n
        total -= n
        left -= 1
    return counts


class Channel:
    def __init__(self, topic: Source, name: str, owner: Owner, *, cursor: Cursor,
                 clock: Clock, max_msg_timeout: float, mem_queue_size: int = 10000,
                 own: Backlog | None = None, e2e: LatencyStream | None = None) -> None:
        self.topic = topic
        self.topic_name = topic.name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.owner = owner
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

    @property
    def log(self) -> TopicLog:
        return self.topic.log

    def changed(self) -> None:
        """Messages may be deliverable now: the broker pumps the channel, waiting HTTP
        pullers look again."""
        self.owner.mark_dirty(self)
        self.wake_pullers()

    def wake_pullers(self) -> None:
        if self._pullers_wakeup is not None:
            self._pullers_wakeup.set()
            self._pullers_wakeup = None

    def published(self, count: int, deferred: Sequence[QueuedMessage] = ()) -> None:
        """The topic stored ``count`` new messages this channel will read; those of
        ``deferred`` (with a due time: DPUB, delayed jobs) it holds ahead of its cursor now,
        deferred until due, as nsqd puts a DPUB straight into a channel's deferred queue."""
        self.message_count += count
        if deferred:
            now, wall = self.clock.now(), self.clock.wall_ns()
            for msg in deferred:
                if msg.offset >= self.cursor.read:
                    msg.deadline = now + max(msg.due - wall, 0) / 1e9
                    self.deferred.add(msg)
                    self.cursor.ahead.add(msg.offset)
        # The pump only for a channel with subscribers (one that has none does nothing
        # there, and a RDY wakes it): a publisher's round trip then needs no task switch.
        if self.clients:
            self.owner.mark_dirty(self)
        self.wake_pullers()

    # -- depths --------------------------------------------------------------------------
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

    # -- taking from the log -----------------------------------------------------------------
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
                runs = _cut(runs, end)
                stop = end
            if runs[0][0] > read or len(runs) > 1:
                _pass_gaps(runs, read, cursor)
            cursor.read = stop
            if self._rewound:
                runs = self._without_in_flight(runs)
            acked = cursor.acked
            if not cursor.ahead and not (acked and acked.count_in(read, stop)):
                if runs:
                    return runs
                continue
            runs = _without_acked(runs, cursor)
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
                runs = self._read_log(min(want, READ_BATCH))
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

    # -- delivery ------------------------------------------------------------------------
    def pump(self, now: float) -> None:
        """Hand waiting messages to ready clients, spread across them in turn."""
        if self.paused or not self.clients or not self._has_waiting():
            return
        ready = [c for c in self.clients.values() if c.ready_slots() > 0]
        if not ready:
            return
        start = self._rotation % len(ready)
        self._rotation += 1
        ready = ready[start:] + ready[:start]
        while ready:
            slots = [c.ready_slots() for c in ready]
            want = sum(slots)
            if self._records_fit():
                runs = self._read_log(min(want, READ_BATCH, self._room()))
                if not runs:
                    return  # nothing more, or being read from disk (the log wakes us)
                if all(plain or all(map(is_plain, records)) for _, records, plain in runs):
                    self._deliver_runs(ready, slots, runs, now)
                    ready = [c for c in ready if c.ready_slots() > 0]
                    continue
                wall = self.clock.wall_ns()
                msgs = [m for m in self._decoded(runs) if self._keep(m, wall)]
                if not msgs:
                    continue  # all set aside (deferred, expired...): the cursor moved on
            else:
                msgs = self._take(want)
                if not msgs:
                    return
            pos = 0
            for client, n in zip(ready, spread(len(msgs), slots), strict=True):
                if n:
                    self._deliver(client, msgs[pos:pos + n], now)
                    pos += n
            # Everything taken went out, so a client still ready here is one the queue ran
            # short for, or one whose sampled-out messages did not count: take again.
            ready = [c for c in ready if c.ready_slots() > 0]

    def _keep(self, msg: QueuedMessage, wall: int) -> bool:
        event = self._verdict(msg, wall, self.max_attempts or self.default_max_attempts)
        if event is Event.DELIVER:
            return True
        self._set_aside(msg, event)
        return False

    def _records_fit(self) -> bool:
        """The next messages can go out as the log's records: nothing requeued or of the
        own queue comes first, and nothing needs a look at each (an attempt limit, state
        the cursor kept for them)."""
        return ((not self.requeued or not self._requeued_ready())
                and not self._own_ready()
                and not self.max_attempts and not self.default_max_attempts
                and not self.cursor.extras and not self.tombstones)

    def _deliver_runs(self, ready: list[Consumer], slots: list[int], runs: list[Run],
                      now: float) -> None:
        if len(runs) == 1:
            first, records, _ = runs[0]
        else:
            records = list(chain.from_iterable(r for _, r, _ in runs))
            first = -1
        pos = 0
        for client, n in zip(ready, spread(len(records), slots), strict=True):
            if n:
                part = records[pos:pos + n]
                if first >= 0:
                    self._deliver_records(client, part, first + pos, now)
                else:
                    for run_first, run_records in _split(runs, pos, n):
                        self._deliver_records(client, run_records, run_first, now)
                pos += n

    def _deliver(self, client: Consumer, batch: list[QueuedMessage], now: float) -> None:
        if client.sample_rate:
            # NSQ's sampling: a message not drawn is consumed without delivery, for this channel.
            rate = client.sample_rate
            kept = []
            for msg in batch:
                if random.randrange(100) <= rate:
                    kept.append(msg)
                else:
                    self._done(msg)
            batch = kept
            if not batch:
                return
        self._put_in_flight(batch, client.id, now, now + client.msg_timeout)
        client.in_flight += len(batch)
        client.message_count += len(batch)
        client.send_messages(batch)

    def _deliver_records(self, client: Consumer, records: Sequence[bytes], first: int,
                         now: float) -> None:
        """``_deliver`` of plain records from offset ``first``, which stay records in flight
        (``InFlightQueue.add_records``) and in the client's output (``send_records``)."""
        if client.sample_rate:
            self._deliver(client, decode_records(records, first), now)
            return
        self.in_flight.add_records(records, Delivery(client.id, now, now + client.msg_timeout),
                                   first)
        client.in_flight += len(records)
        client.message_count += len(records)
        client.send_records(records)

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

    # -- the end of a message ------------------------------------------------------------------
    def _done(self, msg: QueuedMessage) -> None:
        """DONE (or EXPIRED, or stored as a dead letter): acknowledged where it came from."""
        if msg.offset == OWN:
            if self.own is not None:
                self.own.ack(msg.id)
        else:
            self.cursor.ack(msg.offset)

    def _to_dead_letters(self, msgs: list[QueuedMessage]) -> None:
        self.dead_letters.pending.extend(msgs)
        self.owner.mark_dirty(self)  # the broker stores them after this pump

    @property
    def dead_letters(self) -> DeadLetters:
        if self._dead_letters is None:
            self._dead_letters = self.owner.dead_letters_for(self)
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

    async def store_dead_letters(self) -> None:
        """Write the dead letters decided since the last call, then acknowledge their
        originals.

        Raises:
            DiskQueueError: they could not be written (they stay pending).
        """
        if self._dead_letters is not None and self._dead_letters.pending:
            for msg in await self._dead_letters.store():
                self._done(msg)

    def dead_letter_pulled(self, message_id: bytes) -> bool:
        """A pulled message its consumer gives up on: to the dead letters at once."""
        msg = self._take_pulled(message_id)
        if msg is None:
            return False
        self._to_dead_letters([msg])
        return True

    async def respawn(self, n: int, expires: int | None = None) -> int:
        """RESPAWN: up to ``n`` stored dead letters back to waiting, through the channel's own
        queue (written there before they leave the dead letters, so a crash loses none),
        attempts reset and a job given one try, as lmstfy does; ``expires``: a new expiry.
        How many.

        Raises:
            DiskQueueError: the own queue could not store them (they stay dead letters).
        """
        if self._dead_letters is None:
            return 0
        dead = self._dead_letters
        msgs = dead.backlog.take(n)
        if not msgs:
            return 0
        for msg in msgs:
            msg.attempts = 0
            if msg.is_job:
                msg.tries = 1  # type: ignore[attr-defined]
            msg.due = 0
            msg.offset = OWN
            if expires is not None:
                msg.expires = expires
        own = self.own_queue
        try:
            await own.put(msgs)
        except BaseException:
            dead.backlog.put_back(msgs)
            raise
        for msg in msgs:
            dead.backlog.ack(msg.id)
        if self.requeue_behind:  # lmstfy: respawned jobs go behind what is ready now
            self._own_after = self.topic.visible_end
        self.changed()
        return len(msgs)

    @property
    def own_queue(self) -> Backlog:
        if self.own is None:
            self.own = self.owner.own_queue_for(self)
        return self.own

    # -- looking without taking -------------------------------------------------------------
    def _unread_runs(self, n: int) -> list[Run]:
        """Up to ``n`` records the cursor has not reached yet that are in memory, without
        those done with (never reads the disk, never moves the cursor)."""
        cursor = self.cursor
        end = self.topic.visible_end
        runs = self.log.read(cursor.read, min(n, end - cursor.read)) if cursor.read < end else []
        if not runs:
            return []
        runs = _cut(runs, end)
        if cursor.acked or cursor.ahead:
            runs = _without_acked(runs, cursor)
        return runs

    def _waiting(self, n: int) -> Iterator[QueuedMessage]:
        """What would be delivered next, in order, without taking it: requeued, own, then
        the log (in memory)."""
        yield from self.requeued
        if self.own is not None:
            yield from self.own.peek(n)
        yield from self._decoded_copy(self._unread_runs(n))

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

    def peek(self, n: int, now: float) -> list[QueuedMessage]:
        """The next ``n`` messages the channel would deliver (requeued, own, then the log as
        far as it is in memory, then deferred ones already due), taking nothing."""
        wall = self.clock.wall_ns()
        limit = self.max_attempts or self.default_max_attempts
        out: list[QueuedMessage] = []
        for msg in self._waiting(n + len(self.tombstones)):
            if self._verdict(msg, wall, limit) is Event.DELIVER:
                out.append(msg)
                if len(out) >= n:
                    return out
        if self.deferred:
            due = sorted((m for m in self.deferred if m.deadline <= now),
                         key=lambda m: m.deadline)
            out += due[:n - len(out)]
        return out

    def peek_head(self) -> tuple[QueuedMessage, bool] | None:
        """lmstfy's peek: the first message waiting and due, and whether it is stale (deleted
        or expired while waiting: lmstfy shows such a head without its data)."""
        wall = self.clock.wall_ns()
        for msg in self._waiting(READ_BATCH):
            if msg.due > wall:
                continue  # delayed: not in lmstfy's ready list yet
            stale = msg.offset in self.tombstones or bool(msg.expires and msg.expires <= wall)
            return msg, stale
        return None

    def ready_count(self) -> int:
        """lmstfy's ``size``: messages waiting and due, those deleted or expired while
        waiting included (lmstfy counts such ready-list entries until a consume meets them);
        not the deferred ones (delayed jobs are deferred the moment they are published)."""
        return self.depth

    async def find(self, message_id: bytes) -> QueuedMessage | None:
        """The message wherever it is in this channel, not done with nor deleted: in
        flight, deferred, waiting (requeued, own, in the log), or a dead letter."""
        found = self.in_flight.get(message_id)
        if found is not None:
            return found
        for msg in chain(self.deferred, self.requeued):
            if msg.id == message_id:
                return None if msg.offset in self.tombstones else msg
        if self.own is not None:
            for msg in self.own.peek(len(self.own)):
                if msg.id == message_id:
                    return msg
        offset = await self._find_unread(message_id)
        if offset is not None and offset not in self.tombstones:
            runs = await self.log.read_at(offset, 1)
            if runs:
                return decode_record(runs[0][1][0], offset)
        dead = self.dead_letters_if_any
        if dead is not None:
            for msg in dead.peek(len(dead)):
                if msg.id == message_id:
                    return msg
        return None

    async def _find_unread(self, message_id: bytes) -> int | None:
        """The offset of ``message_id`` among the records the cursor has not reached."""
        cursor = self.cursor
        offset = cursor.read
        end = self.topic.visible_end
        while offset < end:
            runs = await self.log.read_at(offset, READ_BATCH)
            if not runs:
                return None
            for first, records, _ in runs:
                for i, record in enumerate(records):
                    if record_id(record) == message_id and not cursor.is_done(first + i):
                        return first + i
                offset = first + len(records)
        return None

    async def delete(self, message_id: bytes) -> bool:
        """DELETE (lmstfy's ack): done with, wherever it is. In flight to a puller: finished
        (to a TCP consumer: left to it); deferred: done with at once; waiting: a tombstone
        (see ``tombstones``). False if it is nowhere here."""
        msg = self.in_flight.get(message_id)
        if msg is not None:
            return msg.client_id == PULLER and self.finish_pulled(message_id)
        msg = self.deferred.remove(message_id)
        if msg is not None:
            self._done(msg)
            return True
        for i, waiting in enumerate(self.requeued):
            if waiting.id == message_id:
                if waiting.offset != OWN:
                    self.tombstones.add(waiting.offset)
                else:
                    del self.requeued[i], self._requeued_after[i]
                    self._done(waiting)
                return True
        if self.own is not None:
            msg = self.own.remove_waiting(message_id)
            if msg is not None:
                self._done(msg)
                return True
        offset = await self._find_unread(message_id)
        if offset is None:
            return False
        self.tombstones.add(offset)
        return True

    async def purge_ready(self) -> int:
        """Done with every message waiting and due (lmstfy's destroy): those deferred, in
        flight or whose due time has not come stay. How many went."""
        wall = self.clock.wall_ns()
        count = len(self.requeued)
        for msg in self.requeued:
            self._done(msg)
        self.requeued.clear()
        self._requeued_after.clear()
        if self.own is not None:
            for msg in self.own.take(len(self.own)):
                if msg.due > wall:
                    self._set_aside(msg, Event.DEFER)
                else:
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
                    if cursor.is_done(offset):
                        continue
                    if not is_plain(record):
                        msg = decode_record(record, offset)
                        if msg.due > wall and offset not in self.tombstones:
                            self._set_aside(msg, Event.DEFER)
                            continue
                    cursor.ack(offset)
                    count += 1
                cursor.read = max(cursor.read, min(first + len(records), end))
        self.tombstones.clear()
        self.changed()
        return count

    # -- HTTP pulling ------------------------------------------------------------------------
    def pull(self, n: int, ttr: float, now: float, *, stop_at_stale: bool = False
             ) -> list[QueuedMessage]:
        """Up to ``n`` waiting messages, in flight for ``ttr`` seconds, owned by HTTP pullers
        (``PULLER``): they count in ``in_flight`` and time out like any delivery
        (``stop_at_stale``: see ``_take``)."""
        self.stale_popped = False
        if self.paused or self.deleted or not self._has_waiting():
            return []
        msgs = self._take(n, stop_at_stale=stop_at_stale)
        self._put_in_flight(msgs, PULLER, now, now + ttr)
        self._pulled_ttr.update((msg.id, ttr) for msg in msgs)
        return msgs

    async def fetch(self) -> None:
        """Have the next messages of the log in memory (an HTTP pull that is answered at once
        must not miss messages that are only on disk)."""
        if self.cursor.read < self.topic.visible_end:
            await self.log.fetch(self.cursor.read)

    def has_pullable(self) -> bool:
        """Whether ``pull`` may find something now (a waiting consume looks before it
        sleeps, so a message stored just before it began waiting is not missed)."""
        return not self.paused and not self.deleted and self._has_waiting()

    def pull_wakeup(self) -> trio.Event:
        """The event set when messages may be there to pull next (a publish, a requeue, a
        timeout...): taken before the caller's next checkpoint, it cannot miss one."""
        if self._pullers_wakeup is None:
            self._pullers_wakeup = trio.Event()
        return self._pullers_wakeup

    async def wait_pullable(self) -> None:
        """Return once messages may be there to pull (a publish, a requeue, a timeout...)."""
        await self.pull_wakeup().wait()

    def _take_pulled(self, message_id: bytes) -> QueuedMessage | None:
        msg = self.in_flight.get(message_id)
        if msg is None or msg.client_id != PULLER:
            return None
        self.in_flight.remove(message_id)
        del self._pulled_ttr[message_id]
        return msg

    def finish_pulled(self, message_id: bytes) -> bool:
        """FIN of a pulled message; False when it is not in flight for a puller."""
        msg = self._take_pulled(message_id)
        if msg is None:
            return False
        self._finished(msg)
        return True

    def requeue_pulled(self, message_id: bytes, delay: float, now: float) -> bool:
        """REQ of a pulled message, now or after ``delay`` seconds."""
        msg = self._take_pulled(message_id)
        if msg is None:
            return False
        self._put_back(msg, delay, now)
        return True

    def touch_pulled(self, message_id: bytes, now: float) -> bool:
        """TOUCH: its ttr again from now, never past delivery + max-msg-timeout."""
        msg = self.in_flight.get(message_id)
        if msg is None or msg.client_id != PULLER:
            return False
        self._restart_timeout(msg, self._pulled_ttr[message_id], now)
        return True

    def _restart_timeout(self, msg: QueuedMessage, timeout: float, now: float) -> None:
        """TOUCH: ``timeout`` again from now, never past delivery + max-msg-timeout."""
        self.in_flight.remove(msg.id)
        msg.deadline = min(now + timeout, msg.delivered + self.max_msg_timeout)
        self.in_flight.add(msg)

    # -- answers from clients --------------------------------------------------------------
    def _owned(self, client: Consumer, message_id: bytes) -> QueuedMessage:
        """The message ``message_id``, in flight to ``client``.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_FIN_FAILED, E_REQ_FAILED...
        """
        msg = self.in_flight.get(message_id)
        if msg is None:
            raise NotInFlight
        if msg.client_id != client.id:
            raise NotOwner
        return msg

    def _take_in_flight(self, client: Consumer, message_id: bytes) -> QueuedMessage:
        msg = self._owned(client, message_id)
        self.in_flight.remove(message_id)
        client.in_flight -= 1
        # the client may take another: a pump, not a puller's wake-up (once per FIN, so the
        # plain call: changed() cost the consume path 3-4%, measured with python -m bench)
        self.owner.mark_dirty(self)
        return msg

    def finish(self, client: Consumer, message_id: bytes) -> None:
        """FIN.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_FIN_FAILED.
        """
        msg = self._take_in_flight(client, message_id)
        client.finish_count += 1
        self._finished(msg)

    def finish_many(self, client: Consumer, message_ids: list[bytes]
                    ) -> list[tuple[bytes, InFlightError]]:
        """FIN of each of ``message_ids``, in order, as ``finish`` would do them one by one;
        the ids that failed, each with NSQ's reason (the caller answers E_FIN_FAILED for
        each, in order, as for single FINs).

        The consumer's path: one call for every FIN of a read. What ``finish`` does per
        message (the lookup, the owner check, the removal) is one loop in
        ``InFlightQueue.take_owned``; the cursor moves over the offsets in one call;
        latencies only when those are on; the counters and the pump's mark once.
        """
        taken, failed = self.in_flight.take_owned(message_ids, client.id)
        done = len(taken)
        if done:
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
            client.in_flight -= done
            client.finish_count += done
            self.owner.mark_dirty(self)  # the client may take more (see _take_in_flight)
        return [(message_id, NotOwner() if owned else NotInFlight())
                for message_id, owned in failed]

    def _finished(self, msg: QueuedMessage) -> None:
        """A FIN (over TCP or HTTP): the message is done with, its latency observed."""
        self._done(msg)
        if self.e2e is not None:
            self.e2e.observe(self.clock.wall_ns() - msg.timestamp)

    def requeue(self, client: Consumer, message_id: bytes, delay: float, now: float) -> None:
        """REQ: back to the queue at once, or deferred by ``delay`` seconds.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_REQ_FAILED.
        """
        msg = self._take_in_flight(client, message_id)
        client.requeue_count += 1
        self._put_back(msg, delay, now)

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

    def touch(self, client: Consumer, message_id: bytes, now: float) -> None:
        """TOUCH: restart the timeout, never past delivery + max-msg-timeout.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_TOUCH_FAILED.
        """
        self._restart_timeout(self._owned(client, message_id), client.msg_timeout, now)

    # -- timers ----------------------------------------------------------------------------
    def scan(self, now: float) -> bool:
        """Requeue timed-out in-flight messages and release due deferred ones."""
        expired = self.in_flight.pop_due(now) if self.in_flight else []
        due = self.deferred.pop_due(now) if self.deferred else []
        if not expired and not due:
            return False
        limit = self.max_attempts or self.default_max_attempts
        back: list[QueuedMessage] = []
        for msg in expired:
            client = self.clients.get(msg.client_id)
            if client is not None:
                client.in_flight -= 1
            elif msg.client_id == PULLER:
                del self._pulled_ttr[msg.id]
            if lifecycle.timeout_event(msg, limit) is Event.TIMEOUT_EXHAUSTED:
                self._to_dead_letters([msg])  # no delivery left: a dead letter now
            else:
                back.append(msg)
        self.timeout_count += len(expired)
        for msg in due:
            msg.due = 0  # DUE: waiting again (a job's delay has passed)
        self._requeue(back + due)
        return True

    def next_deadline(self) -> float | None:
        times = [t for t in (self.in_flight.next_deadline(), self.deferred.next_deadline())
                 if t is not None]
        return min(times) if times else None

    # -- membership and admin --------------------------------------------------------------
    def add_client(self, client: Consumer) -> None:
        self.clients[client.id] = client

    def remove_client(self, client: Consumer) -> None:
        """Drop a subscriber; its in-flight messages go back to the queue at once."""
        if self.clients.pop(client.id, None) is None:
            return
        mine = self.in_flight.take_all_owned(client.id)
        client.in_flight = 0
        if mine:
            self._requeue(mine)
        if not self.clients and self.ephemeral:
            self.owner.channel_emptied_of_clients(self)

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self.changed()

    def empty(self) -> None:
        """Drop queued, in-flight and deferred messages (NSQ's channel empty): the cursor to
        the end of the log; the own queue's files are dropped by the caller (it is I/O)."""
        self._forget_held()
        self.cursor.move_to(self.topic.visible_end)
        self.changed()

    def rewind(self, offset: int) -> None:
        """Deliver again everything from ``offset`` (clamped to what the log still holds):
        in-flight messages stay in flight, requeued and deferred ones come again from the
        log."""
        held = [*self.requeued, *self.deferred.clear()]
        self.requeued.clear()
        self._requeued_after.clear()
        self.tombstones.clear()
        own = [m for m in held if m.offset == OWN]
        if own and self.own is not None:
            self.own.put_back(own)
        offset = max(offset, self.log.start)
        self._rewound = {o: i for o, i in self.in_flight.ids_by_offset() if o >= offset}
        self.cursor.move_to(offset)
        self.changed()

    def _forget_held(self) -> None:
        self._rewound.clear()
        self.requeued.clear()
        self._requeued_after.clear()
        self.tombstones.clear()
        if self.own is not None:
            self.own.clear_memory()
            self.own.ack_all()
        self.in_flight.clear()
        self._pulled_ttr.clear()
        self.deferred.clear()
        for client in self.clients.values():
            client.in_flight = 0

    # -- what survives a restart ---------------------------------------------------------------
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

    async def restore_deferred(self) -> None:
        """At start: the messages the last run held deferred (its cursor's extras with a due
        time) deferred again, ahead of the cursor, with what is left of their delay."""
        cursor = self.cursor
        wanted = sorted(o for o, (_, due) in cursor.extras.items()
                        if due > 0 and o >= cursor.read)
        for offset in wanted:
            runs = await self.log.read_at(offset, 1)
            extra = cursor.extras.pop(offset, None)
            if not runs or runs[0][0] != offset or extra is None or cursor.passes(offset):
                continue
            msg = decode_record(runs[0][1][0], offset)
            msg.attempts = max(msg.attempts, extra[0])
            msg.deadline = self.clock.now() + max(extra[1] - self.clock.wall_ns(), 0) / 1e9
            self.deferred.add(msg)
            cursor.ahead.add(offset)

    def cursor_state(self, *, in_flight: bool = False) -> CursorState:
        return self.cursor.state(self.held_extras(in_flight=in_flight))


def _cut(runs: list[Run], end: int) -> list[Run]:
    """``runs`` without the records at ``end`` or after."""
    out: list[Run] = []
    for first, records, plain in runs:
        if first >= end:
            break
        if first + len(records) > end:
            records = records[:end - first]
        out.append((first, records, plain))
    return out


def _pass_gaps(runs: list[Run], read: int, cursor: Cursor) -> None:
    """Offsets between ``read`` and the runs, or between two runs, hold no message (never
    stored: reserved offsets a crash left unused, a torn write): done with, so that the
    mark-delete position moves on over them."""
    for first, records, _ in runs:
        if first > read:
            cursor.skip(read, first)
        read = first + len(records)


def _without_acked(runs: list[Run], cursor: Cursor) -> list[Run]:
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


def _split(runs: list[Run], pos: int, n: int) -> list[tuple[int, Sequence[bytes]]]:
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
