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
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from operator import attrgetter

from .message import QueuedMessage

_id = attrgetter("id")


class InFlightQueue:
    __slots__ = ("_dead", "_heap", "_in_heap", "_ordered", "_seq", "_tail")

    def __init__(self) -> None:
        self._ordered: dict[bytes, QueuedMessage] = {}  # in deadline order
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
        return iter([*self._ordered.values(), *self._in_heap.values()])

    def get(self, message_id: bytes) -> QueuedMessage | None:
        msg = self._ordered.get(message_id)
        if msg is None and self._in_heap:
            return self._in_heap.get(message_id)
        return msg

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

    def take_owned(self, message_ids: list[bytes], owner: int
                   ) -> tuple[list[QueuedMessage], list[tuple[bytes, bool]]]:
        """Remove each of ``message_ids`` that is in flight to ``owner``, in order (FINs):
        the messages removed, and the ids that were not, each with whether it was in flight
        (to another owner) or not at all. ``get`` and ``remove`` per id in one loop."""
        ordered = self._ordered
        get = ordered.get
        taken: list[QueuedMessage] = []
        failed: list[tuple[bytes, bool]] = []
        for message_id in message_ids:
            msg = get(message_id)
            if msg is not None and msg.client_id == owner:
                del ordered[message_id]
                taken.append(msg)
                continue
            if msg is None:
                msg = self.get(message_id)  # in the heap, if anywhere
            if msg is None:
                failed.append((message_id, False))
            elif msg.client_id != owner:
                failed.append((message_id, True))
            else:
                self.remove(message_id)
                taken.append(msg)
        if not ordered:
            self._tail = float("-inf")
        return taken, failed

    def remove(self, message_id: bytes) -> QueuedMessage | None:
        msg = self._ordered.pop(message_id, None)
        if msg is None:
            msg = self._in_heap.pop(message_id, None)
            if msg is None:
                return None
            self._dead += 1
            if self._dead > 1024 and self._dead * 2 > len(self._heap):
                self._rebuild_heap()
        if not self._ordered:
            self._tail = float("-inf")
        return msg

    def pop_due(self, now: float) -> list[QueuedMessage]:
        """Remove and return every message whose deadline is at or before ``now``."""
        due: list[QueuedMessage] = []
        ordered = self._ordered
        for msg in ordered.values():  # deadline order: stop at the first not due
            if msg.deadline > now:
                break
            due.append(msg)
        for msg in due:
            del ordered[msg.id]
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
            candidates.append(next(iter(self._ordered.values())).deadline)
        if self._heap:
            candidates.append(self._heap[0][0])
        return min(candidates) if candidates else None

    def clear(self) -> list[QueuedMessage]:
        msgs = [*self._ordered.values(), *self._in_heap.values()]
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
