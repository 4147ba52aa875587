"""``GET /metrics``: nsqadmin's own figures in Prometheus's text format (docs/operations.md).

nsqadmin holds no queue state (the nsqds and nsqlookupds have their own ``/metrics``), so
this is its configuration, its HTTP connections and the process. Imported on the first
scrape (prometheus-client's import is slow).
"""

from __future__ import annotations

from collections.abc import Iterator

from nsq_common import NSQ_VERSION
from nsq_serving import ConnectionCounts
from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.responses import Response

from .options import Options


class AdminCollector(Collector):
    def __init__(self, options: Options, http: ConnectionCounts) -> None:
        self.options, self.http = options, http

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("nsq_build_info", "the NSQ version this nsqadmin speaks",
                                 labels=["version"])
        info.add_metric([NSQ_VERSION], 1)
        upstreams = GaugeMetricFamily("nsq_admin_upstreams",
                                      "daemons nsqadmin is configured to query",
                                      labels=["daemon"])
        upstreams.add_metric(["nsqlookupd"], len(self.options.nsqlookupd_http_addresses))
        upstreams.add_metric(["nsqd"], len(self.options.nsqd_http_addresses))
        connections = GaugeMetricFamily("nsq_http_connections", "HTTP connections open")
        connections.add_metric([], self.http.open)
        accepted = CounterMetricFamily("nsq_http_connections_accepted",
                                       "HTTP connections accepted")
        accepted.add_metric([], self.http.accepted)
        yield from (info, upstreams, connections, accepted)


def registry_for(options: Options, http: ConnectionCounts) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AdminCollector(options, http))
    for collector in (PROCESS_COLLECTOR, GC_COLLECTOR, PLATFORM_COLLECTOR):
        registry.register(collector)
    return registry


def render(registry: CollectorRegistry) -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)
