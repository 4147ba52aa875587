"""The background sampler: every ``--refresh-interval``, one sample of every nsqd's
``/stats`` for the sparklines and graphs, whether or not anyone has a page open.

Which nsqd to sample is the node list (lookupd's ``/nodes``, or in nsqd mode each configured
nsqd's ``/info``), and that list is kept between samples rather than asked for each time:
nsqlookupd logs every HTTP request (as Go's does), and an nsqadmin nobody looks at would
otherwise fill its log with a ``GET /nodes`` line every interval. (nsqd logs no ``/stats``
request, so sampling it is quiet.) Go's nsqadmin asks the lookupds only while someone views a
page; this one asks them

* at its first sample (and at each sample until an answer comes);
* while someone is looking: a page, fragment or API request (not ``/ping``, ``/metrics`` or
  static files; see ``Viewers``) within the last ``VIEWED_WITHIN`` refresh intervals;
* after an incomplete answer or sample: a daemon that did not answer (a known nsqd that stops
  answering has perhaps left the cluster, or moved).

So an nsqd that joins while nobody looks is not sampled until someone opens a page (which
samples it anyway). Its graphs are not lost: a count seen for the first time counts from zero
at nsqd's ``start_time`` (``history.py``), so what it received before then shows as its
average rate since it started, on the windows that reach back that far.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import attrs
import trio

from . import views
from .state import Admin
from .stats import Node
from .upstream import ClusterError

log = logging.getLogger("nsqadmin")
VIEWED_WITHIN: Final = 3  # refresh intervals after a request during which /nodes is asked
QUIET_PATHS: Final = ("/ping", "/metrics", "/favicon.ico")  # probes and scrapes, not viewers


@attrs.define(eq=False)
class Viewers:
    """When a page, fragment or API request last came (``RequestLog`` tells ``saw``)."""

    base_path: str = "/"
    clock: Callable[[], float] = time.monotonic
    last: float | None = None

    def saw(self, path: str) -> None:
        """A request for ``path`` (under ``--base-path``) was answered."""
        base = self.base_path.rstrip("/")
        if base and (path == base or path.startswith(base + "/")):
            path = path[len(base):] or "/"
        if path in QUIET_PATHS or path.startswith("/static/"):
            return
        self.last = self.clock()

    def within(self, seconds: float) -> bool:
        """Whether a request came in the last ``seconds``."""
        return self.last is not None and self.clock() - self.last <= seconds


@attrs.define(eq=False)
class Sampler:
    admin: Admin
    interval: float
    viewers: Viewers = attrs.field(factory=Viewers)
    nodes: list[Node] | None = None  # the node list kept between samples; None: ask again

    async def sample(self) -> None:
        """Record one sample of every topic, channel and node (and the counter)."""
        cluster = self.admin.cluster
        try:
            if self.nodes is None or self.viewers.within(VIEWED_WITHIN * self.interval):
                found = await cluster.nodes()
                self.nodes = None if found.errors else found.value
                nodes = found.value
            else:
                nodes = self.nodes
            stats = await cluster.stats(nodes, include_clients=False)
        except ClusterError as exc:
            log.debug("sampler: %s", exc)
            self.nodes = None
            return
        if stats.errors:
            self.nodes = None
        views.record_history(self.admin, stats.value, stats.value.health)
        views.record_counter(self.admin, stats.value)
        await self.admin.lmstfy.discover(nodes)  # whether to offer the Jobs pages

    async def run(self) -> None:
        while True:
            await self.sample()
            await trio.sleep(self.interval)
