"""/stats: the broker's state in NSQ's JSON shape (field names and order) and its text form.

nsqadmin, nsq_stat and other NSQ tooling read these; keep names, order, ``null`` vs ``[]``
exactly as nsqd writes them.

The job features' keys (beyond NSQ) come after Go's, and only once their feature is in use, so
a daemon whose users use only NSQ's features answers Go's nsqd 1.3 document key for key:

- a topic's ``message_ttl``: while it has a default TTL;
- a channel's ``max_attempts`` and ``dead_letter_expired``: while set;
- ``dead_letter_count``: while an attempt limit applies (its own, or ``--max-attempts``), expired
  messages go to the dead letters, or it holds any;
- ``expired_count``: while its topic has a TTL, expired messages go to the dead letters, or once
  it has counted one;
- a topic's ``retention`` (ns) and ``retention_bytes``: while set;
- the log's offsets, a topic's ``earliest_offset`` and ``latest_offset`` and each of its
  channels' cursor (``mark_delete_offset``, ``read_offset``): with ``include_offsets=true``
  (nsqadmin asks so), never with ``include_offsets=false``, and without the parameter on a
  topic that has a retention (replay is in use there);
- a topic's ``damaged_batches`` and ``damaged_bytes``: once damage was found in its log
  (``segment``: kept aside, the rest read on);
- a topic's ``replication``: on an nsqd with ``--etcd-endpoints``, for a topic placed in the
  cluster (docs/design/replication.md): ``{"leader", "epoch", "replicas", "isr",
  "high_watermark", "lag"}``, the same on every replica.
"""

from __future__ import annotations

import gc
import platform
import resource
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from nsq_common import NSQ_VERSION, format_go_duration, nsqd_stats

from .channel import Channel
from .client import Client
from .e2e import summary

if TYPE_CHECKING:
    from .replicas import Replicas
    from .topic import Topic


class StatsSource(Protocol):
    """What /stats reads of the broker (``broker.Broker`` is one): no import of it, so no
    cycle."""

    topics: dict[str, Topic]
    clients: dict[int, Client]
    health: str
    start_time: int
    replication: Replicas | None


def _e2e(channels: list[Channel]) -> dict[str, Any]:
    return summary(c.e2e for c in channels if c.e2e is not None)


def client_stats(client: Client, topic_filter: str | None = None) -> nsqd_stats.ClientStats:
    auth = client.auth
    return nsqd_stats.ClientStats(
        client_id=client.client_id, hostname=client.hostname, version="V2",
        remote_address=client.remote_address, state=int(client.state), ready_count=client.rdy,
        in_flight_count=client.in_flight, message_count=client.message_count,
        finish_count=client.finish_count, requeue_count=client.requeue_count,
        connect_ts=client.connect_ts, sample_rate=client.sample_rate, deflate=client.deflate,
        snappy=client.snappy, user_agent=client.user_agent, authed=auth is not None,
        auth_identity=auth.identity if auth else "",
        auth_identity_url=auth.identity_url if auth else "",
        pub_counts=tuple(nsqd_stats.PubCount(t, n) for t, n in sorted(client.pub_counts.items())
                         if topic_filter is None or t == topic_filter),
        tls=client.tls, tls_cipher_suite=client.tls_cipher_suite, tls_version=client.tls_version,
        tls_negotiated_protocol="", tls_negotiated_protocol_is_mutual=False,
    )


def channel_stats(channel: Channel, include_clients: bool, topic_ttl: int = 0, *,
                  offsets: bool = False) -> nsqd_stats.ChannelStats:
    """``channel``'s object; ``topic_ttl``: its topic's default message TTL; ``offsets``: with
    its cursor (see above)."""
    # (a channel's consumers are Clients; the isinstance only tells the type checker so)
    clients = (tuple(client_stats(c) for c in channel.clients.values() if isinstance(c, Client))
               if include_clients else None)
    to_dead = channel.dead_letter_expired
    dead, expired = channel.dead_letter_count, channel.expired_count
    limited = channel.max_attempts or channel.default_max_attempts
    return nsqd_stats.ChannelStats(
        channel_name=channel.name, depth=channel.depth, backend_depth=channel.backend_depth,
        in_flight_count=len(channel.in_flight), deferred_count=len(channel.deferred),
        message_count=channel.message_count, requeue_count=channel.requeue_count,
        timeout_count=channel.timeout_count, client_count=len(channel.clients),
        clients=clients, paused=channel.paused, e2e_processing_latency=_e2e([channel]),
        expired_count=expired if expired or topic_ttl or to_dead else None,
        dead_letter_count=dead if dead or limited or to_dead else None,
        max_attempts=channel.max_attempts, dead_letter_expired=to_dead,
        mark_delete_offset=channel.cursor.mark_delete if offsets else None,
        read_offset=channel.cursor.read if offsets else None,
    )


