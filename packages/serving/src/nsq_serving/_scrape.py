"""``metrics_endpoint``: a daemon's ``GET /metrics`` route, which loads nothing until scraped.

prometheus-client takes about 60 ms to import, which every start would pay (``nsq_auth
--version`` included) for a route that may never be asked for. The endpoint builds its
registry on the first scrape: it calls the daemon's ``collector()``, which imports the
daemon's metrics module there, and keeps the registry for the scrapes after.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from prometheus_client.registry import Collector, CollectorRegistry


def metrics_endpoint(collector: Callable[[], Collector]
                     ) -> Callable[[Request], Awaitable[Response]]:
    """The ``async def endpoint(request)`` of ``GET /metrics``: what ``collector()`` yields
    and the process's figures (``registry_with``), in Prometheus's text format."""
    registry: CollectorRegistry | None = None

    async def metrics(request: Request) -> Response:
        nonlocal registry
        from ._metrics import registry_with, render  # deferred: see the module's docstring

        if registry is None:
            registry = registry_with(collector())
        return render(registry)

    return metrics
