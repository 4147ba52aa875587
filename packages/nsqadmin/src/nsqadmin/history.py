"""The last minutes of depths and message counts, kept in memory, and the small SVG
sparklines drawn from them (the Go nsqadmin draws these with Graphite; we need nothing extra).

Every stats fetch (a page, a refresh, the background sampler) records one sample per topic
and channel, summed over nodes; samples closer together than ``min_spacing`` replace the last
one, and samples older than ``window`` are dropped. Rates are message-count differences over
time; a drop (an nsqd restarted, a node went missing) yields no rate for that interval
instead of a negative one.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

import attrs
from markupsafe import Markup, escape

from .stats import TopicStats

Key = tuple[str, str, str]  # (metric, topic, channel)


@attrs.define(eq=False)
class History:
    window: float = 600.0
    min_spacing: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _series: dict[Key, deque[tuple[float, float]]] = attrs.field(factory=dict, init=False)

    def observe(self, key: Key, value: float, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        points = self._series.setdefault(key, deque())
        if points and now - points[-1][0] < self.min_spacing:
            points[-1] = (points[-1][0], value)
        else:
            points.append((now, value))
        while points and now - points[0][0] > self.window:
            points.popleft()

    def record(self, topics: Iterable[TopicStats], now: float | None = None) -> None:
        """One sample per aggregated topic and channel (depth and message count)."""
        now = self.clock() if now is None else now
        for topic in topics:
            self.observe(("depth", topic.topic_name, ""), topic.depth, now)
            self.observe(("messages", topic.topic_name, ""), topic.message_count, now)
            for channel in topic.channels or ():
                key = (topic.topic_name, channel.channel_name)
                self.observe(("depth", *key), channel.depth, now)
                self.observe(("messages", *key), channel.message_count, now)
        self._expire(now)

    def values(self, metric: str, topic: str, channel: str = "") -> list[float]:
        return [v for _, v in self._series.get((metric, topic, channel), ())]

    def rates(self, topic: str, channel: str = "") -> list[float]:
        """Messages per second between consecutive samples."""
        points = list(self._series.get(("messages", topic, channel), ()))
        rates = []
        for (t0, v0), (t1, v1) in itertools.pairwise(points):
            if v1 >= v0 and t1 > t0:
                rates.append((v1 - v0) / (t1 - t0))
        return rates

    def rate(self, topic: str, channel: str = "") -> float | None:
        """The latest rate, or ``None`` before two samples exist."""
        rates = self.rates(topic, channel)
        return rates[-1] if rates else None

    def _expire(self, now: float) -> None:
        for key in [k for k, pts in self._series.items() if not pts
                    or now - pts[-1][0] > self.window]:
            del self._series[key]


def downsample(values: Sequence[float], points: int) -> list[float]:
    """At most ``points`` values: the averages of equal runs of ``values``."""
    if len(values) <= points:
        return list(values)
    size = len(values) / points
    runs = [values[round(i * size):round((i + 1) * size)] for i in range(points)]
    return [sum(run) / len(run) for run in runs if run]


def sparkline(values: Sequence[float], label: str, width: int = 120, height: int = 24) -> Markup:
    """An inline SVG line of ``values`` (oldest first), described for screen readers; long
    series are averaged down to one point per two pixels, to keep pages small."""
    title = escape(label)
    if len(values) < 2:
        return Markup(
            f'<svg class="spark spark-empty" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{title}: collecting samples">'
            f'<title>{title}: collecting samples</title>'
            f'<line x1="1" y1="{height - 2}" x2="{width - 1}" y2="{height - 2}"/></svg>')
    summary = (f"{title}: now {_short(values[-1])}, low {_short(min(values))}, "
               f"high {_short(max(values))}")
    values = downsample(values, width // 2)
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = (width - 2) / (len(values) - 1)
    coords = " ".join(
        f"{1 + i * step:.1f},{height - 2 - (v - low) / span * (height - 4):.1f}"
        for i, v in enumerate(values))
    last_x, last_y = coords.rsplit(" ", 1)[-1].split(",")
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{summary}"><title>{summary}</title>'
        f'<polyline points="{coords}"/><circle cx="{last_x}" cy="{last_y}" r="2"/></svg>')


def _short(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}"
