"""A topic log's retention, and which of its segments may be removed (docs/design/storage.md,
"Removal and retention").

A segment may go once every durable cursor (and the topic's hold) is past its last offset
(``needed``) and the retention allows: with no retention at once; with ``ns``, once its newest
message is older than that; with ``nbytes``, once the newer segments hold that much without
it. Retention never keeps less than a cursor needs: it only keeps more. The log (``topiclog``)
asks, removes what it is told (``logfiles``) and drops it from memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .segment import Segment

__all__ = ["Retention"]


class Retention:
    """How long, or how much, a topic keeps of what every cursor has passed."""

    __slots__ = ("nbytes", "ns")

    def __init__(self) -> None:
        self.ns = 0  # keep segments this long past every cursor (0: not at all)
        self.nbytes = 0  # or the newest segments within this size

    @property
    def keeps_delivered(self) -> bool:
        """Some retention is set: what every cursor has passed is kept (written, never
        dropped from memory unwritten)."""
        return bool(self.ns or self.nbytes)

    def set(self, ns: int | None = None, nbytes: int | None = None) -> bool:
        """Keep segments ``ns`` past every cursor, or the newest within ``nbytes`` (0: not
        at all; None: as it is); whether either changed."""
        changed = False
        if ns is not None and ns != self.ns:
            self.ns, changed = ns, True
        if nbytes is not None and nbytes != self.nbytes:
            self.nbytes, changed = nbytes, True
        return changed

    def removable(self, segments: Sequence[Segment], needed: int, total_bytes: int,
                  now_ns: int) -> tuple[list[Segment], int]:
        """The oldest of the closed ``segments`` (all but the last, the active one) that may
        go, with nothing at or above ``needed`` in them, ``total_bytes`` in every segment and
        the wall clock at ``now_ns``; and the bytes left without them."""
        retained = total_bytes
        gone: list[Segment] = []
        for segment in segments[:-1]:
            if not self.may_remove(segment, needed, retained, now_ns):
                break
            gone.append(segment)
            retained -= segment.size
        return gone, retained

    def may_remove(self, segment: Segment, needed: int, retained_bytes: int, now_ns: int
                   ) -> bool:
        """Whether ``segment`` may go (or, the active one, be cut to nothing), with
        ``retained_bytes`` in it and the segments after it."""
        if segment.end > needed:
            return False
        if not self.keeps_delivered:
            return True
        old = self.ns > 0 and segment.max_timestamp < now_ns - self.ns
        over = self.nbytes > 0 and retained_bytes - segment.size >= self.nbytes
        return old or over
