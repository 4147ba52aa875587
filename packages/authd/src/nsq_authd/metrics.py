"""``GET /metrics``: the auth server's figures in Prometheus's text format
(docs/operations.md): its secrets, HTTP connections and the process.

Nothing is counted per request: answers are logged, and counting them would be work on
nsqd's AUTH path for a figure the nsqds' own client counts already give. Imported on the
first scrape (prometheus-client's import is slow: see ``nsq_serving.metrics_endpoint``).
"""

from __future__ import annotations

from collections.abc import Iterator

from nsq_serving import ConnectionCounts, build_info, connection_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .secrets_file import SecretStore


class AuthCollector(Collector):
    def __init__(self, store: SecretStore, http: ConnectionCounts) -> None:
        self.store, self.http = store, http

    def collect(self) -> Iterator[Metric]:
        secrets = GaugeMetricFamily("nsq_auth_secrets", "secrets loaded from the secrets file")
        secrets.add_metric([], len(self.store.current))
        yield from (build_info("the NSQ version nsq_auth answers for"), secrets,
                    *connection_metrics("http", self.http))
