"""Page-view events and, in plain Python, what the pipeline must compute from them.

An event is one JSON object per NSQ message: ``{"user": "u0042", "page": "/cart", "ts":
1735732800123}``, ``ts`` being the event time in milliseconds since the epoch (UTC). Epoch
milliseconds rather than ISO text: nothing to get wrong about zones or formats on either side.

:func:`generate` is deterministic given its seed. Its events are spread over ``minutes``
minutes, published roughly in event-time order (each up to ``skew_ms`` early or late, so the
stream is out of order as real ones are, by much less than the job's watermark delay), with
a flash sale in minute 2 that takes ``/sale`` far above its own usual rate. It ends with a few
*closing* events dated ``watermark_ms`` plus a second after the last minute: a streaming job
in append mode emits a window only once its watermark (the latest event time minus the delay)
has passed the window's end, and these move it past every data window. Their own window stays
open, as the current minute of a live stream does.

:func:`expected_windows` and :func:`expected_alerts` are the reference the tests compare the
Spark paths with.

The alert rule is a rate change against the page's own recent baseline, not one threshold
for every page (a busy page would pass it every minute, a quiet one never): a window alerts
when its page had more than ``factor`` times the median of its views in the windows of the
``baseline_minutes`` before it, at least ``min_history`` of them, and at least ``min_views``
views (a page going from 2 to 7 views is not news). At the demo's 20 events a second the
pages' minutes vary by a few percent; the flash sale multiplies ``/sale`` by about 13.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median

TOPIC = "pageviews"
ALERTS_TOPIC = "pageview_alerts"
MINUTE_MS = 60_000
START_MS = 1_735_732_800_000  # 2025-01-01T12:00:00Z: a fixed start keeps generated sets equal
FACTOR = 3.0  # an alert: more than this many times the page's usual views per minute
BASELINE_MINUTES = 10  # the usual: the median over the page's windows of these minutes before
MIN_HISTORY = 2  # windows of the page in those minutes before it can alert
MIN_VIEWS = 20  # and at least this many views in the window

PAGES: tuple[str, ...] = ("/", "/products", "/product/42", "/product/7", "/cart", "/checkout",
                          "/blog", "/about", "/sale")
WEIGHTS: tuple[float, ...] = (22, 18, 12, 10, 10, 8, 8, 4, 3)
SALE_PAGE = "/sale"
SALE_MINUTE = 2  # in this minute (of every 5, live) 40% of the views are of the sale page
SALE_SHARE = 0.4


@dataclass(frozen=True, slots=True)
class Event:
    user: str
    page: str
    ts: int  # event time, ms since the epoch (UTC)

    def to_json(self) -> bytes:
        return json.dumps({"user": self.user, "page": self.page, "ts": self.ts},
                          separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class WindowStats:
    views: int
    unique_users: int


@dataclass(frozen=True, slots=True)
class Alert:
    window_start: int  # ms since the epoch
    page: str
    views: int
    unique_users: int
    baseline: float  # the median views per minute of the page before


def pick_page(rng: random.Random, minute: int) -> str:
    """A page, weighted; in the sale minute the sale page takes ``SALE_SHARE`` of the views."""
    if minute % 5 == SALE_MINUTE and rng.random() < SALE_SHARE:
        return SALE_PAGE
    return rng.choices(PAGES, WEIGHTS)[0]


def generate(count: int = 2000, *, seed: int = 0, start_ms: int = START_MS, minutes: int = 5,
             users: int = 400, skew_ms: int = 10_000, watermark_ms: int = 30_000,
             closing: int = 3) -> list[Event]:
    """``count`` page views over ``minutes`` minutes from ``start_ms``, in publishing order,
    then ``closing`` events that close every data window (see the module docstring)."""
    rng = random.Random(seed)
    span = minutes * MINUTE_MS
    events: list[Event] = []
    for i in range(count):
        nominal = start_ms + i * span // count
        ts = min(start_ms + span - 1, max(start_ms, nominal + rng.randint(-skew_ms, skew_ms)))
        page = pick_page(rng, (ts - start_ms) // MINUTE_MS)
        events.append(Event(f"u{rng.randrange(users):04d}", page, ts))
    close_at = start_ms + span + watermark_ms + 1000
    events.extend(Event(f"u{rng.randrange(users):04d}", "/", close_at + n) for n in range(closing))
    return events


def window_start(ts: int) -> int:
    """The start of the minute holding ``ts``: Spark's tumbling windows are aligned on the epoch."""
    return ts - ts % MINUTE_MS


def expected_windows(events: Iterable[Event], *, watermark_ms: int | None = None
                     ) -> dict[tuple[int, str], WindowStats]:
    """Views and distinct users per (window start, page); with ``watermark_ms``, only the
    windows a streaming job in append mode has emitted once it has read every event: those
    ending at or before the latest event time minus the delay."""
    views: dict[tuple[int, str], int] = defaultdict(int)
    users: dict[tuple[int, str], set[str]] = defaultdict(set)
    latest = 0
    for e in events:
        key = (window_start(e.ts), e.page)
        views[key] += 1
        users[key].add(e.user)
        latest = max(latest, e.ts)
    closed = None if watermark_ms is None else latest - watermark_ms
    return {key: WindowStats(n, len(users[key])) for key, n in sorted(views.items())
            if closed is None or key[0] + MINUTE_MS <= closed}


def expected_alerts(windows: dict[tuple[int, str], WindowStats], *, factor: float = FACTOR,
                    baseline_minutes: int = BASELINE_MINUTES, min_history: int = MIN_HISTORY,
                    min_views: int = MIN_VIEWS) -> set[Alert]:
    """The windows whose page had more than ``factor`` times its baseline (see the module
    docstring)."""
    by_page: dict[str, dict[int, int]] = defaultdict(dict)
    for (start, page), s in windows.items():
        by_page[page][start] = s.views
    found = set()
    for (start, page), s in windows.items():
        history = [views for t, views in by_page[page].items()
                   if start - baseline_minutes * MINUTE_MS <= t < start]
        if len(history) < min_history or s.views < min_views:
            continue
        baseline = median(history)
        if s.views > factor * baseline:
            found.add(Alert(start, page, s.views, s.unique_users, float(baseline)))
    return found


def bodies(events: Sequence[Event]) -> list[bytes]:
    return [e.to_json() for e in events]
