"""Message IDs: 16 lowercase hex characters, unique per nsqd, never repeated after a restart.

NSQ's snowflake layout, one generator per nsqd (NSQ has one per topic; ours is stricter)::

    [ ms since 2010-11-04 (twitter epoch) ][ node id: 10 bits ][ sequence: 12 bits ]
                                  <<22                 <<12

IDs are handed out in batches: one read of the broker's wall clock per PUB/MPUB (given to
``take``), then consecutive integers. The generator never goes backwards: if the clock stalls
or steps back, or more than 4096 IDs are taken in one millisecond, it keeps counting up from
the last ID. A restarted nsqd starts from
the wall clock, which is ahead of everything the previous process handed out unless it ran
faster than 4 million messages a second for long stretches.
"""

from __future__ import annotations

TWEPOCH_MS = 1288834974657


class GuidFactory:
    __slots__ = ("_last", "_node")

    def __init__(self, node_id: int) -> None:
        if not 0 <= node_id < 1024:
            raise ValueError("--node-id must be [0,1024)")
        self._node = node_id << 12
        self._last = -1

    def take(self, count: int, wall_ns: int) -> int:
        """Reserve ``count`` consecutive ids at wall time ``wall_ns``; returns the first."""
        now = ((wall_ns // 1_000_000 - TWEPOCH_MS) << 22) | self._node
        first = now if now > self._last else self._last + 1
        self._last = first + count - 1
        return first

    def new_ids(self, count: int, wall_ns: int) -> list[bytes]:
        first = self.take(count, wall_ns)
        return [b"%016x" % n for n in range(first, first + count)]

    def new_id(self, wall_ns: int) -> bytes:
        return b"%016x" % self.take(1, wall_ns)
