"""The pieces of ``GET /metrics`` every daemon serves alike, in Prometheus's text format.

A daemon's collector yields its own figures, ``build_info`` and the ``connection_metrics`` of
its servers; ``registry_with`` adds the process's collectors, ``render`` writes the answer.
This module imports prometheus-client (about 60 ms), so it is imported on the first scrape
(``metrics_endpoint``), never at start-up.
"""

from __future__ import annotations

from nsq_common import NSQ_VERSION
from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.responses import Response

from ._server import ConnectionCounts


def build_info(documentation: str) -> Metric:
    """``nsq_build_info{version="<NSQ_VERSION>"} 1``, described by ``documentation``."""
    info = GaugeMetricFamily("nsq_build_info", documentation, labels=["version"])
    info.add_metric([NSQ_VERSION], 1)
    return info


def connection_metrics(kind: str, counts: ConnectionCounts) -> tuple[Metric, Metric]:
    """``nsq_<kind>_connections`` (open now) and ``nsq_<kind>_connections_accepted`` (since
    start) of one server; ``kind`` is ``"http"`` or ``"tcp"``."""
    gauge = GaugeMetricFamily(f"nsq_{kind}_connections", f"{kind.upper()} connections open")
    gauge.add_metric([], counts.open)
    counter = CounterMetricFamily(f"nsq_{kind}_connections_accepted",
                                  f"{kind.upper()} connections accepted")
    counter.add_metric([], counts.accepted)
    return gauge, counter


def registry_with(collector: Collector) -> CollectorRegistry:
    """A registry of ``collector`` and the process's own (CPU, memory, GC, platform)."""
    registry = CollectorRegistry(auto_describe=False)
    for each in (collector, PROCESS_COLLECTOR, GC_COLLECTOR, PLATFORM_COLLECTOR):
        registry.register(each)
    return registry


def render(registry: CollectorRegistry) -> Response:
    """The scrape of ``registry`` as a ``GET /metrics`` answer."""
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)
