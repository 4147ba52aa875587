"""Deadline-ordered message sets, the equivalent of NSQ's in-flight and deferred priority queues.

In-flight messages are almost always added with ``deadline = now + the client's msg timeout``,
and nearly every client uses the same timeout, so arrival order is deadline order. They are
kept in a plain dict, whose order is insertion order: add, remove by id (FIN) and taking the
oldest are all O(1) (amortised: CPython's dict leaves a deleted entry's slot until it next
resizes, so finding the oldest skips at most the slots of the entries deleted since; the scan
that looks for due messages runs every 100 ms). A plain dict rather than an OrderedDict, and
no second dict of every message: an OrderedDict insert or delete costs about twice a dict's,
and the delivery path does both for every message. A message whose deadline is earlier than
the newest one (a client with a shorter timeout, a TOUCH clipped by max-msg-timeout) goes to a
small heap instead, with its own dict of the live entries; entries removed from the heap are
left there and skipped when popped, and the heap is rebuilt when dead entries dominate, so
memory stays bounded whatever the mix. Nothing here schedules anything: the queue scan calls
``pop_due``.

A message delivered straight from its record (``add_records``: a plain record of the topic's
log, see ``record``) is kept as that record, its ``Delivery`` (one object shared by every
message of the batch: owner, deadline, time of delivery) and its offset in the log: FIN needs
nothing more. Its ``QueuedMessage`` is made only when something asks for the message itself
(REQ, TOUCH, a timeout, a disconnect, a save), and then replaces the pair in place. Making the
message, its id and body for every delivery cost 450 ns of the 1.37 us nsqd spent per message
delivered from memory (python -m bench.writer_reader); the pair costs about 60.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence
from itertools import repeat
from operator import attrgetter

from nsq_common import MESSAGE_HEADER

from .message import QueuedMessage
from .record import HEADER_SIZE, ID

_id = attrgetter("id")


class Delivery:
    """One delivery of a batch of records to one owner, shared by the batch's messages."""

    __slots__ = ("deadline", "delivered", "owner")

    def __init__(self, owner: int, delivered: float, deadline: float) -> None:
        self.owner = owner  # client id, or channel.PULLER
        self.delivered = delivered  # when it went in flight
        self.deadline = deadline


#: What the table holds for a message in flight: the message, or its plain record (with the
#: attempts before this delivery), its delivery and its offset.
Entry = QueuedMessage | tuple[bytes, Delivery, int]


def delivered_message(record: bytes, delivery: Delivery, offset: int) -> QueuedMessage:
    """The in-flight message for a plain record delivered by ``delivery``: one attempt more
    than the record says, as a delivery does."""
    timestamp, attempts = MESSAGE_HEADER.unpack_from(record)
    msg = QueuedMessage(record[ID], record[HEADER_SIZE:], timestamp,
                        attempts + 1 if attempts < 65535 else attempts, offset=offset)
    msg.client_id = delivery.owner
    msg.delivered = delivery.delivered
    msg.deadline = delivery.deadline
    return msg


def entry_id(entry: Entry) -> bytes:
    return entry[0][ID] if isinstance(entry, tuple) else entry.id


def entry_offset(entry: Entry) -> int:
    """Its offset in the topic's log (``message.OWN`` for a channel's own message)."""
    return entry[2] if isinstance(entry, tuple) else entry.offset


def entry_timestamp(entry: Entry) -> int:
    """When the message was published (ns since the epoch)."""
    if isinstance(entry, tuple):
        timestamp: int = MESSAGE_HEADER.unpack_from(entry[0])[0]
        return timestamp
    return entry.timestamp


def _deadline(entry: Entry) -> float:
    return entry[1].deadline if isinstance(entry, tuple) else entry.deadline


def _owner(entry: Entry) -> int:
    return entry[1].owner if isinstance(entry, tuple) else entry.client_id


