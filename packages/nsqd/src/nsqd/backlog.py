"""A small private queue of messages: a channel's own queue and its dead letters.

Most messages live in their topic's log (``topiclog``); these are the few that belong to one
channel alone: dead letters (``deadletters``), the dead letters respawned from them, and
messages brought from Go's per-channel files (the channel's *own queue*). They wait in memory
up to ``mem_size`` and in an internal log of the channel beyond it (``privatelog``: a log and
a cursor, as a topic's), so that they are as durable as the topic's messages.

A record taken from the log stays there until its message is done with (``ack``), so a crash
(even a ``kill -9``) never loses one: the log's cursor moves past a record only once it is
acknowledged, and its mark-delete position over the longest acknowledged prefix. Messages may
be acknowledged in any order. Ephemeral channels have no internal log: their queues live in
memory.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from .message import QueuedMessage
from .record import decode_records, encode_records, record_id

if TYPE_CHECKING:
    from .privatelog import PrivateLog


class Backlog:
    def __init__(self, mem_size: int, disk: PrivateLog | None,
                 on_readable: Callable[[], None]) -> None:
        self.memory: deque[QueuedMessage] = deque()
        self.mem_size = mem_size
        self.disk = disk
        self.dropped = 0
        self._on_readable = on_readable
        # the offsets in the log of the messages taken from it and not acknowledged, by id
        self._unacked: dict[bytes, list[int]] = {}

    def __len__(self) -> int:
        return len(self.memory) + (self.disk.depth() if self.disk is not None else 0)

    @property
    def disk_depth(self) -> int:
        return self.disk.depth() if self.disk is not None else 0

    def has_ready(self) -> bool:
        """Messages that ``take`` can hand out right now."""
        return bool(self.memory) or (self.disk is not None and self.disk.ready() > 0)

    def put_back(self, msgs: list[QueuedMessage]) -> None:
        """Messages coming back to the queue (already stored, or never to be): memory."""
        self.memory.extend(msgs)

    async def put(self, msgs: list[QueuedMessage]) -> None:
        """New messages: memory while there is room, the rest to disk (awaited).

        Raises:
            LogError: the disk write failed; nothing of ``msgs`` past memory was kept.
        """
        room = max(self.mem_size - len(self.memory), 0)
        self.memory.extend(msgs[:room])
        rest = msgs[room:]
        if not rest:
            return
        if self.disk is None:
            self.dropped += len(rest)
            return
        await self.disk.put(encode_records(rest))

    def peek(self, n: int) -> list[QueuedMessage]:
        """The next ``n`` messages ``take`` would hand out (memory, then what the log has in
        memory), left in place."""
        out = list(itertools.islice(self.memory, n))
        if self.disk is not None and len(out) < n:
            out += decode_records(self.disk.peek(n - len(out)))
        return out

    def take(self, n: int) -> list[QueuedMessage]:
        """Up to ``n`` messages, memory first, then what the log has in memory (those stay
        in the log until acknowledged)."""
        memory = self.memory
        out = [memory.popleft() for _ in range(min(n, len(memory)))]
        if self.disk is not None and len(out) < n:
            read = self.disk.pop(n - len(out))
            unacked = self._unacked
            for record, offset in read:
                unacked.setdefault(record_id(record), []).append(offset)
            if read:
                out += decode_records([record for record, _ in read])
        return out

    def ack(self, message_id: bytes) -> None:
        """This message is done with: acknowledged in the log (the oldest copy taken, should
        it hold the same message twice)."""
        offsets = self._unacked.get(message_id)
        if not offsets:
            return
        offset = offsets.pop(0)
        if not offsets:
            del self._unacked[message_id]
        assert self.disk is not None
        self.disk.ack(offset)

    def ack_all(self) -> None:
        """Everything taken so far is done with (emptied)."""
        if self.disk is not None:
            for offsets in self._unacked.values():
                for offset in offsets:
                    self.disk.ack(offset)
        self._unacked.clear()

    def remove_waiting(self, message_id: bytes) -> QueuedMessage | None:
        """Take the message ``message_id`` out of memory, if it waits there."""
        for msg in self.memory:
            if msg.id == message_id:
                self.memory.remove(msg)
                return msg
        return None

    def clear_memory(self) -> list[QueuedMessage]:
        msgs = list(self.memory)
        self.memory.clear()
        return msgs

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the log's task going and tell the owner when records come in from disk."""
        disk = self.disk
        if disk is None:
            task_status.started()
            return
        async with trio.open_nursery() as nursery:
            await nursery.start(disk.run)
            task_status.started()
            while True:
                await disk.wait_read_in()
                self._on_readable()
