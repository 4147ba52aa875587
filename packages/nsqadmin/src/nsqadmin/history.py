"""Six hours of depths and message counts, kept in memory within a fixed bound (the Go
nsqadmin asks Graphite for these; we keep our own).

Every stats fetch (a page, a refresh, the background sampler) records one sample per topic,
channel and node into a *series* per ``(metric, topic, channel, node)`` key. A series holds
three *tiers*, one per graph window, each a pair of ``array('d')`` (times, values):

====== ========================= ============== =====================
window point spacing (at least)  points at most bytes at most
====== ========================= ============== =====================
10 min ``min_spacing`` (1 s)     602            9,632
1 h    10 s                      362            5,792
6 h    60 s                      362            5,792
====== ========================= ============== =====================

so a series never takes more than ~21 KiB, and ``max_series`` (``--history-max-series``,
1,000 by default) bounds the whole history at ~21 MiB (~13 MiB at the default 5 s sampling,
which fills only 120 points of the 10-minute tier).

Downsampling is decimation, not averaging: a tier's last point slides forward to each new
sample until it is ``spacing`` after the one before it, then stays. Every point is a real
sample, the last point is always the latest one (graphs end on what ``/stats`` says now), and a
rate between two points of a coarse tier is the exact average rate over that interval. A depth
spike shorter than a coarse tier's spacing can fall between its points.

Counters (``messages``) are made monotonic as they are recorded: each series sums the
increases of its parts, one nsqd counter each (a topic's or channel's count on one node; for a
node's series, each of its topics' counts, kept apart: a difference is only ever taken between
two readings of one counter). A count lower than the last one seen means that nsqd restarted,
and counts from zero again; a part missing from a sample adds nothing until it answers again.
So rates are never negative, and a node that was unreachable for a while does not show as a
burst of everything it ever received. Counters fed
through ``observe`` directly are stored as given; a drop then yields no rate for its interval.

A count seen for the first time was zero at its *origin*, when one is known: the last sample
that had all of its node's topics (the topic or channel was not there yet, so its count since
is exact: a topic created and published to between two samples), or its nsqd's ``start_time``
(counts start at zero with nsqd), whichever is later. Such a count is spread evenly from its
origin to now (a new series gets a point of its value at each origin), so messages published
before nsqadmin first sampled their topic show as that average rate rather than not at all
(Go's nsqadmin asks Graphite, which saw them when they were published). A tier keeps an origin
only within its window: an nsqd started an hour before its first sample shows those messages
on the 1-hour and 6-hour graphs, not the 10-minute one (so also an nsqd that joined while
nobody looked, which the sampler finds only at the next page view: ``sampler.py``). A count
with no known origin (a node seen for the first time, without ``start_time``) is only the
baseline of later increases.

Time is the wall clock (the graphs print it, and ``--history-file`` keeps it across restarts).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

import attrs
from nsq_common import TopicStats

log = logging.getLogger("nsqadmin")

Key = tuple[str, str, str, str]  # (metric, topic, channel, node); "" where it does not apply
Point = tuple[float, float]
COUNTERS: Final = frozenset({"messages"})  # metrics whose rates are graphed

WINDOWS: Final = {"10m": 600.0, "1h": 3600.0, "6h": 21600.0}
WINDOW_NAMES: Final = {"10m": "10 minutes", "1h": "1 hour", "6h": "6 hours"}
DEFAULT_WINDOW: Final = "10m"
STALE_WHEN_FULL: Final = 600.0  # a full history drops series not updated for this long


@attrs.frozen
class Tier:
    spacing: float
    span: float
    capacity: int


def tiers_for(min_spacing: float) -> tuple[Tier, ...]:
    """The three tiers, the finest at ``min_spacing`` (its capacity stays 602 points even when
    ``min_spacing`` is smaller, as tests make it)."""
    return (Tier(min_spacing, WINDOWS["10m"], 602), Tier(10.0, WINDOWS["1h"], 362),
            Tier(60.0, WINDOWS["6h"], 362))


class Series:
    """One key's points, per tier. ``__slots__`` and arrays keep it small (see the table)."""

    __slots__ = ("tiers", "updated")

    def __init__(self, tiers: int) -> None:
        self.tiers = [(array("d"), array("d")) for _ in range(tiers)]
        self.updated = 0.0

    def latest(self) -> float | None:
        values = self.tiers[0][1]
        return values[-1] if values else None

    def last(self) -> Point | None:
        """The latest point (the coarsest tier keeps it longest: each tier ends on it)."""
        times, values = self.tiers[-1]
        return (times[-1], values[-1]) if times else None

    def add(self, specs: tuple[Tier, ...], now: float, value: float) -> None:
        self.updated = max(self.updated, now)
        for spec, (times, values) in zip(specs, self.tiers, strict=True):
            _add(spec, times, values, now, value)


def _add(spec: Tier, times: array[float], values: array[float], now: float,
         value: float) -> None:
    n = len(times)
    if n and now <= times[-1]:  # the same instant, or the clock stepped back: keep the order
        values[-1] = value
        return
    if n >= 2 and times[-1] - times[-2] < spec.spacing:  # the last point still slides
        times[-1], values[-1] = now, value
    else:
        times.append(now)
        values.append(value)
    cut = max(bisect.bisect_left(times, now - spec.span), len(times) - spec.capacity)
    if cut > 0:
        del times[:cut]
        del values[:cut]


