"""A channel's dead-letter queue: messages that used up their attempts, or that a consumer
gave up on, kept aside until someone respawns or empties them.

It is a backlog without memory: every dead letter is written to an internal log of the
channel (``privatelog``: ``<channel>#dead`` in its topic's directory, a name no channel can
have), so it is as durable as the channel's own messages under ``--sync-every``. Dead
letters are decided in the channel's pump, which cannot wait for a disk, so they wait in
``pending`` until the broker stores them right after the pump; only then are the originals
acknowledged on the channel's queue. A dead letter whose job is deleted (lmstfy's DELETE of
a dead job) keeps its entry, as in lmstfy (counted, respawned), but is no longer found.
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
        self._deleted: set[bytes] = set()  # ids of dead letters whose jobs were deleted

    def __len__(self) -> int:
        return len(self.backlog) + len(self.pending)

    async def store(self) -> list[QueuedMessage]:
        """Write the pending dead letters; the ones written. They stay ``pending`` (counted,
        found) until they are in the backlog: never out of sight while the write runs.

        Raises:
            LogError: they could not be written (they stay pending).
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

    def find(self, message_id: bytes) -> QueuedMessage | None:
        """The dead letter ``message_id``, unless its job was deleted."""
        if message_id in self._deleted:
            return None
        for msg in self.peek(len(self)):
            if msg.id == message_id:
                return msg
        return None

    def mark_deleted(self, message_id: bytes) -> None:
        """The job of the dead letter ``message_id`` is deleted; its entry stays."""
        self._deleted.add(message_id)

    def forget_deleted(self, msgs: list[QueuedMessage] | None) -> set[bytes]:
        """The ids of ``msgs`` (entries taken off the store; None: every one) whose jobs were
        deleted, forgotten now that their entries go too."""
        deleted = self._deleted
        if msgs is None:
            gone, self._deleted = deleted, set()
            return gone
        gone = {m.id for m in msgs if m.id in deleted} if deleted else set()
        deleted.difference_update(gone)
        return gone
