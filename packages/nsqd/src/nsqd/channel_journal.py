"""What a channel's cursor journal keeps of the messages the channel holds, beyond the
cursor's positions (docs/design/storage.md): the attempts of each message of the log it holds,
the due time of a deferred one, a tombstone for one deleted while waiting (the cursor's
``extras``: offset -> (attempts, due)); and, at the next start, the messages that were
deferred, read back from the log. Which state each message is in, and every move, stays
``MessageStates``' (``channel_state``): this only writes the figures down and reads them back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from .message import OWN
from .record import decode_record

if TYPE_CHECKING:
    from .cursor import Cursor
    from .inflight import InFlightQueue
    from .message import QueuedMessage
    from .topiclog import TopicLog

__all__ = ["TOMBSTONE", "held_extras", "saved_deferred"]

#: The due time that marks a tombstone among a cursor's extras.
TOMBSTONE = -1


def held_extras(*, in_flight: InFlightQueue | None, requeued: Iterable[QueuedMessage],
                deferred: Iterable[QueuedMessage], tombstones: Iterable[int], now: float,
                wall: int) -> dict[int, tuple[int, int]]:
    """For the cursor's journal: the attempts of each message of the log a channel holds
    (requeued, deferred and, given ``in_flight``, in flight: that is for a clean shutdown,
    too many to write every few seconds), the due time of deferred ones (on the wall clock,
    from their ``deadline`` on the monotonic one, ``now``) and the tombstones."""
    out: dict[int, tuple[int, int]] = {}
    for offset, attempts in (in_flight.attempts_by_offset() if in_flight is not None else ()):
        if offset != OWN:
            out[offset] = (attempts, 0)
    for msg in requeued:
        if msg.offset != OWN and msg.attempts:
            out[msg.offset] = (msg.attempts, 0)
    for msg in deferred:
        if msg.offset != OWN:
            out[msg.offset] = (msg.attempts, wall + int(max(0.0, msg.deadline - now) * 1e9))
    for offset in tombstones:
        out[offset] = (0, TOMBSTONE)
    return out


async def saved_deferred(cursor: Cursor, log: TopicLog
                         ) -> AsyncIterator[tuple[QueuedMessage, tuple[int, int]]]:
    """At start: each message the last run held deferred (its cursor's extras with a due
    time, ahead of its read position and not passed), read from ``log``, with its extra
    (attempts, due time), which the cursor forgets as it is read."""
    wanted = sorted(o for o, (_, due) in cursor.extras.items() if due > 0 and o >= cursor.read)
    for offset in wanted:
        runs = await log.read_at(offset, 1)
        extra = cursor.take_extra(offset)
        if not runs or runs[0][0] != offset or extra is None or cursor.passes(offset):
            continue
        yield decode_record(runs[0][1][0], offset), extra
