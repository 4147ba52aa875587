"""A channel's dead-letter queue: messages that used up their attempts, or that a consumer
gave up on, kept aside until someone respawns or empties them.

It is a backlog without memory: every dead letter is written to an internal log of the
channel (``privatelog``: ``<channel>#dead`` in its topic's directory, a name no channel can
have), so it is as durable as the channel's own messages under ``--sync-every``. Dead
letters are decided in the channel's pump, which cannot wait for a disk, so they wait in
``pending`` until the broker stores them right after the pump; only then are the originals
acknowledged on the channel's queue.
"""

from __future__ import annotations

import trio

from .backlog import Backlog
from .message import QueuedMessage


class DeadLetters:
    def __init__(self, backlog: Backlog) -> None:
        self.backlog = backlog
        self.pending: list[QueuedMessage] = []
        self._storing = trio.Lock()

    def __len__(self) -> int:
        return len(self.backlog) + len(self.pending)

    async def store(self) -> list[QueuedMessage]:
        """Write the pending dead letters; the ones written. They stay ``pending`` (counted,
        found) until they are in the backlog: never out of sight while the write runs.

        Raises:
            DiskQueueError: they could not be written (they stay pending).
        """
        async with self._storing:  # the pump's store and an API's may meet
            count = len(self.pending)
            if not count:
                return []
            msgs = self.pending[:count]
            await self.backlog.put(msgs)
            del self.pending[:count]  # (the backlog counts them from the write's end on)
            return msgs

    def peek(self, n: int) -> list[QueuedMessage]:
        return (self.backlog.peek(n) + self.pending)[:n]

    def take(self, n: int) -> list[QueuedMessage]:
        """Up to ``n`` of the oldest stored dead letters, acknowledged off their queue."""
        msgs = self.backlog.take(n)
        for msg in msgs:
            self.backlog.ack(msg.id)
        return msgs
