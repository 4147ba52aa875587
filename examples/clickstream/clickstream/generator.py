"""Publish page views to NSQ: a generated set at once, or a live stream at a steady rate.

Publishing goes through nsqd's HTTP ``/mpub`` (one JSON event per line, which JSON without
newlines allows): the generator then needs nothing but an HTTP client and one nsqd address,
and each call is acknowledged only once nsqd has queued every message in it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence

import httpx

from .events import TOPIC, Event, pick_page

BATCH = 500  # messages per /mpub


def publish(nsqd_http: str, events: Sequence[Event], *, topic: str = TOPIC,
            client: httpx.Client | None = None) -> int:
    """Publish ``events`` in order to ``topic`` on the nsqd at ``nsqd_http`` (host:port);
    returns how many were published."""
    own = client is None
    http = client or httpx.Client(timeout=30.0)
    try:
        for i in range(0, len(events), BATCH):
            body = b"\n".join(e.to_json() for e in events[i:i + BATCH])
            http.post(f"http://{nsqd_http}/mpub", params={"topic": topic},
                      content=body).raise_for_status()
    finally:
        if own:
            http.close()
    return len(events)


def live(nsqd_http: str, *, rate: float = 20.0, seed: int | None = None, users: int = 400,
         skew_ms: int = 2000, topic: str = TOPIC, stop: threading.Event | None = None) -> None:
    """Publish about ``rate`` events a second, dated now (up to ``skew_ms`` earlier), until
    ``stop`` is set. Every fifth minute (minute 2 of each 5 on the clock) is a flash sale
    whose ``/sale`` views rise to about 13 times their usual rate (an alert)."""
    rng = random.Random(seed)
    stop = stop or threading.Event()
    with httpx.Client(timeout=30.0) as http:
        while not stop.is_set():
            now = int(time.time() * 1000)
            n = max(1, round(rng.gauss(rate, rate ** 0.5)))
            events = []
            for _ in range(n):
                ts = now - rng.randint(0, skew_ms)
                events.append(Event(f"u{rng.randrange(users):04d}", pick_page(rng, ts // 60_000), ts))
            publish(nsqd_http, events, topic=topic, client=http)
            stop.wait(1.0)
