"""The /metrics pieces every daemon shares: their exact text, and an endpoint that builds its
registry on the first scrape only."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
from nsq_common import NSQ_VERSION
from nsq_serving import (
    ConnectionCounts,
    build_info,
    connection_metrics,
    metrics_endpoint,
    registry_with,
    render,
)
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.routing import Route


class Fixed(Collector):
    def __init__(self, counts: ConnectionCounts) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        yield build_info("the NSQ version d speaks")
        yield from connection_metrics("tcp", self.counts)


def test_shared_families_text() -> None:
    counts = ConnectionCounts()
    counts.open, counts.accepted = 2, 5
    text = bytes(render(registry_with(Fixed(counts))).body).decode()
    assert text.startswith(
        "# HELP nsq_build_info the NSQ version d speaks\n"
        "# TYPE nsq_build_info gauge\n"
        f'nsq_build_info{{version="{NSQ_VERSION}"}} 1.0\n'
        "# HELP nsq_tcp_connections TCP connections open\n"
        "# TYPE nsq_tcp_connections gauge\n"
        "nsq_tcp_connections 2.0\n"
        "# HELP nsq_tcp_connections_accepted_total TCP connections accepted\n"
        "# TYPE nsq_tcp_connections_accepted_total counter\n"
        "nsq_tcp_connections_accepted_total 5.0\n")
    assert "\npython_gc_objects_collected_total{" in text  # and the process's own
    assert "\npython_info{" in text


async def test_endpoint_builds_its_registry_on_the_first_scrape_only() -> None:
    counts = ConnectionCounts()
    made: list[Fixed] = []

    def collector() -> Collector:
        made.append(Fixed(counts))
        return made[-1]

    app = Starlette(routes=[Route("/metrics", metrics_endpoint(collector), methods=["GET"])])
    assert made == []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://d.test") as http:
        first = await http.get("/metrics")
        counts.open = 7
        second = await http.get("/metrics")
    assert len(made) == 1
    assert first.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "\nnsq_tcp_connections 0.0\n" in first.text
    assert "\nnsq_tcp_connections 7.0\n" in second.text