def topic_stats(topic: Topic, channel_filter: str | None, include_clients: bool, *,
                include_offsets: bool | None = False, replication: Replicas | None = None
                ) -> nsqd_stats.TopicStats:
    """``topic``'s object; ``include_offsets`` None: the offsets while it has a retention;
    ``replication``: the cluster, with --etcd-endpoints."""
    ttl = topic.message_ttl
    log = topic.log
    retention, retention_bytes = log.retention_ns, log.retention_bytes
    offsets = (bool(retention or retention_bytes) if include_offsets is None
               else include_offsets)
    channels = tuple(channel_stats(c, include_clients, ttl, offsets=offsets)
                     for name, c in sorted(topic.channels.items())
                     if channel_filter is None or name == channel_filter)
    return nsqd_stats.TopicStats(
        topic_name=topic.name, channels=channels, depth=topic.depth,
        backend_depth=topic.backend_depth, message_count=topic.message_count,
        message_bytes=topic.message_bytes, paused=topic.paused,
        e2e_processing_latency=_e2e(list(topic.channels.values())),
        message_ttl=ttl, retention=retention, retention_bytes=retention_bytes,
        earliest_offset=log.start if offsets else None,
        latest_offset=log.end - 1 if offsets else None,
        damaged_batches=log.damaged_batches, damaged_bytes=log.damaged_bytes,
        replication=replication.describe(topic.name) if replication is not None else None,
    )


def memory_stats() -> nsqd_stats.MemoryStats:
    """Go runtime figures have no Python twin; these are the nearest honest ones:
    allocated blocks for heap_objects, resident bytes for heap_in_use_bytes, GC runs."""
    try:
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * resource.getpagesize()
    except OSError:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return nsqd_stats.MemoryStats(
        heap_objects=sys.getallocatedblocks(), heap_idle_bytes=0, heap_in_use_bytes=rss,
        heap_released_bytes=0, gc_pause_usec_100=0, gc_pause_usec_99=0, gc_pause_usec_95=0,
        next_gc_bytes=0, gc_total_runs=sum(g["collections"] for g in gc.get_stats()))


def stats(broker: StatsSource, *, topic: str | None = None, channel: str | None = None,
          include_clients: bool = True, include_mem: bool = True,
          include_offsets: bool | None = None) -> dict[str, Any]:
    """The /stats?format=json document (``include_offsets`` None: the parameter not given)."""
    topics: tuple[nsqd_stats.TopicStats, ...] | None
    if topic is not None and topic not in broker.topics:
        topics = None
    else:
        selected = [t for name, t in sorted(broker.topics.items())
                    if topic is None or name == topic]
        if channel is not None:
            selected = [t for t in selected if channel in t.channels]
        topics = tuple(topic_stats(t, channel, include_clients, include_offsets=include_offsets,
                                   replication=broker.replication)
                       for t in selected)
    producers: tuple[nsqd_stats.ClientStats, ...] | None = None
    if include_clients and topics is not None:
        pubs = tuple(client_stats(c, topic) for c in broker.clients.values() if c.pub_counts
                     and (topic is None or topic in c.pub_counts))
        producers = pubs or None
    return nsqd_stats.Stats(
        version=NSQ_VERSION, health=broker.health, start_time=broker.start_time, topics=topics,
        memory=memory_stats() if include_mem else None, producers=producers,
    ).to_json()


def _e2e_text(obj: dict[str, Any]) -> str:
    percentiles = obj["e2e_processing_latency"]["percentiles"] or []
    return ", ".join(f"{p['quantile'] * 100:.1f}%={format_go_duration(p['value'] / 1e9)}"
                     for p in percentiles)


def _duration_since(ts: int, now: int) -> str:
    return format_go_duration(float(now - ts))


def _client_name(c: dict[str, Any]) -> str:
    port = c["remote_address"].rsplit(":", 1)[-1]
    return f"{c['hostname']}:{port} {c['user_agent']}"


