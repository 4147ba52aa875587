"""Choosing a destination, as nsq_to_http and nsq_to_nsq do (after bitly's go-hostpool), and
their timing reports (after bitly's timer_metrics). Pure, with injected clock and randomness.

* ``HostPool`` (``--mode=hostpool``): round-robin over the hosts that are up; a host that
  fails is left out for 30 s, doubling per failure up to 900 s; when every host is out, all
  come back at once.
* ``EpsilonGreedy`` (``--mode=epsilon-greedy``): like ``HostPool``, but usually picks the
  host with the best recent response time, exploring a random one with probability epsilon
  (0.3).
* ``TimerMetrics``: every ``status_every`` durations, log the 99th, 95th percentile and
  average, NSQ's text.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence

import attrs

log = logging.getLogger("nsq_client.tools")

INITIAL_RETRY = 30.0
MAX_RETRY = 900.0


@attrs.define(eq=False)
class _Host:
    name: str
    dead: bool = False
    retry_at: float = 0.0
    retry_delay: float = INITIAL_RETRY
    average: float = 0.0  # seconds, exponentially weighted
    samples: int = 0


class HostPool:
    def __init__(self, hosts: Sequence[str], *, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        if not hosts:
            raise ValueError("a host pool needs hosts")
        self.hosts = [_Host(h) for h in hosts]
        self.clock = clock
        self.rng = rng or random.Random()
        self._next = 0

    def live(self) -> list[_Host]:
        now = self.clock()
        for host in self.hosts:
            if host.dead and now >= host.retry_at:
                host.dead = False  # give it another chance
        live = [h for h in self.hosts if not h.dead]
        if not live:
            for host in self.hosts:
                host.dead = False
            live = list(self.hosts)
        return live

    def get(self) -> str:
        live = self.live()
        host = live[self._next % len(live)]
        self._next += 1
        return host.name

    def mark(self, name: str, error: BaseException | None, duration: float = 0.0) -> None:
        for host in self.hosts:
            if host.name != name:
                continue
            if error is None:
                host.retry_delay = INITIAL_RETRY
                host.samples += 1
                host.average += (duration - host.average) / min(host.samples, 10)
            elif not host.dead:
                host.dead = True
                host.retry_at = self.clock() + host.retry_delay
                host.retry_delay = min(host.retry_delay * 2, MAX_RETRY)


class EpsilonGreedy(HostPool):
    epsilon = 0.3

    def get(self) -> str:
        live = self.live()
        if self.rng.random() < self.epsilon or not any(h.samples for h in live):
            return self.rng.choice(live).name
        return min(live, key=lambda h: h.average if h.samples else math.inf).name


class TimerMetrics:
    """Durations in a ring of ``status_every``; a report each time it comes round."""

    def __init__(self, status_every: int, prefix: str) -> None:
        self.status_every = status_every
        self.prefix = prefix
        self.timings: list[float] = []
        self.position = 0
        if 0 < status_every < 100:
            log.warning("Warning: use more than 100 status values for accurate percentiles "
                        "(configured with %d)", status_every)

    def status(self, duration: float) -> str | None:
        """Record one duration (seconds); returns (and logs) the report when one is due."""
        if self.status_every == 0:
            return None
        self.position += 1
        looped = False
        if self.position > self.status_every:
            looped = True
            self.position = 1
        if self.position > len(self.timings):
            self.timings.append(duration)
        else:
            self.timings[self.position - 1] = duration
        if not looped:
            return None
        text = self.report()
        log.info("%s", text)
        return text

    def report(self) -> str:
        timings = sorted(self.timings)
        avg = sum(timings) / len(timings) if timings else 0.0
        return (f"{self.prefix} finished {len(timings)} - 99th: {_percentile(99.0, timings) * 1000:.02f}ms"
                f" - 95th: {_percentile(95.0, timings) * 1000:.02f}ms - avg: {avg * 1000:.02f}ms")


def _percentile(perc: float, ordered: list[float]) -> float:
    if not ordered:
        return 0.0
    index = math.ceil(perc / 100.0 * len(ordered) + 0.5)
    return ordered[min(index, len(ordered) - 1)]
