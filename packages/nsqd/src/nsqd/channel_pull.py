"""HTTP pulling of a channel (``POST /channel/consume``, lmstfy's consume) and lmstfy's
front door: look without taking (peek, size), find a message wherever it is, delete one,
purge what waits; pulled messages' FIN, REQ and TOUCH (docs/jobs.md)."""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

import trio

from .channel_dead import DeadLetterDoor
from .channel_state import PULLER, READ_BATCH
from .errors import DiskQueueError
from .lifecycle import Event
from .message import OWN
from .record import decode_record, is_plain, record_id

if TYPE_CHECKING:
    from .message import QueuedMessage


class PullDoor(DeadLetterDoor):
    """A channel as HTTP pullers and lmstfy's queues see it."""

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
        await self.fetch()
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
        return self._find_dead(message_id)

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
        (see ``tombstones``); a dead letter: gone, its entry left (see ``dead_deleted``).
        False if it is nowhere here."""
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
        if offset is not None:
            self.tombstones.add(offset)
            return True
        if self._find_dead(message_id) is not None:
            self.dead_deleted.add(message_id)
            return True
        return False

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
                    if cursor.passes(offset):  # done with, or deferred already (held ahead)
                        continue
                    if not is_plain(record):
                        msg = decode_record(record, offset)
                        if msg.due > wall and offset not in self.tombstones:
                            self._set_aside(msg, Event.DEFER)
                            continue
                    cursor.ack(offset)
                    count += 1
                cursor.read = max(cursor.read, min(first + len(records), end))
                cursor.passed(cursor.read)
        self.tombstones.clear()
        self.changed()
        return count

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
        """Have the next messages in memory (an HTTP pull, a peek or a find that is answered
        at once must not miss messages that are only on disk): the log's from the cursor on,
        and the own queue's (respawned dead letters), which its disk queue reads ahead."""
        own = self.own
        if own is not None and own.disk is not None and own.disk.depth() and not own.has_ready():
            try:
                await own.disk.wait_readable()
            except DiskQueueError:  # closed: nsqd is stopping, or the channel was deleted
                pass
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
