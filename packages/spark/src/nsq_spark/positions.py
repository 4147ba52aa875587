"""Offsets of a read by offset, as Spark's offset log keeps them, and the arithmetic on them.

An offset, as Kafka's, is ``{"topic": {"nsqd HTTP address": next offset to read}}``: one
partition per nsqd per topic (offsets are per nsqd), or, for a replicated topic, one
partition, ``{"topic": {"*": next offset}}`` (offsets are the same on every replica). Spark
stores what ``latestOffset`` returns as the end of a micro-batch and hands it back as the
start of the next one, and compares them as JSON text, so :func:`nest` always sorts the
keys. Before the first batch a partition may stand at :data:`.EARLIEST` (-2: from the first
offset still stored) or :data:`.LATEST` (-1: from the end when the first batch is planned,
which is then empty for it: a batch replayed after a crash must read the same offsets, and
"the latest" will have moved by then).

Planning works on flat maps, ``{(topic, nsqd): offset}`` (:data:`Flat`). Nothing here does
I/O: :mod:`.offset_source` gives the nsqd's bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .logread import Bounds, LogRange
from .options import EARLIEST, LATEST

Offsets = dict[str, dict[str, int]]
Key = tuple[str, str]  # (topic, nsqd HTTP address, or "*" for a replicated topic: .replicas)
Flat = dict[Key, int]

#: Messages one task reads when ``maxRecordsPerPartition`` does not say: small enough that a
#: batch of a few tens of thousands spreads over the cores, large enough that Spark's cost
#: per task (tens of ms) stays small beside the reading.
DEFAULT_RECORDS_PER_PARTITION = 20_000


def flat(offsets: Mapping[str, Mapping[str, int]]) -> Flat:
    return {(topic, nsqd): int(n) for topic, per in offsets.items() for nsqd, n in per.items()}


def nest(offsets: Mapping[Key, int]) -> Offsets:
    """As Spark keeps it: by topic, then nsqd, both sorted (Spark compares offsets as text)."""
    out: Offsets = {}
    for (topic, nsqd), n in sorted(offsets.items()):
        out.setdefault(topic, {})[nsqd] = int(n)
    return out


def resolved(start: int | None, bounds: Bounds | None) -> int:
    """Where a partition's next batch begins, for sizing it: a symbolic or missing start is
    the nsqd's earliest (or end, for LATEST)."""
    if bounds is None:
        return 0 if start is None or start < 0 else start
    if start is None or start == EARLIEST:
        return bounds.earliest
    if start == LATEST:
        return bounds.end
    return start


def prorate(limit: int, start: Mapping[Key, int], end: Mapping[Key, int]) -> Flat:
    """``end`` moved back so that about ``limit`` offsets are read in all, shared between
    the partitions by what each has waiting (none of them starved: at least one each that
    has any). ``start`` is resolved (no symbols)."""
    waiting = {key: e - start[key] for key, e in end.items() if e > start[key]}
    total = sum(waiting.values())
    if total <= limit:
        return dict(end)
    out = dict(end)
    for key, size in waiting.items():
        share = limit * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[key] = min(end[key], start[key] + take)
    return out


def behind(latest: Mapping[Key, int], consumed: Mapping[Key, int]) -> tuple[int, float, int] | None:
    """Kafka's offsetsBehindLatest over the partitions: (min, avg, max) of how far each one's
    end of the batch is behind its latest; None without partitions."""
    gaps = [max(0, end - consumed[key]) for key, end in latest.items()
            if key in consumed and consumed[key] >= 0]
    if not gaps:
        return None
    return min(gaps), sum(gaps) / len(gaps), max(gaps)


def ranges(start: Mapping[Key, int], end: Mapping[Key, int], earliest: Mapping[Key, int], *,
           readers: Mapping[Key, tuple[str, ...]] | None = None,
           min_partitions: int | None = None, max_records: int | None = None
           ) -> list[LogRange]:
    """The tasks reading ``start`` to ``end``: a partition missing from ``start`` or at
    EARLIEST is read from its earliest (``earliest``, its bound when planned); one at LATEST,
    or past its end (its log went back), is empty in this batch. A replicated topic's ranges
    are read from its ``readers`` (:mod:`.replicas`).
    Each range is cut into pieces of at most ``max_records`` (default
    :data:`DEFAULT_RECORDS_PER_PARTITION`), and further, the largest first, until there are
    ``min_partitions``."""
    wanted: list[tuple[Key, int, int, bool]] = []
    for key, e in sorted(end.items()):
        s = start.get(key)
        if s == LATEST:
            continue
        if s is None or s == EARLIEST:
            first, from_earliest = earliest.get(key, 0), True
        else:  # a start past the end (the log went back, see offset_source): nothing
            first, from_earliest = s, False
        if e > first:
            wanted.append((key, first, e, from_earliest))
    cap = max_records or DEFAULT_RECORDS_PER_PARTITION
    pieces = {i: math.ceil((e - s) / cap) for i, (_, s, e, _) in enumerate(wanted)}
    while min_partitions and sum(pieces.values()) < min_partitions:
        i = max(pieces, key=lambda j: (wanted[j][2] - wanted[j][1]) / pieces[j], default=None)
        if i is None or wanted[i][2] - wanted[i][1] <= pieces[i]:
            break  # every piece is down to one offset
        pieces[i] += 1
    out: list[LogRange] = []
    for i, ((topic, nsqd), s, e, from_earliest) in enumerate(wanted):
        count = pieces[i]
        bounds = [s + (e - s) * k // count for k in range(count + 1)]
        for k in range(count):
            out.append(LogRange(topic, nsqd, bounds[k], bounds[k + 1],
                                from_earliest=from_earliest and k == 0,
                                readers=(readers or {}).get((topic, nsqd), ())))
    return out
