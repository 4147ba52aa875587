"""A channel's dead letters (beyond NSQ): messages out of attempts, or expired with
``dead_letter_expired``, stored apart; counted, looked at, deleted, or respawned to waiting
through the channel's own queue (docs/jobs.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .channel_state import ChannelState
from .errors import DiskQueueError
from .message import OWN

if TYPE_CHECKING:
    from .deadletters import DeadLetters
    from .message import QueuedMessage


class DeadLetterDoor(ChannelState):
    """What the broker, nsqd's HTTP API and lmstfy ask of a channel's dead letters."""

    async def store_dead_letters(self) -> None:
        """Write the dead letters decided since the last call, then acknowledge their
        originals.

        Raises:
            DiskQueueError: they could not be written (they stay pending).
        """
        if self._dead_letters is not None and self._dead_letters.pending:
            for msg in await self._dead_letters.store():
                self._done(msg)

    def dead_letter_pulled(self, message_id: bytes) -> bool:
        """A pulled message its consumer gives up on: to the dead letters at once."""
        msg = self._take_pulled(message_id)
        if msg is None:
            return False
        self._to_dead_letters([msg])
        return True

    async def respawn(self, n: int, expires: int | None = None) -> int:
        """RESPAWN: up to ``n`` stored dead letters back to waiting, through the channel's own
        queue (written there before they leave the dead letters, so a crash loses none),
        attempts reset and a job given one try, as lmstfy does; ``expires``: a new expiry.
        How many.

        Raises:
            DiskQueueError: the own queue could not store them (they stay dead letters).
        """
        if self._dead_letters is None:
            return 0
        dead = self._dead_letters
        msgs = await self._take_dead(dead, n)
        if not msgs:
            return 0
        count = len(msgs)
        if self.dead_deleted:  # entries of deleted jobs: counted, and gone
            gone = [m for m in msgs if m.id in self.dead_deleted]
            for msg in gone:
                self.dead_deleted.discard(msg.id)
                dead.backlog.ack(msg.id)
            msgs = [m for m in msgs if m.id not in {g.id for g in gone}]
        for msg in msgs:
            msg.attempts = 0
            if msg.is_job:
                msg.tries = 1  # type: ignore[attr-defined]
            msg.due = 0
            msg.offset = OWN
            if expires is not None:
                msg.expires = expires
        own = self.own_queue
        try:
            await own.put(msgs)
        except BaseException:
            dead.backlog.put_back(msgs)
            raise
        for msg in msgs:
            dead.backlog.ack(msg.id)
        if self.requeue_behind:  # lmstfy: respawned jobs go behind what is ready now
            self._own_after = self.topic.visible_end
        self.changed()
        return count

    async def peek_dead(self, n: int) -> list[QueuedMessage]:
        """The ``n`` oldest dead letters (those stored first, then those being stored),
        left in place; stored ones not read ahead by their disk queue yet are waited for."""
        dead = self._dead_letters
        if dead is None:
            return []
        disk = dead.backlog.disk
        if disk is not None and disk.depth() and not dead.backlog.has_ready():
            try:
                await disk.wait_readable()
            except DiskQueueError:  # closed: nsqd is stopping, or the channel was deleted
                pass
        return dead.peek(n)

    def is_dead_letter(self, message_id: bytes) -> bool:
        """Whether ``message_id`` is among the dead letters (as far as they are read)."""
        return self._find_dead(message_id) is not None

    async def drop_dead(self, n: int) -> int:
        """Delete up to ``n`` of the oldest stored dead letters; how many."""
        if self._dead_letters is None:
            return 0
        dead = self._dead_letters
        msgs = await self._take_dead(dead, n)
        for msg in msgs:
            dead.backlog.ack(msg.id)
            self.dead_deleted.discard(msg.id)
        return len(msgs)

    async def empty_dead(self) -> int:
        """Delete every stored dead letter; how many."""
        dead = self._dead_letters
        if dead is None:
            return 0
        count = len(dead) - len(dead.pending)
        dead.backlog.clear_memory()
        dead.backlog.ack_all()
        if dead.backlog.disk is not None:
            await dead.backlog.disk.empty()
        self.dead_deleted.clear()
        return count

    @staticmethod
    async def _take_dead(dead: DeadLetters, n: int) -> list[QueuedMessage]:
        """Up to ``n`` of the oldest stored dead letters, waiting for their disk queue to
        read those it holds and has not read ahead yet (a respawn right after they died)."""
        backlog = dead.backlog
        msgs = backlog.take(n)
        disk = backlog.disk
        while len(msgs) < n and disk is not None and disk.depth() > 0:
            await disk.wait_readable()
            msgs += backlog.take(n - len(msgs))
        return msgs