def _consumer_line(c: dict[str, Any], now: int) -> str:
    name = _client_name(c)
    return (f"[V2 {name:<21}] state: {c['state']} inflt: {c['in_flight_count']:<4} "
            f"rdy: {c['ready_count']:<4} fin: {c['finish_count']:<8} re-q: {c['requeue_count']:<8} "
            f"msgs: {c['message_count']:<8} connected: {_duration_since(c['connect_ts'], now)}")


def _producer_line(c: dict[str, Any], now: int) -> str:
    name = _client_name(c)
    counts = ",".join(f"{p['topic']}={p['count']}" for p in c.get("pub_counts", []))
    return (f"[V2 {name:<21}] msgs: {c['message_count']:<8} topics: {counts} "
            f"connected: {_duration_since(c['connect_ts'], now)}")


def stats_text(doc: dict[str, Any], now: int) -> str:
    """The text form of /stats, laid out as nsqd lays it out; ``now``: the broker's wall
    clock in seconds (uptimes and connection ages)."""
    start = datetime.fromtimestamp(doc["start_time"], UTC).isoformat().replace("+00:00", "Z")
    out = [f"nsqd v{doc['version']} (built w/python{platform.python_version()})\n",
           f"start_time {start}\n",
           f"uptime {_duration_since(doc['start_time'], now)}\n",
           f"\nHealth: {doc['health']}\n"]
    if "memory" in doc:
        out.append("\nMemory:\n")
        for key, value in doc["memory"].items():
            out.append(f"   {key:<25}\t{value}\n")
    out.append(_heading("Topics", doc["topics"], ""))  # each topic's line starts with one
    for t in doc["topics"] or []:
        mark = "*P " if t["paused"] else "   "
        out.append(f"\n{mark}[{t['topic_name']:<15}] depth: {t['depth']:<5} "
                   f"be-depth: {t['backend_depth']:<5} msgs: {t['message_count']:<8} "
                   f"e2e%: {_e2e_text(t)}{_extensions(t, _TOPIC_EXTENSIONS)}\n")
        for c in t["channels"]:
            mark = "   *P " if c["paused"] else "      "
            out.append(f"{mark}[{c['channel_name']:<25}] depth: {c['depth']:<5} "
                       f"be-depth: {c['backend_depth']:<5} inflt: {c['in_flight_count']:<4} "
                       f"def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5} "
                       f"timeout: {c['timeout_count']:<5} "
                       f"msgs: {c['message_count']:<8} e2e%: {_e2e_text(c)}"
                       f"{_extensions(c, _CHANNEL_EXTENSIONS)}\n")
            for client in c["clients"] or []:
                out.append(f"        {_consumer_line(client, now)}\n")
    out.append(_heading("Producers", doc["producers"], "\n"))
    for p in doc["producers"] or []:
        out.append(f"   {_producer_line(p, now)}\n")
    return "".join(out)


# Our keys in the text form, after Go's line, where the JSON has them.
_TOPIC_EXTENSIONS = (("message_ttl", "ttl"), ("retention", "retention"),
                     ("retention_bytes", "retention-bytes"),
                     ("earliest_offset", "earliest-offset"), ("latest_offset", "latest-offset"))
_CHANNEL_EXTENSIONS = (("expired_count", "expired"), ("dead_letter_count", "dead"),
                       ("max_attempts", "max-attempts"),
                       ("dead_letter_expired", "dead-letter-expired"),
                       ("mark_delete_offset", "mark-delete"), ("read_offset", "read"))
_PER_SECOND = {"message_ttl": 1, "retention": 1_000_000_000}  # durations: units a second


def _extensions(obj: dict[str, Any], names: tuple[tuple[str, str], ...]) -> str:
    """`` ttl: 60s``, `` dead: 3 max-attempts: 5``: the extension keys ``obj`` has, if any."""
    out = []
    for key, label in names:
        if key in obj:
            value = obj[key]
            units = _PER_SECOND.get(key)
            text = (format_go_duration(value / units) if units is not None
                    else str(value).lower())
            out.append(f" {label}: {text}")
    return "".join(out)


def _heading(title: str, items: list[Any] | None, end: str) -> str:
    """A section's title line, or ``<title>: None`` when it lists nothing."""
    return f"\n{title}:{end}" if items else f"\n{title}: None\n"
