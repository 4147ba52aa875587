"""``GET /metrics``: nsqlookupd's registry in Prometheus's text format (docs/operations.md).

Read at scrape time from the registry, with the same rules as the HTTP API: a producer
counts while ``/nodes`` and ``/lookup`` would show it (heard from within
``--inactive-producer-timeout``; ``/lookup``'s also not tombstoned). Registration events are
counted by the registry as nsqds join and leave registrations, connections by the servers as
they open and close. Imported on the first scrape (prometheus-client's import is slow) by the
route, ``nsq_serving.metrics_endpoint``, as the pieces every daemon's ``/metrics`` has.
"""

from __future__ import annotations

from collections.abc import Iterator

from nsq_serving import ConnectionCounts, build_info, connection_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .registry import CHANNEL, CLIENT, TOPIC, RegistrationDB

__all__ = ["LookupdCollector"]


class LookupdCollector(Collector):
    def __init__(self, db: RegistrationDB, tcp: ConnectionCounts, http: ConnectionCounts
                 ) -> None:
        self.db, self.tcp, self.http = db, tcp, http

    def collect(self) -> Iterator[Metric]:
        db = self.db
        info = build_info("the NSQ version this nsqlookupd speaks")
        nodes = [p for p in db.find_producers(CLIENT, "", "")
                 if db.is_active(p, tombstone_lifetime=0)]
        producers = GaugeMetricFamily("nsq_lookupd_producers",
                                      "nsqds registered and heard from (as /nodes lists them)")
        producers.add_metric([], len(nodes))
        topic_regs = db.find_registrations(TOPIC, "*", "")
        topics = GaugeMetricFamily("nsq_lookupd_topics", "topics registered")
        topics.add_metric([], len(topic_regs))
        channels = GaugeMetricFamily("nsq_lookupd_channels", "channels registered")
        channels.add_metric([], len(db.find_registrations(CHANNEL, "*", "*")))
        per_topic = GaugeMetricFamily("nsq_lookupd_topic_producers",
                                      "nsqds /lookup returns for the topic", labels=["topic"])
        tombstones = GaugeMetricFamily("nsq_lookupd_tombstones",
                                       "topic producers under a live tombstone")
        tombstoned = 0
        for reg in sorted(topic_regs, key=lambda r: r.key):
            regs = db.producers(reg)
            per_topic.add_metric([reg.key], sum(1 for p in regs if db.is_active(p)))
            tombstoned += sum(1 for p in regs if db.is_tombstoned(p))
        tombstones.add_metric([], tombstoned)
        events = CounterMetricFamily(
            "nsq_lookupd_registration_events",
            "nsqds joining (register) or leaving (unregister, disconnects included) a "
            "registration of a category (client, topic, channel)",
            labels=["action", "category"])
        for action in ("register", "unregister"):
            for category in (CLIENT, TOPIC, CHANNEL):
                events.add_metric([action, category], db.events.get((action, category), 0))
        yield from (info, producers, topics, channels, per_topic, tombstones, events)
        yield from connection_metrics("tcp", self.tcp)
        yield from connection_metrics("http", self.http)

