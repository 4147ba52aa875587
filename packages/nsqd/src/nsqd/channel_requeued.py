"""The messages a channel holds WAITING apart from its log: requeued ones (REQ, timeouts, a
consumer gone, deferred ones come due), each waiting for its turn.

A message coming back goes to the back of the queue, as in nsqd: behind what its memory
queue held (up to --mem-queue-size), or, on lmstfy's queues, behind every message waiting
when it came back. So each one waits for the cursor to reach an offset (its *turn*) before it
goes out again; the same holds for what was last respawned into the channel's own queue. Which
messages come and go is ``MessageStates``' (``channel_state``); this keeps their order.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .message import QueuedMessage


class Requeued:
    """Requeued messages in order, each with the offset the cursor must reach first."""

    __slots__ = ("_after", "_msgs", "own_turn")

    def __init__(self) -> None:
        self._msgs: deque[QueuedMessage] = deque()
        self._after: deque[int] = deque()
        self.own_turn = 0  # the turn of what was last respawned into the own queue

    def __len__(self) -> int:
        return len(self._msgs)

    def __bool__(self) -> bool:
        return bool(self._msgs)

    def __iter__(self) -> Iterator[QueuedMessage]:
        return iter(self._msgs)

    def turns(self) -> list[tuple[int, QueuedMessage]]:
        """Each message with its turn, in order."""
        return list(zip(self._after, self._msgs, strict=True))

    def next_turn(self) -> int | None:
        return self._after[0] if self._msgs else None

    def ready(self, read: int) -> bool:
        """The first one's turn has come (the cursor reads at ``read``)."""
        return bool(self._msgs) and self._after[0] <= read

    def add(self, msgs: list[QueuedMessage], turn: int) -> None:
        self._msgs.extend(msgs)
        self._after.extend([turn] * len(msgs))

    def take(self, want: int, read: int) -> list[QueuedMessage]:
        """Up to ``want`` of the first ones whose turn has come."""
        msgs, after = self._msgs, self._after
        out: list[QueuedMessage] = []
        while msgs and len(out) < want and after[0] <= read:
            out.append(msgs.popleft())
            after.popleft()
        return out

    def respawned(self, turn: int) -> None:
        """Messages were respawned into the own queue: they wait for ``turn``."""
        self.own_turn = turn

    def release(self) -> bool:
        """The log is read to its end: every turn has come. Whether one was still to come."""
        if not self._msgs and not self.own_turn:
            return False
        self._after = deque([0] * len(self._msgs))
        self.own_turn = 0
        return True

    def remove(self, message_id: bytes) -> QueuedMessage | None:
        for i, msg in enumerate(self._msgs):
            if msg.id == message_id:
                del self._msgs[i], self._after[i]
                return msg
        return None

    def find(self, message_id: bytes) -> QueuedMessage | None:
        for msg in self._msgs:
            if msg.id == message_id:
                return msg
        return None

    def clear(self) -> list[QueuedMessage]:
        """Every one, gone from here."""
        msgs = list(self._msgs)
        self._msgs.clear()
        self._after.clear()
        return msgs
