"""A channel: one copy of its topic's stream, shared by its subscribers.

Each message goes to exactly one subscribed client. A client takes messages while its
in-flight count is below its RDY (a standing window, never decremented by delivery, as nsqd
does it). Messages wait in the ``backlog`` (memory, then disk), then sit ``in_flight`` until
FIN, REQ, or their deadline; REQ with a delay and DPUB park them in ``deferred``.

Nothing here awaits or spawns: delivery happens in ``pump``, which the broker's pump task calls
for every channel marked dirty, so one read of 2,000 FINs costs one pump, not 2,000.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Protocol

import trio
from nsq_common import is_ephemeral

from .backlog import Backlog, Records, WithBacklog, decode_records
from .errors import InFlightError, NotInFlight, NotOwner
from .inflight import DeferredQueue, Delivery, InFlightQueue, entry_id, entry_timestamp

if TYPE_CHECKING:
    from collections.abc import Callable

    from .deadletters import DeadLetters
    from .diskqueue import DiskQueue
    from .e2e import LatencyStream
    from .message import QueuedMessage


#: The owner (``client_id``) of messages in flight to HTTP pullers (client ids start at 1).
PULLER = -1


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

    def send_records(self, records: list[bytes]) -> None:
        """Send plain records (see ``backlog``) as message frames, one attempt more."""
        ...


class Owner(Protocol):
    """What a channel needs from the broker."""

    def mark_dirty(self, channel: Channel) -> None: ...

    def channel_emptied_of_clients(self, channel: Channel) -> None: ...

    def dead_letters_for(self, channel: Channel) -> DeadLetters: ...


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


class Channel(WithBacklog):
    def __init__(self, topic_name: str, name: str, owner: Owner, *, max_msg_timeout: float,
                 mem_queue_size: int = 10000, disk: DiskQueue | None = None,
                 e2e: LatencyStream | None = None) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.owner = owner
        self.max_msg_timeout = max_msg_timeout
        self.backlog = Backlog(mem_queue_size, disk, self._disk_readable)
        self.e2e = e2e
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
        self._cancelled: set[bytes] = set()  # jobs deleted before they were reached
        # HTTP pulling: the ttr of each message pulled and still in flight, and the event
        # that pullers waiting for messages sleep on (made by the first of them)
        self._pulled_ttr: dict[bytes, float] = {}
        self._pullers_wakeup: trio.Event | None = None

    def _changed(self) -> None:
        """Messages may be deliverable now: the broker pumps the channel, waiting HTTP
        pullers look again."""
        self.owner.mark_dirty(self)
        self.wake_pullers()

    def wake_pullers(self) -> None:
        if self._pullers_wakeup is not None:
            self._pullers_wakeup.set()
            self._pullers_wakeup = None

    def _disk_readable(self) -> None:
        self._changed()

    def _requeue(self, msgs: list[QueuedMessage]) -> None:
        self.backlog.put_back(msgs)
        self._changed()

    # -- arrivals ------------------------------------------------------------------------
    async def put(self, msgs: list[QueuedMessage], now: float) -> None:
        """Accept new messages from the topic (already this channel's own copies).

        Raises:
            DiskQueueError: the overflow could not be written to disk.
        """
        self.message_count += len(msgs)
        if self.backlog.extended and not self.backlog.explicit_commit:
            msgs = self._defer_jobs(msgs, now)
        if any(m.defer for m in msgs):
            undeferred = []
            for msg in msgs:
                if msg.defer:
                    msg.deadline = now + msg.defer  # the delay starts when the channel gets it
                    msg.defer = 0.0
                    self.deferred.add(msg)
                else:
                    undeferred.append(msg)
            msgs = undeferred
        if msgs:
            self._changed()
            await self.backlog.put(msgs)

    async def put_records(self, records: list[bytes]) -> None:
        """Accept new messages from the topic as their plain records (shared with the
        topic's other channels; immutable): nothing to defer, nothing to copy.

        Raises:
            DiskQueueError: the overflow could not be written to disk.
        """
        if records:
            self.message_count += len(records)
            self._changed()
            await self.backlog.put_records(records)

    # -- delivery ------------------------------------------------------------------------
    def pump(self, now: float) -> None:
        """Hand waiting messages to ready clients, spread across them in turn."""
        backlog = self.backlog
        if self.paused or not self.clients or not backlog.has_ready():
            return
        ready = [c for c in self.clients.values() if c.ready_slots() > 0]
        if not ready:
            return
        start = self._rotation % len(ready)
        self._rotation += 1
        ready = ready[start:] + ready[:start]
        while ready:
            slots = [c.ready_slots() for c in ready]
            # Plain records go in flight and out as they are unless something needs each
            # message looked at: expiries or jobs in the queue, or an attempts limit.
            records: Records | None = None
            msgs: list[QueuedMessage] = []
            if backlog.extended or self.max_attempts or self.default_max_attempts:
                msgs = self._deliverable(backlog.take(sum(slots)), now)
            else:
                taken = backlog.take_for_delivery(sum(slots))
                if isinstance(taken, Records):
                    records = taken
                else:  # a requeued message among them, or a job from disk
                    msgs = self._deliverable(taken, now)
            count = len(records) if records is not None else len(msgs)
            if not count and backlog.has_ready():
                continue  # all of them had expired or used up their attempts: take again
            if not count:
                return  # the disk queue wakes the channel again once it has read ahead
            pos = 0
            for client, n in zip(ready, spread(count, slots), strict=True):
                if n:
                    if records is not None:
                        self._deliver_records(client, records[pos:pos + n], now)
                    else:
                        self._deliver(client, msgs[pos:pos + n], now)
                    pos += n
            # Everything taken went out, so a client still ready here is one the backlog ran
            # short for, or one whose sampled-out messages did not count: take again.
            ready = [c for c in ready if c.ready_slots() > 0]

    def _deliverable(self, msgs: list[QueuedMessage], now: float) -> list[QueuedMessage]:
        """``msgs`` without the expired (dropped), the delayed jobs (deferred till due), the
        deleted jobs, and those whose attempts are used up (to the dead letters); none of
        these checks runs on a channel that never needs it."""
        if self.backlog.extended:
            msgs = self._drop_expired(msgs)
            if self._cancelled:
                msgs = self._drop_cancelled(msgs)
            msgs = self._defer_jobs(msgs, now)
        return self._within_attempts(msgs)

    def _within_attempts(self, msgs: list[QueuedMessage]) -> list[QueuedMessage]:
        """``msgs`` without those delivered as often as they may be, which become dead
        letters: a job's own tries, else the channel's limit."""
        limit = self.max_attempts or self.default_max_attempts
        if self.backlog.extended:
            kept: list[QueuedMessage] = []
            spent: list[QueuedMessage] = []
            for msg in msgs:
                most = msg.tries if msg.is_job else limit  # type: ignore[attr-defined]
                (spent if most and msg.attempts >= most else kept).append(msg)
        elif limit and msgs:
            spent = [m for m in msgs if m.attempts >= limit]
            kept = [m for m in msgs if m.attempts < limit] if spent else msgs
        else:
            return msgs
        if spent:
            self.dead_letters.pending.extend(spent)
            self.owner.mark_dirty(self)  # the broker stores them after this pump
        return kept

    def _defer_jobs(self, msgs: list[QueuedMessage], now: float) -> list[QueuedMessage]:
        """``msgs`` without the jobs not due yet, which wait in ``deferred``. Taken from the
        disk queue they stay unacknowledged there until done with, so a delayed job outlives
        even a ``kill -9`` under ``--sync-every 1``."""
        now_ns = time.time_ns()
        kept = []
        for msg in msgs:
            if msg.is_job and msg.due > now_ns:  # type: ignore[attr-defined]
                msg.deadline = now + (msg.due - now_ns) / 1e9  # type: ignore[attr-defined]
                self.deferred.add(msg)
            else:
                kept.append(msg)
        return kept

    def _drop_cancelled(self, msgs: list[QueuedMessage]) -> list[QueuedMessage]:
        cancelled = self._cancelled
        kept = []
        for msg in msgs:
            if msg.id in cancelled:
                cancelled.discard(msg.id)
                self.backlog.ack(msg.id)
            else:
                kept.append(msg)
        if not len(self.backlog):
            cancelled.clear()  # ids deleted twice, or never queued here: nothing left to meet
        return kept

    def cancel(self, message_id: bytes) -> None:
        """Delete a job wherever it waits (lmstfy's ack of a job not in flight): at once when
        it is delayed or in memory, else (on disk) when it is reached. A job in flight to a
        TCP consumer is left to that consumer."""
        msg = self.deferred.remove(message_id)
        if msg is None:
            msg = self.backlog.remove_waiting(message_id)
        if msg is not None:
            self.backlog.ack(message_id)
        elif message_id not in self.in_flight and self.backlog.disk_depth:
            self._cancelled.add(message_id)
            self.backlog.extended = True

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
        """Write the dead letters decided since the last call, then let their originals go
        from the channel's own queue.

        Raises:
            DiskQueueError: they could not be written (they stay pending).
        """
        if self._dead_letters is not None and self._dead_letters.pending:
            for msg in await self._dead_letters.store():
                self.backlog.ack(msg.id)

    def dead_letter_pulled(self, message_id: bytes) -> bool:
        """A pulled message its consumer gives up on: to the dead letters at once."""
        msg = self._take_pulled(message_id)
        if msg is None:
            return False
        self.dead_letters.pending.append(msg)
        self.owner.mark_dirty(self)
        return True

    def respawn(self, n: int, expires: int | None = None) -> int:
        """Up to ``n`` stored dead letters back to the queue, attempts reset (a job gets one
        try, as lmstfy gives it), with a new expiry when ``expires`` is given; how many."""
        if self._dead_letters is None:
            return 0
        msgs = self._dead_letters.take(n)
        for msg in msgs:
            msg.attempts = 0
            if msg.is_job:
                msg.tries = 1  # type: ignore[attr-defined]
                msg.due = 0  # type: ignore[attr-defined]
            if expires is not None:
                msg.expires = expires
        if msgs:
            if any(m.is_job or m.expires for m in msgs):
                self.backlog.extended = True
            self._requeue(msgs)
        return len(msgs)

    def _drop_expired(self, msgs: list[QueuedMessage]) -> list[QueuedMessage]:
        """``msgs`` without those past their expiry, which are counted and dropped (or kept
        as dead letters with ``dead_letter_expired``)."""
        now_ns = time.time_ns()
        kept = [m for m in msgs if not m.expires or m.expires > now_ns]
        if len(kept) < len(msgs):
            expired = [m for m in msgs if m.expires and m.expires <= now_ns]
            self.expired_count += len(expired)
            if self.dead_letter_expired:
                self.dead_letters.pending.extend(expired)  # acknowledged once stored
                self.owner.mark_dirty(self)
            else:
                for msg in expired:
                    self.backlog.ack(msg.id)
        return kept

    def _deliver(self, client: Consumer, batch: list[QueuedMessage], now: float) -> None:
        if client.sample_rate:
            # NSQ's sampling: a message not drawn is consumed without delivery, for this channel.
            rate = client.sample_rate
            kept = []
            for msg in batch:
                if random.randrange(100) <= rate:
                    kept.append(msg)
                else:
                    self.backlog.ack(msg.id)  # consumed without delivery, as in NSQ
            batch = kept
            if not batch:
                return
        self._put_in_flight(batch, client.id, now, now + client.msg_timeout)
        client.in_flight += len(batch)
        client.message_count += len(batch)
        client.send_messages(batch)

    def _deliver_records(self, client: Consumer, records: list[bytes], now: float) -> None:
        """``_deliver`` of plain records, which stay records in flight (``InFlightQueue
        .add_records``) and in the client's output (``send_records``)."""
        if client.sample_rate:
            self._deliver(client, decode_records(records), now)
            return
        self.in_flight.add_records(records, Delivery(client.id, now, now + client.msg_timeout))
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

    def peek(self, n: int, now: float) -> list[QueuedMessage]:
        """The next ``n`` messages the channel would deliver (waiting in memory, then on disk,
        then deferred ones already due), taking nothing and counting nothing."""
        out = self.backlog.peek(n)
        if len(out) < n and self.deferred:
            due = sorted((m for m in self.deferred if m.deadline <= now),
                         key=lambda m: m.deadline)
            out += due[:n - len(out)]
        now_ns = time.time_ns()  # expired ones would be dropped, delayed jobs wait
        return [m for m in out if (not m.expires or m.expires > now_ns)
                and not (m.is_job and m.due > now_ns)  # type: ignore[attr-defined]
                and m.id not in self._cancelled]

    # -- HTTP pulling ------------------------------------------------------------------------
    def pull(self, n: int, ttr: float, now: float) -> list[QueuedMessage]:
        """Up to ``n`` waiting messages, in flight for ``ttr`` seconds, owned by HTTP pullers
        (``PULLER``): they count in ``in_flight`` and time out like any delivery."""
        backlog = self.backlog
        msgs: list[QueuedMessage] = []
        while not msgs:
            if self.paused or self.deleted or not backlog.has_ready():
                return []
            msgs = self._deliverable(backlog.take(n), now)
        self._put_in_flight(msgs, PULLER, now, now + ttr)
        self._pulled_ttr.update((msg.id, ttr) for msg in msgs)
        return msgs

    async def wait_pullable(self) -> None:
        """Return once messages may be there to pull (a publish, a requeue, a timeout...)."""
        if self._pullers_wakeup is None:
            self._pullers_wakeup = trio.Event()
        await self._pullers_wakeup.wait()

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
        # plain call: _changed() cost the consume path 3-4%, measured with python -m bench)
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
        ``InFlightQueue.take_owned``; acknowledgements and latencies only when those are on;
        the counters and the pump's mark once.
        """
        taken, failed = self.in_flight.take_owned(message_ids, client.id)
        if self.backlog.explicit_commit:
            ack = self.backlog.ack
            for entry in taken:
                ack(entry_id(entry))
        e2e = self.e2e
        if e2e is not None:
            now_ns = time.time_ns()
            for entry in taken:
                e2e.observe(now_ns - entry_timestamp(entry))
        done = len(taken)
        if done:
            client.in_flight -= done
            client.finish_count += done
            self.owner.mark_dirty(self)  # the client may take more (see _take_in_flight)
        return [(message_id, NotOwner() if owned else NotInFlight())
                for message_id, owned in failed]

    def _finished(self, msg: QueuedMessage) -> None:
        """A FIN (over TCP or HTTP): the message is done with, its latency observed."""
        self.backlog.ack(msg.id)
        if self.e2e is not None:
            self.e2e.observe(time.time_ns() - msg.timestamp)

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
        for msg in expired:
            client = self.clients.get(msg.client_id)
            if client is not None:
                client.in_flight -= 1
            elif msg.client_id == PULLER:
                del self._pulled_ttr[msg.id]
        self.timeout_count += len(expired)
        if expired:
            expired = self._within_attempts(expired)  # no delivery left: a dead letter now
        self._requeue(expired + due)
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

    def _may_flow(self) -> None:
        self._changed()

    def empty(self) -> None:
        """Drop queued, in-flight and deferred messages (NSQ's channel empty); the disk
        queue's files are dropped by the caller (it is I/O)."""
        self.backlog.clear_memory()
        self.backlog.ack_all()
        self.in_flight.clear()
        self._pulled_ttr.clear()
        self.deferred.clear()
        for client in self.clients.values():
            client.in_flight = 0
        self._changed()