@attrs.define(eq=False)
class History:
    """Samples per key; see the module docstring for the tiers and bounds."""

    min_spacing: float = 1.0
    max_series: int = 1000
    clock: Callable[[], float] = time.time
    specs: tuple[Tier, ...] = attrs.field(init=False)
    _series: dict[Key, Series] = attrs.field(factory=dict, init=False)
    # per (counter key, part): the last raw count seen and when, for monotonic counters; a
    # part is a node, or for a node's series "<node> <topic>" (topic names have no spaces)
    _raw: dict[tuple[Key, str], Point] = attrs.field(factory=dict, init=False)
    _refused: bool = attrs.field(default=False, init=False)
    # per node: when its last sample with every one of its topics was taken (origins, above)
    _sampled: dict[str, float] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        self.specs = tiers_for(self.min_spacing)

    def __len__(self) -> int:
        return len(self._series)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._series)

    def observe(self, key: Key, value: float, now: float | None = None) -> bool:
        """Add one sample; ``False`` when the history is full and ``key`` is new."""
        now = self.clock() if now is None else now
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= self.max_series:
                if not self._refused:
                    log.warning("history: %d series kept (--history-max-series), not keeping "
                                "more until some are unused for %gs", self.max_series,
                                STALE_WHEN_FULL)
                self._refused = True
                return False
            series = self._series[key] = Series(len(self.specs))
        series.add(self.specs, now, value)
        return True

    def record(self, per_node: Iterable[TopicStats], now: float | None = None, *,
               nodes: Iterable[str] = (), topics: bool = True,
               started: Mapping[str, float] | None = None) -> None:
        """One sample per topic and channel, summed over the nodes in ``per_node`` (unless
        ``topics`` is false: ``per_node`` lacks some nodes of its topics), and per node for the
        nodes in ``nodes``: those whose every topic is in ``per_node`` (a page about one topic
        fetches only that topic's). ``started``: nsqd's ``start_time`` by node, where known
        (a count seen for the first time is spread from there, see the module docstring)."""
        now = self.clock() if now is None else now
        per_node = list(per_node)
        complete = set(nodes)
        gauges: dict[Key, float] = {("depth", "", "", n): 0.0 for n in complete}
        gauges.update({("in_flight", "", "", n): 0.0 for n in complete})
        counts: dict[Key, list[tuple[str, float]]] = {
            ("messages", "", "", n): [] for n in complete}

        def gauge(key: Key, value: float) -> None:
            gauges[key] = gauges.get(key, 0.0) + value

        for topic in per_node:
            name, node = topic.topic_name, topic.node
            if topics:
                gauge(("depth", name, "", ""), topic.depth)
                counts.setdefault(("messages", name, "", ""), []).append(
                    (node, topic.message_count))
            whole_node = node in complete
            if whole_node:
                gauge(("depth", "", "", node), topic.depth)
                counts[("messages", "", "", node)].append((f"{node} {name}",
                                                           topic.message_count))
            for channel in topic.channels or ():
                chan = channel.channel_name
                if topics:
                    gauge(("depth", name, chan, ""), channel.depth)
                    gauge(("in_flight", name, chan, ""), channel.in_flight_count)
                    counts.setdefault(("messages", name, chan, ""), []).append(
                        (node, channel.message_count))
                if whole_node:
                    gauge(("depth", "", "", node), channel.depth)
                    gauge(("in_flight", "", "", node), channel.in_flight_count)
        for gauge_key, value in gauges.items():
            self.observe(gauge_key, value, now)
        origins = {node: max(known) for node in {t.node for t in per_node} | complete
                   if (known := [t for t in (self._sampled.get(node), (started or {}).get(node))
                                 if t is not None and t < now])}
        for count_key, parts in counts.items():
            self._count(count_key, parts, now, origins)
        for node in complete:  # a full history may have refused a count: then it is unknown
            if self._refused:
                self._sampled.pop(node, None)
            else:
                self._sampled[node] = now
        self._expire(now)

    def _count(self, key: Key, parts: list[tuple[str, float]], now: float,
               origins: Mapping[str, float]) -> None:
        """Add the non-negative increase of each part's counter to the series' last value
        (a part seen for the first time: its share since the series' last point, counting
        from zero at its node's origin)."""
        series = self._series.get(key)
        increase = 0.0
        new: list[tuple[float, float]] = []  # (origin, count) of parts counted from zero
        for part, raw in parts:
            last = self._raw.get((key, part))
            self._raw[(key, part)] = (raw, now)
            if last is not None:
                increase += raw - last[0] if raw >= last[0] else raw  # lower: it restarted
            elif (origin := origins.get(part.partition(" ")[0])) is not None:
                new.append((origin, raw))

        def spread(at: float) -> float:
            """The new parts' counts at ``at``, each at its average rate since its origin."""
            return sum(raw * max(at - origin, 0.0) / (now - origin) for origin, raw in new)

        latest = series.last() if series is not None else None
        if latest is None:  # starts at each origin, with what the new parts had then
            total = sum(raw for _, raw in parts)
            points = [(at, total - spread(now) + spread(at))
                      for at in sorted({origin for origin, _ in new})] + [(now, total)]
        else:
            since, value = latest
            points = [(now, value + increase + spread(now) - spread(min(since, now)))]
        for at, value in points:
            if not self.observe(key, value, at):
                for part, _ in parts:
                    del self._raw[(key, part)]
                return

    def _expire(self, now: float) -> None:
        """Drop series (and counter states) not updated within the longest window, or within
        ``STALE_WHEN_FULL`` when the history is full."""
        full = len(self._series) >= self.max_series
        oldest = now - (STALE_WHEN_FULL if full else self.specs[-1].span)
        for key in [k for k, s in self._series.items() if s.updated < oldest]:
            del self._series[key]
        for raw_key in [k for k, (_, seen) in self._raw.items() if seen < oldest]:
            del self._raw[raw_key]
        for node in [n for n, seen in self._sampled.items() if seen < oldest]:
            del self._sampled[node]
        if self._refused and len(self._series) < self.max_series:
            self._refused = False

    # -- reading

    def points(self, key: Key, window: str = DEFAULT_WINDOW) -> list[Point]:
        """The (time, value) points of ``key`` in ``window``'s tier, oldest first."""
        series = self._series.get(key)
        if series is None:
            return []
        times, values = series.tiers[_tier_index(window)]
        return list(zip(times, values, strict=True))

    def rate_points(self, key: Key, window: str = DEFAULT_WINDOW) -> list[tuple[float,
                                                                               float | None]]:
        """Per second between consecutive points, at the later one's time (``None`` where
        the value dropped, which only a counter fed through ``observe`` can do)."""
        return [(t1, (v1 - v0) / (t1 - t0) if v1 >= v0 else None)
                for (t0, v0), (t1, v1) in itertools.pairwise(self.points(key, window))]

    def latest(self, key: Key) -> float | None:
        series = self._series.get(key)
        return None if series is None else series.latest()

    # -- the sparklines' view: the 10-minute tier

    def values(self, metric: str, topic: str, channel: str = "", node: str = "") -> list[float]:
        return [v for _, v in self.points((metric, topic, channel, node))]

    def rates(self, topic: str, channel: str = "", node: str = "") -> list[float]:
        """Messages per second between consecutive samples (none across a drop)."""
        return [r for _, r in self.rate_points(("messages", topic, channel, node))
                if r is not None]

    def rate(self, topic: str, channel: str = "", node: str = "") -> float | None:
        """The latest rate, or ``None`` before two samples exist."""
        rates = self.rates(topic, channel, node)
        return rates[-1] if rates else None

    # -- persistence (history_file.py)

    def dump(self) -> dict[str, object]:
        """A copy of everything kept, taken in one go so it is consistent (arrays are copied
        as memory; ``history_file.encode`` turns them into JSON in a worker thread)."""
        return {
            "series": [{"key": list(key), "tiers": [[t[:], v[:]] for t, v in s.tiers]}
                       for key, s in self._series.items()],
            "counters": [[*key, node, raw, seen] for (key, node), (raw, seen) in
                         self._raw.items()],
        }

    def restore(self, state: dict[str, object], now: float | None = None) -> int:
        """Put back what ``dump`` gave, trimmed to this history's bounds (whatever the file
        says); returns how many series were restored.

        Raises:
            ValueError: ``state`` is not what ``dump`` makes.
        """
        now = self.clock() if now is None else now
        try:
            for entry in list(state.get("series") or []):  # type: ignore[call-overload]
                key = _key(entry["key"])
                if key in self._series or len(self._series) >= self.max_series:
                    continue
                series = Series(len(self.specs))
                for spec, (times, values), saved in zip(self.specs, series.tiers,
                                                        entry["tiers"], strict=False):
                    times.extend(saved[0])
                    values.extend(saved[1])
                    if len(times) != len(values) or any(
                            b <= a for a, b in itertools.pairwise(times)):
                        raise ValueError(f"bad points for {key!r}")
                    cut = max(bisect.bisect_left(times, now - spec.span),
                              len(times) - spec.capacity)
                    del times[:max(cut, 0)]
                    del values[:max(cut, 0)]
                    series.updated = max(series.updated, times[-1] if times else 0.0)
                self._series[key] = series
            for *parts, node, raw, seen in state.get("counters") or []:  # type: ignore[attr-defined]
                key = _key(parts)
                if key in self._series:
                    self._raw[(key, str(node))] = (float(raw), float(seen))
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"not a saved history ({exc})") from None
        self._expire(now)
        return len(self._series)


def _key(parts: object) -> Key:
    if not isinstance(parts, list) or len(parts) != 4 or not all(
            isinstance(p, str) for p in parts):
        raise ValueError(f"bad series key {parts!r}")
    return (parts[0], parts[1], parts[2], parts[3])


def _tier_index(window: str) -> int:
    return list(WINDOWS).index(window) if window in WINDOWS else 0
