"""``GET /metrics``: nsqadmin's own figures in Prometheus's text format (docs/operations.md).

nsqadmin holds no queue state (the nsqds and nsqlookupds have their own ``/metrics``), so
this is its configuration, its HTTP connections and the process. Imported on the first
scrape (prometheus-client's import is slow: see ``nsq_serving.metrics_endpoint``).
"""

from __future__ import annotations

from collections.abc import Iterator

from nsq_serving import ConnectionCounts, build_info, connection_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .options import Options


class AdminCollector(Collector):
    def __init__(self, options: Options, http: ConnectionCounts) -> None:
        self.options, self.http = options, http

    def collect(self) -> Iterator[Metric]:
        upstreams = GaugeMetricFamily("nsq_admin_upstreams",
                                      "daemons nsqadmin is configured to query",
                                      labels=["daemon"])
        upstreams.add_metric(["nsqlookupd"], len(self.options.nsqlookupd_http_addresses))
        upstreams.add_metric(["nsqd"], len(self.options.nsqd_http_addresses))
        yield from (build_info("the NSQ version this nsqadmin speaks"), upstreams,
                    *connection_metrics("http", self.http))
