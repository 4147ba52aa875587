"""``GET /metrics``: the auth server's figures in Prometheus's text format
(docs/operations.md): its secrets, HTTP connections and the process.

Nothing is counted per request: answers are logged, and counting them would be work on
nsqd's AUTH path for a figure the nsqds' own client counts already give. Imported on the
first scrape (prometheus-client's import is slow).
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

from .secrets_file import SecretStore


class AuthCollector(Collector):
    def __init__(self, store: SecretStore, http: ConnectionCounts) -> None:
        self.store, self.http = store, http

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("nsq_build_info", "the NSQ version nsq_auth answers for",
                                 labels=["version"])
        info.add_metric([NSQ_VERSION], 1)
        secrets = GaugeMetricFamily("nsq_auth_secrets", "secrets loaded from the secrets file")
        secrets.add_metric([], len(self.store.current))
        connections = GaugeMetricFamily("nsq_http_connections", "HTTP connections open")
        connections.add_metric([], self.http.open)
        accepted = CounterMetricFamily("nsq_http_connections_accepted",
                                       "HTTP connections accepted")
        accepted.add_metric([], self.http.accepted)
        yield from (info, secrets, connections, accepted)


def registry_for(store: SecretStore, http: ConnectionCounts) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AuthCollector(store, http))
    for collector in (PROCESS_COLLECTOR, GC_COLLECTOR, PLATFORM_COLLECTOR):
        registry.register(collector)
    return registry


def render(registry: CollectorRegistry) -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)
