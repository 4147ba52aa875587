"""``GET /metrics``: nsqd's state in Prometheus's text format (docs/operations.md lists it).

Everything is read at scrape time, by a custom collector, from the same place ``/stats``
reads it (``stats.topic_stats``), so the two always agree and publishing and delivering pay
nothing for it: no counter is updated per message. The HTTP API's route is
``nsq_serving.metrics_endpoint``, which imports this module on the first scrape:
prometheus-client takes about 60 ms to import, which every start would pay.
Counters (``*_total``) are nsqd's own since-start counts, so they restart from 0 with nsqd,
as Prometheus's ``rate()`` expects.

Units are base units: latencies in seconds (``/stats`` has nanoseconds), sizes in bytes,
depths in messages. A topic's or channel's memory depth is its depth less the part on disk.

With ``--etcd-endpoints``, a replicated topic also has its replication's figures (from its
``replication`` object of /stats, so the same on every replica, and the ISR changes this
node made as its leader); a topic that is not replicated has none of them, and an nsqd
without the flag no such family at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from nsq_common import nsqd_stats
from nsq_serving import build_info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .stats import topic_stats

if TYPE_CHECKING:
    from .broker import Broker
    from .replicas import Replicas

TOPIC = ["topic"]
CHANNEL = ["topic", "channel"]


class _Family(Protocol):
    def add_metric(self, labels: list[str], value: float) -> None: ...


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _counter(name: str, doc: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


class NsqdCollector(Collector):
    """Topics, channels, disk queues and connections of one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        info = build_info("the NSQ version this nsqd speaks")
        healthy = _gauge("nsq_healthy", "1 while disk writes succeed, 0 after one failed")
        healthy.add_metric([], 1 if broker.health == "OK" else 0)
        yield from (info, healthy)
        yield from self._topics()
        if broker.replication is not None:
            yield from self._replication(broker.replication)
        yield from self._connections()

    def _replication(self, cluster: Replicas) -> Iterator[Metric]:
        r: dict[str, Any] = {
            "replicas": _gauge("nsq_topic_replicas", "replicas the topic is placed on", TOPIC),
            "isr": _gauge("nsq_topic_in_sync_replicas", "replicas in the topic's in-sync set",
                          TOPIC),
            "under": _gauge("nsq_topic_under_replicated",
                            "1 while the in-sync set is smaller than the replicas", TOPIC),
            "leading": _gauge("nsq_topic_leader", "1 if this node leads the topic", TOPIC),
            "epoch": _gauge("nsq_topic_leader_epoch", "the topic's leader epoch", TOPIC),
            "shrinks": _counter("nsq_topic_isr_shrinks",
                                "replicas this node removed from the in-sync set as leader",
                                TOPIC),
            "expansions": _counter("nsq_topic_isr_expansions",
                                   "replicas this node added to the in-sync set as leader",
                                   TOPIC),
            "lag": _gauge("nsq_topic_follower_lag",
                          "records a follower is behind its leader, as this node knows it",
                          ["topic", "replica"]),
        }
        under = _gauge("nsq_under_replicated_topics",
                       "topics of this node whose in-sync set is smaller than their replicas")
        count = 0
        for name in sorted(self.broker.topics):
            described = cluster.describe(name)
            if described is None:
                continue
            labels = [name]
            placed, isr = len(described["replicas"]), len(described["isr"])
            count += isr < placed
            r["replicas"].add_metric(labels, placed)
            r["isr"].add_metric(labels, isr)
            r["under"].add_metric(labels, int(isr < placed))
            r["leading"].add_metric(labels, int(described["leader"] == cluster.node))
            r["epoch"].add_metric(labels, described["epoch"])
            shrinks, expansions = cluster.isr_changes(name)
            r["shrinks"].add_metric(labels, shrinks)
            r["expansions"].add_metric(labels, expansions)
            for replica, lag in sorted(described["lag"].items()):
                r["lag"].add_metric([name, replica], lag)
        under.add_metric([], count)
        yield from (*r.values(), under)

    def _topics(self) -> Iterator[Metric]:
        t: dict[str, Any] = {
            "depth": _gauge("nsq_topic_depth", "messages held by the topic (memory and disk)",
                            TOPIC),
            "memory": _gauge("nsq_topic_memory_depth", "the part of the depth in memory", TOPIC),
            "disk": _gauge("nsq_topic_disk_depth", "the part of the depth on disk", TOPIC),
            "messages": _counter("nsq_topic_messages", "messages published to the topic", TOPIC),
            "bytes": _counter("nsq_topic_message_bytes", "body bytes published to the topic",
                              TOPIC),
            "paused": _gauge("nsq_topic_paused", "1 if the topic is paused", TOPIC),
            "channels": _gauge("nsq_topic_channels", "channels of the topic", TOPIC),
            "damaged": _counter("nsq_topic_damaged_batches",
                                "damaged batches found in the topic's log (each lost alone, "
                                "its bytes kept aside)", TOPIC),
            "damaged_bytes": _counter("nsq_topic_damaged_bytes",
                                      "bytes of the damaged batches", TOPIC),
            "e2e": Metric("nsq_topic_e2e_processing_latency_seconds",
                          "publish-to-FIN latency quantiles over the e2e window, all channels",
                          "summary"),
        }
        c: dict[str, Any] = {
            "depth": _gauge("nsq_channel_depth",
                            "messages waiting for delivery (memory and disk)", CHANNEL),
            "memory": _gauge("nsq_channel_memory_depth", "the part of the depth in memory",
                             CHANNEL),
            "disk": _gauge("nsq_channel_disk_depth", "the part of the depth on disk", CHANNEL),
            "in_flight": _gauge("nsq_channel_in_flight",
                                "messages delivered and not yet answered", CHANNEL),
            "deferred": _gauge("nsq_channel_deferred", "messages held back until a due time",
                               CHANNEL),
            "messages": _counter("nsq_channel_messages",
                                 "messages the topic handed to the channel", CHANNEL),
            "requeued": _counter("nsq_channel_requeued", "REQs received", CHANNEL),
            "timed_out": _counter("nsq_channel_timed_out",
                                  "in-flight messages that passed their timeout", CHANNEL),
            "expired": _counter("nsq_channel_expired",
                                "messages dropped because their TTL had passed", CHANNEL),
            "dead": _gauge("nsq_channel_dead_letters",
                           "messages in the channel's dead-letter queue", CHANNEL),
            "clients": _gauge("nsq_channel_clients", "consumers subscribed", CHANNEL),
            "paused": _gauge("nsq_channel_paused", "1 if delivery is paused", CHANNEL),
            "e2e": Metric("nsq_channel_e2e_processing_latency_seconds",
                          "publish-to-FIN latency quantiles over the e2e window", "summary"),
        }
        disk: dict[str, Any] = {
            "healthy": _gauge("nsq_disk_queue_healthy",
                              "0 after a failed write or sync, 1 again after a good write",
                              CHANNEL),
            "write": _counter("nsq_disk_queue_write_errors", "failed disk queue writes",
                              CHANNEL),
            "sync": _counter("nsq_disk_queue_sync_errors", "failed disk queue fsyncs", CHANNEL),
        }
        for name, topic in sorted(self.broker.topics.items()):
            doc = topic_stats(topic, None, include_clients=False)
            labels = [name]
            _add_depths(t, labels, doc)
            t["messages"].add_metric(labels, doc.message_count)
            t["bytes"].add_metric(labels, doc.message_bytes)
            t["paused"].add_metric(labels, int(doc.paused))
            t["channels"].add_metric(labels, len(doc.channels))
            t["damaged"].add_metric(labels, doc.damaged_batches)
            t["damaged_bytes"].add_metric(labels, doc.damaged_bytes)
            _add_quantiles(t["e2e"], {"topic": name}, doc)
            _add_disk(disk, [name, ""], topic.log if topic.log.directory is not None else None)
            for ch in doc.channels:
                labels = [name, ch.channel_name]
                _add_depths(c, labels, ch)
                c["in_flight"].add_metric(labels, ch.in_flight_count)
                c["deferred"].add_metric(labels, ch.deferred_count)
                c["messages"].add_metric(labels, ch.message_count)
                c["requeued"].add_metric(labels, ch.requeue_count)
                c["timed_out"].add_metric(labels, ch.timeout_count)
                # (None in /stats until the feature is in use: 0 here, as before)
                c["expired"].add_metric(labels, ch.expired_count or 0)
                c["dead"].add_metric(labels, ch.dead_letter_count or 0)
                c["clients"].add_metric(labels, ch.client_count)
                c["paused"].add_metric(labels, int(ch.paused))
                _add_quantiles(c["e2e"], {"topic": name, "channel": ch.channel_name}, ch)
                _add_disk(disk, labels, topic.log if not ch.channel_name.endswith("#ephemeral")
                          and topic.log.directory is not None else None)
        yield from (*t.values(), *c.values(), *disk.values())

    def _connections(self) -> Iterator[Metric]:
        broker = self.broker
        tcp = _gauge("nsq_tcp_connections", "TCP clients connected (after the protocol magic)")
        tcp.add_metric([], len(broker.clients))
        tcp_total = _counter("nsq_tcp_connections_accepted", "TCP clients accepted")
        tcp_total.add_metric([], broker.clients_accepted)
        http = broker.http_connections
        yield from (tcp, tcp_total, *http_connection_metrics(http.open, http.accepted))