class InFlightQueue:
    __slots__ = ("_dead", "_heap", "_in_heap", "_ordered", "_seq", "_tail")

    def __init__(self) -> None:
        self._ordered: dict[bytes, Entry] = {}  # in deadline order
        self._in_heap: dict[bytes, QueuedMessage] = {}  # the live entries of _heap
        self._heap: list[tuple[float, int, QueuedMessage]] = []
        self._reset()

    def _reset(self) -> None:
        self._ordered = {}
        self._in_heap = {}
        self._heap = []
        self._tail = float("-inf")
        self._seq = itertools.count()
        self._dead = 0

    def __len__(self) -> int:
        return len(self._ordered) + len(self._in_heap)

    def __contains__(self, message_id: bytes) -> bool:
        return message_id in self._ordered or message_id in self._in_heap

    def __iter__(self) -> Iterator[QueuedMessage]:
        return iter([*self._messages(list(self._ordered)), *self._in_heap.values()])

    def _messages(self, message_ids: list[bytes]) -> list[QueuedMessage]:
        """The messages of ``message_ids`` (in ``_ordered``), each record and delivery made
        into its message in place."""
        ordered = self._ordered
        out = []
        for message_id in message_ids:
            entry = ordered[message_id]
            if isinstance(entry, tuple):
                entry = ordered[message_id] = delivered_message(*entry)
            out.append(entry)
        return out

    def get(self, message_id: bytes) -> QueuedMessage | None:
        entry = self._ordered.get(message_id)
        if entry is None:
            return self._in_heap.get(message_id) if self._in_heap else None
        if isinstance(entry, tuple):
            entry = self._ordered[message_id] = delivered_message(*entry)
        return entry

    def add(self, msg: QueuedMessage) -> None:
        """Track ``msg`` until ``msg.deadline``; its id must not be present."""
        if msg.deadline >= self._tail:
            self._ordered[msg.id] = msg
            self._tail = msg.deadline
        else:
            heapq.heappush(self._heap, (msg.deadline, next(self._seq), msg))
            self._in_heap[msg.id] = msg

    def add_many(self, msgs: list[QueuedMessage], deadline: float) -> None:
        """``add`` of each of ``msgs``, all with ``deadline`` (already set on them): a
        delivery, in one dict update."""
        if deadline < self._tail:
            for msg in msgs:
                self.add(msg)
            return
        self._ordered.update(zip(map(_id, msgs), msgs, strict=True))
        self._tail = deadline

    def add_records(self, records: Sequence[bytes], delivery: Delivery, first_offset: int
                    ) -> None:
        """Plain records of the log from ``first_offset`` on, in flight by ``delivery``: kept
        as they are, each with the shared ``delivery`` and its offset, in one dict update."""
        offsets = range(first_offset, first_offset + len(records))
        if delivery.deadline < self._tail:  # a shorter timeout than the newest: the heap
            for record, offset in zip(records, offsets, strict=True):
                self.add(delivered_message(record, delivery, offset))
            return
        # (the inner zip stops with ``records``)
        entries = zip(records, repeat(delivery), offsets)
        self._ordered.update(zip([r[ID] for r in records], entries, strict=True))
        self._tail = delivery.deadline

    def take_owned(self, message_ids: list[bytes], owner: int
                   ) -> tuple[list[Entry], list[tuple[bytes, bool]]]:
        """Remove each of ``message_ids`` that is in flight to ``owner``, in order (FINs):
        what was removed (``entry_id``, ``entry_timestamp``), and the ids that were not, each
        with whether it was in flight (to another owner) or not at all. ``get`` and
        ``remove`` per id in one loop."""
        ordered = self._ordered
        get = ordered.get
        taken: list[Entry] = []
        failed: list[tuple[bytes, bool]] = []
        for message_id in message_ids:
            entry = get(message_id)
            if entry is not None and (entry[1].owner if isinstance(entry, tuple)
                                      else entry.client_id) == owner:
                del ordered[message_id]
                taken.append(entry)
                continue
            msg = entry if entry is not None else self._in_heap.get(message_id)
            if msg is None:
                failed.append((message_id, False))
            elif _owner(msg) != owner:
                failed.append((message_id, True))
            else:  # in the heap
                self.remove(message_id)
                taken.append(msg)
        if not ordered:
            self._tail = float("-inf")
        return taken, failed

    def remove(self, message_id: bytes) -> QueuedMessage | None:
        entry = self._ordered.pop(message_id, None)
        if entry is None:
            msg = self._in_heap.pop(message_id, None)
            if msg is None:
                return None
            self._dead += 1
            if self._dead > 1024 and self._dead * 2 > len(self._heap):
                self._rebuild_heap()
            entry = msg
        if not self._ordered:
            self._tail = float("-inf")
        return delivered_message(*entry) if isinstance(entry, tuple) else entry

    def take_all_owned(self, owner: int) -> list[QueuedMessage]:
        """Remove and return every message in flight to ``owner`` (it went away)."""
        mine = [mid for mid, entry in self._ordered.items() if _owner(entry) == owner]
        msgs = self._messages(mine)
        for message_id in mine:
            del self._ordered[message_id]
        heap_mine = [m.id for m in self._in_heap.values() if m.client_id == owner]
        msgs += [m for m in map(self.remove, heap_mine) if m is not None]
        if not self._ordered:
            self._tail = float("-inf")
        return msgs

    def ids_by_offset(self) -> Iterator[tuple[int, bytes]]:
        """(offset, id) of every message of the log in flight."""
        for message_id, entry in self._ordered.items():
            offset = entry[2] if isinstance(entry, tuple) else entry.offset
            if offset >= 0:
                yield offset, message_id
        for msg in self._in_heap.values():
            if msg.offset >= 0:
                yield msg.offset, msg.id

    def attempts_by_offset(self) -> Iterator[tuple[int, int]]:
        """(offset, attempts) of every message in flight, none made into a message."""
        for entry in self._ordered.values():
            if isinstance(entry, tuple):
                attempts = entry[0][8] << 8 | entry[0][9]
                yield entry[2], attempts + 1 if attempts < 65535 else attempts
            else:
                yield entry.offset, entry.attempts
        for msg in self._in_heap.values():
            yield msg.offset, msg.attempts

    def pop_due(self, now: float) -> list[QueuedMessage]:
        """Remove and return every message whose deadline is at or before ``now``."""
        due_ids: list[bytes] = []
        ordered = self._ordered
        for message_id, entry in ordered.items():  # deadline order: stop at the first not due
            if _deadline(entry) > now:
                break
            due_ids.append(message_id)
        due = self._messages(due_ids)
        for message_id in due_ids:
            del ordered[message_id]
        if not ordered:
            self._tail = float("-inf")
        heap = self._heap
        in_heap = self._in_heap
        while heap and heap[0][0] <= now:
            deadline, _, msg = heapq.heappop(heap)
            if in_heap.get(msg.id) is msg and msg.deadline == deadline:
                del in_heap[msg.id]
                due.append(msg)
            else:
                self._dead -= 1
        return due

    def next_deadline(self) -> float | None:
        candidates = []
        if self._ordered:
            candidates.append(_deadline(next(iter(self._ordered.values()))))
        if self._heap:
            candidates.append(self._heap[0][0])
        return min(candidates) if candidates else None

    def clear(self) -> list[QueuedMessage]:
        msgs = list(self)
        self._reset()
        return msgs

    def _rebuild_heap(self) -> None:
        live = [(m.deadline, next(self._seq), m) for m in self._in_heap.values()]
        heapq.heapify(live)
        self._heap = live
        self._dead = 0


