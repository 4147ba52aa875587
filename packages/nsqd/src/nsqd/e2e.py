"""End-to-end processing latency: time from publish to FIN, as quantiles over a sliding window
(``--e2e-processing-latency-percentile``, ``--e2e-processing-latency-window-time``).

nsqd keeps two streams, each covering half the window, and answers from both; we do the same
with two bounded uniform samples (reservoirs) instead of biased-quantile sketches: exact for
small volumes, an unbiased sample beyond ``RESERVOIR`` FINs per half-window, and a fixed cost
per FIN (one random draw at most).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

RESERVOIR = 2048


class _Half:
    __slots__ = ("count", "sample")

    def __init__(self) -> None:
        self.count = 0
        self.sample: list[int] = []

    def add(self, value: int) -> None:
        self.count += 1
        if len(self.sample) < RESERVOIR:
            self.sample.append(value)
        else:
            slot = random.randrange(self.count)
            if slot < RESERVOIR:
                self.sample[slot] = value


class LatencyStream:
    def __init__(self, percentiles: Sequence[float], window: float, clock: Callable[[], float]) -> None:
        self.percentiles = sorted(percentiles, reverse=True)
        self.half = window / 2
        self.clock = clock
        self._current = _Half()
        self._previous = _Half()
        self._rotate_at = clock() + self.half

    def _rotate(self) -> None:
        now = self.clock()
        if now >= self._rotate_at:
            stale = now >= self._rotate_at + self.half
            self._previous = _Half() if stale else self._current
            self._current = _Half()
            self._rotate_at = now + self.half

    def observe(self, latency_ns: int) -> None:
        self._rotate()
        self._current.add(latency_ns)

    def halves(self) -> list[_Half]:
        self._rotate()
        return [self._previous, self._current]


def summary(streams: Iterable[LatencyStream]) -> dict[str, Any]:
    """NSQ's ``e2e_processing_latency`` object for one or more streams (a topic merges its
    channels): ``{"count": N, "percentiles": [{"quantile": q, "value": ns}, ...]}``."""
    streams = list(streams)
    if not streams or not streams[0].percentiles:
        return {"count": 0, "percentiles": None}
    values: list[int] = []
    count = 0
    for stream in streams:
        for half in stream.halves():
            count += half.count
            values.extend(half.sample)
    values.sort()
    percentiles = []
    for q in streams[0].percentiles:
        value = float(values[min(len(values) - 1, int(q * len(values)))]) if values else 0.0
        percentiles.append({"quantile": q, "value": value})
    return {"count": count, "percentiles": percentiles}
