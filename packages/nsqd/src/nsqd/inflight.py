"""Deadline-ordered message sets, the equivalent of NSQ's in-flight and deferred priority queues.

In-flight messages are almost always added with ``deadline = now + the client's msg timeout``,
and nearly every client uses the same timeout, so arrival order is deadline order. They are
kept in an OrderedDict: add, remove by id (FIN) and pop-oldest are all O(1). A message whose
deadline is earlier than the newest one (a client with a shorter timeout, a TOUCH clipped by
max-msg-timeout) goes to a small heap instead; entries removed from the heap are left there
and skipped when popped, and the heap is rebuilt when dead entries dominate, so memory stays
bounded whatever the mix. Nothing here schedules anything: the queue scan calls ``pop_due``.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Iterator

from .message import QueuedMessage


class InFlightQueue:
    __slots__ = ("_all", "_dead", "_heap", "_ordered", "_seq", "_tail")

    def __init__(self) -> None:
        self._all: dict[bytes, QueuedMessage] = {}
        self._ordered: OrderedDict[bytes, QueuedMessage] = OrderedDict()
        self._heap: list[tuple[float, int, QueuedMessage]] = []
        self._reset()

    def _reset(self) -> None:
        self._all = {}
        self._ordered = OrderedDict()
        self._heap = []
        self._tail = float("-inf")
        self._seq = itertools.count()
        self._dead = 0

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, message_id: bytes) -> bool:
        return message_id in self._all

    def __iter__(self) -> Iterator[QueuedMessage]:
        return iter(list(self._all.values()))

    def get(self, message_id: bytes) -> QueuedMessage | None:
        return self._all.get(message_id)

    def add(self, msg: QueuedMessage) -> None:
        """Track ``msg`` until ``msg.deadline``; its id must not be present."""
        self._all[msg.id] = msg
        if msg.deadline >= self._tail:
            self._ordered[msg.id] = msg
            self._tail = msg.deadline
        else:
            heapq.heappush(self._heap, (msg.deadline, next(self._seq), msg))

    def add_many(self, msgs: list[QueuedMessage], deadline: float) -> None:
        """``add`` of each of ``msgs``, all with ``deadline`` (already set on them): a
        delivery. One dict built and merged into both tables instead of two stores and a
        comparison per message (nsqd's consume path, python -m bench.writer_reader)."""
        if deadline < self._tail:
            for msg in msgs:
                self.add(msg)
            return
        by_id = {msg.id: msg for msg in msgs}
        self._all.update(by_id)
        self._ordered.update(by_id)
        self._tail = deadline

    def take_owned(self, message_ids: list[bytes], owner: int
                   ) -> tuple[list[QueuedMessage], list[tuple[bytes, bool]]]:
        """Remove each of ``message_ids`` that is in flight to ``owner``, in order (FINs):
        the messages removed, and the ids that were not, each with whether it was in flight
        (to another owner) or not at all. ``remove`` per id, with the bookkeeping once."""
        all_ = self._all
        get = all_.get
        pop_ordered = self._ordered.pop
        taken: list[QueuedMessage] = []
        failed: list[tuple[bytes, bool]] = []
        dead = 0
        for message_id in message_ids:
            msg = get(message_id)
            if msg is None:
                failed.append((message_id, False))
            elif msg.client_id != owner:
                failed.append((message_id, True))
            else:
                del all_[message_id]
                if pop_ordered(message_id, None) is None:
                    dead += 1
                taken.append(msg)
        if dead:
            self._dead += dead
            if self._dead > 1024 and self._dead * 2 > len(self._heap):
                self._rebuild_heap()
        if not self._ordered:
            self._tail = float("-inf")
        return taken, failed

    def remove(self, message_id: bytes) -> QueuedMessage | None:
        msg = self._all.pop(message_id, None)
        if msg is None:
            return None
        if self._ordered.pop(message_id, None) is None:
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
        while ordered:
            key = next(iter(ordered))
            msg = ordered[key]
            if msg.deadline > now:
                break
            ordered.popitem(last=False)
            del self._all[key]
            due.append(msg)
        if not ordered:
            self._tail = float("-inf")
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, msg = heapq.heappop(heap)
            if self._all.get(msg.id) is msg and msg.deadline == deadline and msg.id not in ordered:
                del self._all[msg.id]
                due.append(msg)
            else:
                self._dead -= 1
        return due

    def next_deadline(self) -> float | None:
        candidates = []
        if self._ordered:
            candidates.append(self._ordered[next(iter(self._ordered))].deadline)
        if self._heap:
            candidates.append(self._heap[0][0])
        return min(candidates) if candidates else None

    def clear(self) -> list[QueuedMessage]:
        msgs = list(self._all.values())
        self._reset()
        return msgs

    def _rebuild_heap(self) -> None:
        live = [(m.deadline, next(self._seq), m) for _, _, m in self._heap
                if self._all.get(m.id) is m and m.id not in self._ordered]
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
