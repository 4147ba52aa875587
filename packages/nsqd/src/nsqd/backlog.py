"""A small private queue of messages: a channel's own queue and its dead letters.

Most messages live in their topic's log (``topiclog``); these are the few that belong to one
channel alone: dead letters (``deadletters``), the dead letters respawned from them, and
messages brought from Go's per-channel files (the channel's *own queue*). They wait in memory
up to ``mem_size`` and on a disk queue beyond it (go-diskqueue's format, ``diskqueue``), so
that they are as durable as the topic's messages.

The disk queue commits explicitly: a record read from disk stays on disk until its message
is done with (``ack``), so a crash (even a ``kill -9``) never loses one: the queue's persisted
read position moves past a record only once every record before it is acknowledged too.
Messages may be acknowledged in any order; the position advances over the longest
acknowledged prefix. Ephemeral channels have no disk queue: their queues live in memory.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable

import trio

from .diskqueue import DiskQueue, Pos
from .message import QueuedMessage
from .record import decode_records, encode_records, record_id


class Backlog:
    def __init__(self, mem_size: int, disk: DiskQueue | None,
                 on_readable: Callable[[], None]) -> None:
        self.memory: deque[QueuedMessage] = deque()
        self.mem_size = mem_size
        self.disk = disk
        self.dropped = 0
        self._on_readable = on_readable
        self._taken = trio.Event()
        # ids read from disk, in read order, with the position after each
        self._unacked: deque[tuple[bytes, Pos]] = deque()
        self._pending: set[bytes] = set()

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
            DiskQueueError: the disk write failed; nothing of ``msgs`` past memory was kept.
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
        """The next ``n`` messages ``take`` would hand out (memory, then what the disk queue
        has read ahead), left in place."""
        out = list(itertools.islice(self.memory, n))
        if self.disk is not None and len(out) < n:
            out += decode_records(self.disk.peek(n - len(out)))
        return out

    def take(self, n: int) -> list[QueuedMessage]:
        """Up to ``n`` messages, memory first, then what the disk queue has read ahead
        (those stay on disk until acknowledged)."""
        memory = self.memory
        out = [memory.popleft() for _ in range(min(n, len(memory)))]
        if self.disk is not None and len(out) < n:
            read = self.disk.pop_with_positions(n - len(out))
            for record, pos in read:
                message_id = record_id(record)
                self._unacked.append((message_id, pos))
                self._pending.add(message_id)
            if read:
                out += decode_records([record for record, _ in read])
                self._taken.set()
        return out

    def ack(self, message_id: bytes) -> None:
        """This message is done with; commit the disk queue over every acknowledged record."""
        if message_id not in self._pending:
            return
        self._pending.discard(message_id)
        unacked = self._unacked
        pos = None
        while unacked and unacked[0][0] not in self._pending:
            pos = unacked.popleft()[1]
        if pos is not None:
            assert self.disk is not None
            self.disk.commit(pos)

    def ack_all(self) -> None:
        """Everything read so far is done with (emptied)."""
        if self._unacked:
            assert self.disk is not None
            self.disk.commit(self._unacked[-1][1])
        self._unacked.clear()
        self._pending.clear()

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
        """Keep the disk queue reading ahead and tell the owner when records are ready."""
        disk = self.disk
        if disk is None:
            task_status.started()
            return
        async with trio.open_nursery() as nursery:
            await nursery.start(disk.run)
            task_status.started()
            while True:
                await disk.wait_readable()
                self._on_readable()
                await self._taken.wait()
                self._taken = trio.Event()
