"""A channel's delivery to its TCP consumers: who is subscribed, handing out messages within
each one's RDY, and their answers (FIN, REQ, TOUCH).

Each message goes to exactly one subscribed client. A client takes messages while its
in-flight count is below its RDY (a standing window, never decremented by delivery, as nsqd
does it). Plain records of the log are delivered as they are (no message made, nothing
decoded: ``output.record_frames``) unless the channel must look at each (an attempt limit,
state saved for them at the last shutdown). Every move of a message is the channel's
``MessageStates``' (``channel_state``); this keeps the clients' windows and counters.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Protocol

from .channel_state import READ_BATCH
from .errors import InFlightError, NotInFlight, NotOwner
from .inflight import Delivery
from .record import decode_records, is_plain
from .runs import split

if TYPE_CHECKING:
    from .channel_state import MessageStates
    from .message import QueuedMessage
    from .runs import Run


class Consumer(Protocol):
    """What a channel needs of a subscribed client (``client.Client`` is one; tests use
    fakes): its id, its RDY window, its counters (each changed by the client's own method),
    a way to send, and a way to drop it."""

    id: int
    msg_timeout: float
    sample_rate: int
    disconnect: Callable[[], None]

    def ready_slots(self) -> int: ...

    def took(self, count: int) -> None: ...

    def finished(self, count: int) -> None: ...

    def requeued(self) -> None: ...

    def timed_out(self, count: int) -> None: ...

    def nothing_in_flight(self) -> None: ...

    def send_messages(self, msgs: list[QueuedMessage]) -> None: ...

    def send_records(self, records: Sequence[bytes]) -> None:
        """Send plain records (see ``record``) as message frames, one attempt more."""
        ...


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


class Subscribers:
    """A channel's TCP consumers and delivery to them."""

    def __init__(self, states: MessageStates, mark_dirty: Callable[[], None]) -> None:
        self.states = states
        self.clients: dict[int, Consumer] = {}
        self._rotation = 0
        # have the broker pump the channel: a client may take more (once per FIN, so the
        # plain call, not ``changed``: that cost the consume path 3-4%, python -m bench)
        self._mark_dirty = mark_dirty

    # -- subscribers -------------------------------------------------------------------------
    def add(self, client: Consumer) -> None:
        self.clients[client.id] = client

    def remove(self, client: Consumer) -> bool:
        """Drop a subscriber; its in-flight messages wait again at once. False if it was
        not one."""
        if self.clients.pop(client.id, None) is None:
            return False
        self.states.owner_gone(client.id)
        client.nothing_in_flight()
        return True

    def disconnect_all(self) -> None:
        """Every subscriber disconnected and dropped (the channel is deleted)."""
        for client in list(self.clients.values()):
            client.disconnect()
        self.clients.clear()

    def nothing_in_flight(self) -> None:
        """The channel forgot what was in flight (emptied)."""
        for client in self.clients.values():
            client.nothing_in_flight()

    def timed_out(self, msgs: list[QueuedMessage]) -> None:
        """``msgs``' deadlines passed: their clients have a slot free again."""
        for msg in msgs:
            client = self.clients.get(msg.client_id)
            if client is not None:
                client.timed_out(1)

    # -- delivery ------------------------------------------------------------------------------
    def pump(self, now: float) -> None:
        """Hand waiting messages to ready clients, spread across them in turn."""
        states = self.states
        if not self.clients or not states.waiting.has_waiting():
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
            if states.waiting.records_fit():
                runs = states.waiting.read_log(min(want, READ_BATCH, states.waiting.room()))
                if runs is None:
                    return  # being read from disk (the log wakes us)
                if not runs:
                    # the end of what may be read (the records read were all passed over):
                    # what waited for a turn the read has now passed comes next (a deferral
                    # come due while nobody was subscribed, say), or nothing more
                    msgs = states.take(want)
                    if not msgs:
                        return
                elif all(plain or all(map(is_plain, records)) for _, records, plain in runs):
                    self._deliver_runs(ready, slots, runs, now)
                    ready = [c for c in ready if c.ready_slots() > 0]
                    continue
                else:
                    wall = states.clock.wall_ns()
                    msgs = [m for m in states.decoded(runs) if states.keep(m, wall)]
                    if not msgs:
                        continue  # all set aside (deferred, expired...): the cursor moved on
            else:
                msgs = states.take(want)
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
            kept: list[QueuedMessage] = []
            dropped: list[QueuedMessage] = []
            for msg in batch:
                (kept if random.randrange(100) <= rate else dropped).append(msg)
            if dropped:
                self.states.sampled_out(dropped)
            batch = kept
            if not batch:
                return
        self.states.put_in_flight(batch, client.id, now, now + client.msg_timeout)
        client.took(len(batch))
        client.send_messages(batch)

    def _deliver_records(self, client: Consumer, records: Sequence[bytes], first: int,
                         now: float) -> None:
        """``_deliver`` of plain records from offset ``first``, which stay records in flight
        (``InFlightQueue.add_records``) and in the client's output (``send_records``)."""
        if client.sample_rate:
            self._deliver(client, decode_records(records, first), now)
            return
        self.states.put_records_in_flight(
            records, Delivery(client.id, now, now + client.msg_timeout), first)
        client.took(len(records))
        client.send_records(records)

    # -- answers -------------------------------------------------------------------------------
    def _owned(self, client: Consumer, message_id: bytes) -> QueuedMessage:
        """The message ``message_id``, in flight to ``client``.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_FIN_FAILED, E_REQ_FAILED...
        """
        msg = self.states.owned(client.id, message_id)
        if msg is None:
            raise NotInFlight
        return msg

    def _take_in_flight(self, client: Consumer, message_id: bytes) -> QueuedMessage:
        """The message taken out of flight (the caller counts it on the client's side)."""
        msg = self._owned(client, message_id)
        self.states.take_in_flight(msg)
        self._mark_dirty()  # the client may take another
        return msg

    def finish(self, client: Consumer, message_id: bytes) -> None:
        """FIN.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_FIN_FAILED.
        """
        msg = self._take_in_flight(client, message_id)
        client.finished(1)
        self.states.finished(msg)

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
        done, failed = self.states.finish_owned(message_ids, client.id)
        if done:
            client.finished(done)
            self._mark_dirty()  # the client may take more
        return [(message_id, NotOwner() if owned else NotInFlight())
                for message_id, owned in failed]

    def requeue(self, client: Consumer, message_id: bytes, delay: float, now: float) -> None:
        """REQ: back to the queue at once, or deferred by ``delay`` seconds.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_REQ_FAILED.
        """
        msg = self._take_in_flight(client, message_id)
        client.requeued()
        self.states.put_back(msg, delay, now)

    def touch(self, client: Consumer, message_id: bytes, now: float) -> None:
        """TOUCH: restart the timeout, never past delivery + max-msg-timeout.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_TOUCH_FAILED.
        """
        self.states.touch(self._owned(client, message_id), client.msg_timeout, now)
