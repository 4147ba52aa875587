"""HTTP pulling of a channel (``POST /channel/consume``, lmstfy's consume) and lmstfy's
front door: look without taking (peek, size), find a message wherever it is, delete one,
purge what waits; pulled messages' FIN, REQ and TOUCH (docs/jobs.md). Every move of a message
is the channel's ``MessageStates``' (``channel_state``); this is what pullers and lmstfy ask,
and the wake-up they wait on."""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

import trio

from .channel_state import PULLER, READ_BATCH
from .errors import LogError
from .lifecycle import Event
from .record import decode_record, record_id

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from .channel_state import MessageStates
    from .message import QueuedMessage
    from .runs import Run


class PullDoor:
    """A channel as HTTP pullers and lmstfy's queues see it."""

    def __init__(self, states: MessageStates) -> None:
        self.states = states
        # the event that pullers waiting for messages sleep on (made by the first of them)
        self._wakeup: trio.Event | None = None

    # -- waiting for messages ----------------------------------------------------------------
    def wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    def pull_wakeup(self) -> trio.Event:
        """The event set when messages may be there to pull next (a publish, a requeue, a
        timeout...): taken before the caller's next checkpoint, it cannot miss one."""
        if self._wakeup is None:
            self._wakeup = trio.Event()
        return self._wakeup

    async def fetch(self) -> None:
        """Have the next messages in memory (an HTTP pull, a peek or a find that is answered
        at once must not miss messages that are only on disk): the log's from the cursor on,
        and the own queue's (respawned dead letters), which its disk queue reads ahead."""
        states = self.states
        own = states.waiting.own
        if own is not None and own.disk is not None and own.disk.depth() and not own.has_ready():
            try:
                await own.disk.wait_readable()
            except LogError:  # closed: nsqd is stopping, or the channel was deleted
                pass
        if states.cursor.read < states.topic.visible_end:
            await states.log.fetch(states.cursor.read)

    # -- pulling and the answers -------------------------------------------------------------
    def pull(self, n: int, ttr: float, now: float, *, stop_at_stale: bool = False
             ) -> list[QueuedMessage]:
        """Up to ``n`` waiting messages, in flight for ``ttr`` seconds, owned by HTTP pullers
        (``PULLER``): they count in ``in_flight`` and time out like any delivery
        (``stop_at_stale``: see ``MessageStates.take``)."""
        states = self.states
        msgs = states.take(n, stop_at_stale=stop_at_stale)
        states.put_in_flight(msgs, PULLER, now, now + ttr)
        states.pulled_ttr.update((msg.id, ttr) for msg in msgs)
        return msgs

    def _take_pulled(self, message_id: bytes) -> QueuedMessage | None:
        msg = self.states.in_flight.get(message_id)
        if msg is None or msg.client_id != PULLER:
            return None
        self.states.take_in_flight(msg)
        return msg

    def finish_pulled(self, message_id: bytes) -> bool:
        """FIN of a pulled message; False when it is not in flight for a puller."""
        msg = self._take_pulled(message_id)
        if msg is None:
            return False
        self.states.finished(msg)
        return True

    def requeue_pulled(self, message_id: bytes, delay: float, now: float) -> bool:
        """REQ of a pulled message, now or after ``delay`` seconds."""
        msg = self._take_pulled(message_id)
        if msg is None:
            return False
        self.states.put_back(msg, delay, now)
        return True

    def touch_pulled(self, message_id: bytes, now: float) -> bool:
        """TOUCH: its ttr again from now, never past delivery + max-msg-timeout."""
        states = self.states
        msg = states.in_flight.get(message_id)
        if msg is None or msg.client_id != PULLER:
            return False
        states.touch(msg, states.pulled_ttr[message_id], now)
        return True

    def dead_letter_pulled(self, message_id: bytes) -> bool:
        """A pulled message its consumer gives up on: to the dead letters at once."""
        msg = self._take_pulled(message_id)
        if msg is None:
            return False
        self.states.gave_up(msg)
        return True

    # -- looking without taking ----------------------------------------------------------------
    def peek(self, n: int, now: float) -> list[QueuedMessage]:
        """The next ``n`` messages the channel would deliver, in the order consumes would
        take them (requeued, own, then the log as far as it is in memory, with deferred ones
        already due where they come back), taking nothing."""
        states = self.states
        wall = states.clock.wall_ns()
        limit = states.limits.attempt_limit
        due = {m.id for m in states.deferred if m.deadline <= now} if states.deferred else ()
        out: list[QueuedMessage] = []
        for msg in self._waiting(n, now):
            # a deferral come due is waiting again (its delay over) once the scan meets it
            if states.verdict(msg, max(wall, msg.due) if msg.id in due else wall,
                              limit) is Event.DELIVER:
                out.append(msg)
                if len(out) >= n:
                    break
        return out

    def peek_head(self) -> tuple[QueuedMessage, bool] | None:
        """lmstfy's peek: the first message waiting and due, and whether it is stale (deleted
        or expired while waiting: lmstfy shows such a head without its data)."""
        wall = self.states.clock.wall_ns()
        for msg in self._waiting(READ_BATCH):
            if msg.due > wall:
                continue  # delayed: not in lmstfy's ready list yet
            stale = (msg.offset in self.states.waiting.tombstones
                     or bool(msg.expires and msg.expires <= wall))
            return msg, stale
        return None

    def delayed(self, n: int, wall_ns: int) -> list[QueuedMessage]:
        """The ``n`` deferred messages due soonest whose due time has not come (lmstfy's
        delayed jobs), left in place."""
        return sorted((m for m in self.states.deferred if m.due > wall_ns),
                      key=lambda m: m.due)[:n]

    def _waiting(self, n: int, now: float | None = None) -> Iterator[QueuedMessage]:
        """What would be delivered next, in order, without taking it: ``take``'s order,
        played on a copy of the cursor's position, the log read ``n`` records at a time as
        far as the caller looks. A requeued message (a deferral come due, a timeout) waits
        until the log is read past what it went behind, a respawned one (the own queue) the
        same; at the log's end (what is in memory) the rest of both. With ``now``, deferred
        messages due by then count as come back now (the scan puts them there next)."""
        states = self.states
        requeued = states.waiting.requeued.turns()
        if now is not None and states.deferred:
            turn = states.waiting.turn()
            requeued += [(turn, m) for m in sorted(
                (m for m in states.deferred if m.deadline <= now), key=lambda m: m.deadline)]
        own = states.waiting.own.peek(n) if states.waiting.own is not None else []
        own_after = states.waiting.requeued.own_turn
        read = states.cursor.read
        r = o = 0
        for msg in self._decoded_copy(states.waiting.reader.unread(n)):
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

    def _decoded_copy(self, runs: Iterable[Run]) -> Iterator[QueuedMessage]:
        extras = self.states.cursor.extras
        for first, records, _ in runs:
            for i, record in enumerate(records):
                msg = decode_record(record, first + i)
                if extras and msg.offset in extras:
                    msg.attempts = max(msg.attempts, extras[msg.offset][0])
                yield msg

    async def find(self, message_id: bytes) -> QueuedMessage | None:
        """The message wherever it is in this channel, not done with nor deleted: in
        flight, deferred, waiting (requeued, own, in the log), or a dead letter."""
        await self.fetch()
        states = self.states
        found = states.in_flight.get(message_id)
        if found is not None:
            return found
        for msg in chain(states.deferred, states.waiting.requeued):
            if msg.id == message_id:
                return None if msg.offset in states.waiting.tombstones else msg
        if states.waiting.own is not None:
            for msg in states.waiting.own.peek(len(states.waiting.own)):
                if msg.id == message_id:
                    return msg
        offset = await self._find_unread(message_id)
        if offset is not None and offset not in states.waiting.tombstones:
            runs = await states.log.read_at(offset, 1)
            if runs:
                return decode_record(runs[0][1][0], offset)
        return states.find_dead(message_id)

    async def _find_unread(self, message_id: bytes) -> int | None:
        """The offset of ``message_id`` among the records the cursor has not reached."""
        states = self.states
        cursor = states.cursor
        offset = cursor.read
        end = states.topic.visible_end
        while offset < end:
            runs = await states.log.read_at(offset, READ_BATCH)
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
        (see ``Waiting.tombstones``); a dead letter: gone, its entry left (see
        ``DeadLetters.mark_deleted``). False if it is nowhere here."""
        states = self.states
        held = states.delete_held(message_id)
        if held is not None:
            return held
        offset = await self._find_unread(message_id)
        if offset is not None:
            states.tombstone(offset)
            return True
        if states.find_dead(message_id) is not None:
            states.delete_dead(message_id)
            return True
        return False
