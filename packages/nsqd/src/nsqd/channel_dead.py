"""A channel's dead letters (beyond NSQ): messages out of attempts, or expired with
``dead_letter_expired``, stored apart; counted, looked at, deleted, or respawned to waiting
through the channel's own queue (docs/jobs.md). Which messages become dead letters, and what
becomes of them, is the channel's ``MessageStates``' (``channel_state``); this is the door the
broker, nsqd's HTTP API and lmstfy use, over the dead-letter store's narrow interface
(``DeadLetters``: ``pending``, ``peek``, its backlog's ``take``, ``ack``, ``put_back``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import LogError
from .lifecycle import Event
from .message import OWN

if TYPE_CHECKING:
    from .channel_state import MessageStates
    from .deadletters import DeadLetters
    from .message import QueuedMessage


class DeadLetterDoor:
    """What the broker, nsqd's HTTP API and lmstfy ask of a channel's dead letters."""

    def __init__(self, states: MessageStates) -> None:
        self.states = states

    @property
    def pending(self) -> bool:
        dead = self.states.dead_letters_if_any
        return dead is not None and bool(dead.pending)

    @property
    def count(self) -> int:
        dead = self.states.dead_letters_if_any
        return len(dead) if dead is not None else 0

    async def respawn(self, n: int, expires: int | None = None) -> int:
        """RESPAWN: up to ``n`` stored dead letters back to waiting, through the channel's own
        queue (written there before they leave the dead letters, so a crash loses none),
        attempts reset and a job given one try, as lmstfy does; ``expires``: a new expiry.
        How many.

        Raises:
            LogError: the own queue could not store them (they stay dead letters).
        """
        states = self.states
        dead = states.dead_letters_if_any
        if dead is None:
            return 0
        msgs = await self._take(dead, n)
        if not msgs:
            return 0
        count = len(msgs)
        gone = states.deleted_dead_among(msgs)  # entries of deleted jobs: counted, and gone
        if gone:
            for message_id in gone:
                dead.backlog.ack(message_id)
            msgs = [m for m in msgs if m.id not in gone]
        for msg in msgs:
            msg.attempts = 0
            if msg.is_job:
                msg.tries = 1  # type: ignore[attr-defined]
            msg.due = 0
            msg.offset = OWN
            if expires is not None:
                msg.expires = expires
        own = states.waiting.own_queue
        try:
            await own.put(msgs)
        except BaseException:
            dead.backlog.put_back(msgs)
            raise
        for msg in msgs:
            dead.backlog.ack(msg.id)
        states.respawned(msgs)
        return count

    async def peek(self, n: int) -> list[QueuedMessage]:
        """The ``n`` oldest dead letters (those stored first, then those being stored),
        left in place; stored ones not read ahead by their disk queue yet are waited for."""
        dead = self.states.dead_letters_if_any
        if dead is None:
            return []
        disk = dead.backlog.disk
        if disk is not None and disk.depth() and not dead.backlog.has_ready():
            try:
                await disk.wait_readable()
            except LogError:  # closed: nsqd is stopping, or the channel was deleted
                pass
        return dead.peek(n)

    def has(self, message_id: bytes) -> bool:
        """Whether ``message_id`` is among the dead letters (as far as they are read)."""
        return self.states.find_dead(message_id) is not None

    async def drop(self, n: int) -> int:
        """DELETE of up to ``n`` of the oldest stored dead letters; how many."""
        states = self.states
        dead = states.dead_letters_if_any
        if dead is None:
            return 0
        msgs = await self._take(dead, n)
        for msg in msgs:
            dead.backlog.ack(msg.id)
        states.dead_ended(Event.DELETE, msgs)
        return len(msgs)

    async def empty(self) -> int:
        """EMPTY: every stored dead letter deleted; how many."""
        states = self.states
        dead = states.dead_letters_if_any
        if dead is None:
            return 0
        count = len(dead) - len(dead.pending)
        dead.backlog.clear_memory()
        dead.backlog.ack_all()
        if dead.backlog.disk is not None:
            await dead.backlog.disk.empty()
        states.dead_ended(Event.EMPTY, count)
        return count

    @staticmethod
    async def _take(dead: DeadLetters, n: int) -> list[QueuedMessage]:
        """Up to ``n`` of the oldest stored dead letters, waiting for their disk queue to
        read those it holds and has not read ahead yet (a respawn right after they died)."""
        backlog = dead.backlog
        msgs = backlog.take(n)
        disk = backlog.disk
        while len(msgs) < n and disk is not None and disk.depth() > 0:
            await disk.wait_readable()
            msgs += backlog.take(n - len(msgs))
        return msgs