def http_connection_metrics(open_now: int, accepted: int) -> tuple[Metric, Metric]:
    gauge = _gauge("nsq_http_connections", "HTTP connections open (HTTP and HTTPS)")
    gauge.add_metric([], open_now)
    counter = _counter("nsq_http_connections_accepted", "HTTP connections accepted")
    counter.add_metric([], accepted)
    return gauge, counter


def _add_depths(families: dict[str, _Family], labels: list[str],
                doc: nsqd_stats.TopicStats | nsqd_stats.ChannelStats) -> None:
    for key, value in (("depth", doc.depth), ("disk", doc.backend_depth),
                       ("memory", doc.depth - doc.backend_depth)):
        families[key].add_metric(labels, value)


def _add_quantiles(family: Metric, labels: dict[str, str],
                   doc: nsqd_stats.TopicStats | nsqd_stats.ChannelStats) -> None:
    """A summary's quantiles only: like the quantiles, a ``_count`` and ``_sum`` would have
    to be added up on every FIN, and /stats has no such totals (its count is the window's)."""
    for p in doc.e2e_processing_latency["percentiles"] or []:
        family.add_sample(family.name, {**labels, "quantile": repr(float(p["quantile"]))},
                          p["value"] / 1e9)


class _Disk(Protocol):
    @property
    def healthy(self) -> bool: ...

    @property
    def write_errors(self) -> int: ...

    @property
    def sync_errors(self) -> int: ...


def _add_disk(families: dict[str, _Family], labels: list[str], disk: _Disk | None) -> None:
    if disk is None:  # ephemeral: memory only
        return
    for key, value in (("healthy", int(disk.healthy)), ("write", disk.write_errors),
                       ("sync", disk.sync_errors)):
        families[key].add_metric(labels, value)
