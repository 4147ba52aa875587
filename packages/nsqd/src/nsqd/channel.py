"""A channel: a cursor into its topic's log, shared by its subscribers (docs/design/storage.md).

Each message goes to exactly one subscribed client. A client takes messages while its
in-flight count is below its RDY (a standing window, never decremented by delivery, as nsqd
does it). Where messages come from and what becomes of each: ``channel_state``. Plain records
of the log are delivered as they are (no message made, nothing decoded:
``output.record_frames``) unless the channel must look at each (an attempt limit, state saved
for them at the last shutdown). Dead letters: ``channel_dead``; HTTP pulling and lmstfy's
front door: ``channel_pull``.

Nothing here awaits or spawns: delivery happens in ``pump``, which the broker's pump task calls
for every channel marked dirty, so one read of 2,000 FINs costs one pump, not 2,000. The few
things that need the disk (finding a job not in memory, storing dead letters) are async and
said so.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Protocol

from . import lifecycle
from .channel_pull import PullDoor
from .channel_state import PULLER, READ_BATCH, TOMBSTONE, Consumer, Source
from .errors import InFlightError, NotInFlight, NotOwner
from .inflight import Delivery, entry_id, entry_offset, entry_timestamp
from .lifecycle import Event
from .message import OWN
from .record import decode_record, decode_records, is_plain
from .runs import split

if TYPE_CHECKING:
    from .backlog import Backlog
    from .clock import Clock
    from .cursor import Cursor
    from .cursorfile import CursorState
    from .deadletters import DeadLetters
    from .e2e import LatencyStream
    from .message import QueuedMessage
    from .runs import Run

__all__ = ["PULLER", "READ_BATCH", "TOMBSTONE", "Channel", "Consumer", "Owner", "Source",
           "spread"]


class Owner(Protocol):
    """What a channel needs from the broker."""

    def mark_dirty(self, channel: Channel) -> None: ...

    def channel_emptied_of_clients(self, channel: Channel) -> None: ...

    def dead_letters_for(self, channel: Channel) -> DeadLetters: ...

    def own_queue_for(self, channel: Channel) -> Backlog: ...



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


class Channel(PullDoor):
    """A channel of a topic: its subscribers, delivery to them, and their answers."""

    def __init__(self, topic: Source, name: str, owner: Owner, *, cursor: Cursor,
                 clock: Clock, max_msg_timeout: float, mem_queue_size: int = 10000,
                 own: Backlog | None = None, e2e: LatencyStream | None = None) -> None:
        super().__init__(topic, name, cursor=cursor, clock=clock,
                         max_msg_timeout=max_msg_timeout, mem_queue_size=mem_queue_size,
                         own=own, e2e=e2e)
        self.owner = owner

    def _mark_dirty(self) -> None:
        self.owner.mark_dirty(self)

    def _new_dead_letters(self) -> DeadLetters:
        return self.owner.dead_letters_for(self)

    def _new_own_queue(self) -> Backlog:
        return self.owner.own_queue_for(self)

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
                    for run_first, run_records in split(runs, pos, n):
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

    def requeue(self, client: Consumer, message_id: bytes, delay: float, now: float) -> None:
        """REQ: back to the queue at once, or deferred by ``delay`` seconds.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_REQ_FAILED.
        """
        msg = self._take_in_flight(client, message_id)
        client.requeue_count += 1
        self._put_back(msg, delay, now)

    def touch(self, client: Consumer, message_id: bytes, now: float) -> None:
        """TOUCH: restart the timeout, never past delivery + max-msg-timeout.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_TOUCH_FAILED.
        """
        self._restart_timeout(self._owned(client, message_id), client.msg_timeout, now)

    def scan(self, now: float) -> bool:
        """Requeue timed-out in-flight messages and release due deferred ones."""
        expired = self.in_flight.pop_due(now) if self.in_flight else []
        due = self.deferred.pop_due(now) if self.deferred else []
        if not expired and not due:
            return False
        limit = self.max_attempts or self.default_max_attempts
        wall = self.clock.wall_ns()
        back: list[QueuedMessage] = []
        for msg in expired:
            client = self.clients.get(msg.client_id)
            if client is not None:
                client.in_flight -= 1
            elif msg.client_id == PULLER:
                del self._pulled_ttr[msg.id]
            event = lifecycle.timeout_event(msg, wall, limit)
            if event is Event.TIMEOUT:
                back.append(msg)
            elif event is Event.TIMEOUT_EXHAUSTED:
                self._to_dead_letters([msg])  # no delivery left: a dead letter now
            else:
                self._set_aside(msg, event)  # past its expiry: never waiting again
        self.timeout_count += len(expired)
        for msg in due:
            event = lifecycle.due_event(msg, wall)
            if event is Event.DUE:
                msg.due = 0  # waiting again (a job's delay has passed)
                back.append(msg)
            else:
                self._set_aside(msg, event)
        if back:
            self._requeue(back)
        else:  # in-flight slots were freed: their clients may take more
            self.owner.mark_dirty(self)
        return True

    def next_deadline(self) -> float | None:
        times = [t for t in (self.in_flight.next_deadline(), self.deferred.next_deadline())
                 if t is not None]
        return min(times) if times else None

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
        """Deliver again everything from ``offset`` (clamped to what the log still holds, and
        to its end: nothing moves a cursor past it):
        in-flight messages stay in flight, requeued and deferred ones come again from the
        log."""
        held = [*self.requeued, *self.deferred.clear()]
        self.requeued.clear()
        self._requeued_after.clear()
        self.tombstones.clear()
        own = [m for m in held if m.offset == OWN]
        if own and self.own is not None:
            self.own.put_back(own)
        offset = min(max(offset, self.log.start), self.log.end)
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