class DeferredQueue:
    """Messages held back until a due time (REQ with a delay, DPUB, a delayed job). A plain
    heap: deferred messages leave when due, when the channel is emptied, or (rarely: a job
    deleted early) by id."""

    __slots__ = ("_heap", "_ids", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, QueuedMessage]] = []
        self._ids: set[bytes] = set()
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, message_id: bytes) -> bool:
        return message_id in self._ids

    def __iter__(self) -> Iterator[QueuedMessage]:
        return iter([m for _, _, m in self._heap])

    def add(self, msg: QueuedMessage) -> None:
        heapq.heappush(self._heap, (msg.deadline, next(self._seq), msg))
        self._ids.add(msg.id)

    def pop_due(self, now: float) -> list[QueuedMessage]:
        due = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            msg = heapq.heappop(heap)[2]
            self._ids.discard(msg.id)
            due.append(msg)
        return due

    def remove(self, message_id: bytes) -> QueuedMessage | None:
        """Take one message out before it is due (a job deleted while delayed): a scan."""
        if message_id not in self._ids:
            return None
        index = next(i for i, entry in enumerate(self._heap) if entry[2].id == message_id)
        msg = self._heap.pop(index)[2]
        heapq.heapify(self._heap)
        self._ids.discard(message_id)
        return msg

    def next_deadline(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def clear(self) -> list[QueuedMessage]:
        msgs = [m for _, _, m in self._heap]
        self._heap.clear()
        self._ids.clear()
        return msgs
