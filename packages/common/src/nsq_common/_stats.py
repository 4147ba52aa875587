"""What nsqd's ``/stats`` (``format=json``) says of topics, channels and clients, as the tools
that read it use it: nsqadmin's pages and JSON API, nsq_stat's totals (Go's
internal/clusterinfo/types.go, NSQ 1.3.0 shapes, which both Go tools share).

Each nsqd's reply is read with nsqd's own shapes (``_nsqd_stats``, which nsqd writes with:
the same names, and zero values for missing keys), then becomes
per-node values (``node`` = that nsqd's HTTP address, ``hostname`` its own) with the fields
of the same name copied; ``memory_depth`` is ``depth - backend_depth``, as clusterinfo
derives it. The ``aggregate_*`` functions sum values across nodes into one whose ``node`` is
``*`` and whose ``nodes`` lists the per-node parts (clusterinfo's ``Add``). ``to_json`` writes
nsqadmin's JSON API field order.

Our keys (beyond NSQ) follow nsqd's rule: a key missing from a reply (Go's nsqd, or ours
while nobody uses the feature) is "not in use": the counts are then None (``0`` would claim a
dead-letter queue that is not there), the settings 0 or false. Summed over nodes, a count is
None only when no node has it; ``to_json`` writes these keys after Go's, and only the ones in
use, as nsqd does.

The log's offsets (``include_offsets``) are each nsqd's own: a topic's ``earliest_offset`` and
``latest_offset`` and a channel's ``mark_delete_offset`` and ``read_offset`` are kept per node
and are None once summed; what sums is a channel's ``lag``, derived per node as its topic's
``latest_offset + 1 - mark_delete_offset`` (messages published it has not got past)::

    {"topics": [{"topic_name": "t", "depth": 3, "backend_depth": 1, "message_count": 9,
                 "paused": false, "e2e_processing_latency": {"count": 0, "percentiles": null},
                 "channels": [{"channel_name": "c", "depth": 2, "in_flight_count": 1, ...,
                               "clients": [{"client_id": "w1", "connect_ts": 1700000000, ...}]}]}]}
      -> TopicStats.parse(topic, node, hostname) -> TopicStats(channels=(ChannelStats(...),))
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import attrs
from attrs import AttrsInstance

from . import _nsqd_stats as nsqd

_NS = 1_000_000_000
_T = TypeVar("_T", bound=AttrsInstance)


@attrs.frozen
class Latency:
    """``e2e_processing_latency``: percentiles as maps of quantile/value/min/max/average/count."""

    count: int = 0
    percentiles: tuple[dict[str, float], ...] | None = None
    topic: str = ""
    channel: str = ""
    host: str = ""

    @classmethod
    def parse(cls, raw: Any) -> Latency:
        raw = raw if isinstance(raw, dict) else {}
        count = int(raw.get("count") or 0)
        items = raw.get("percentiles")
        if items is None:
            return cls(count=count)
        percentiles = []
        for item in items:
            value = float(item.get("value", 0))
            percentiles.append({"quantile": float(item.get("quantile", 0)), "value": value,
                                "min": value, "max": value, "average": value,
                                "count": float(count)})
        return cls(count=count, percentiles=tuple(percentiles))

    def merged(self, other: Latency, host: str, topic: str, channel: str = "") -> Latency:
        """Combine per-node percentiles: min/max kept, averages weighted by count."""
        merged = [dict(p) for p in self.percentiles or ()]
        for theirs in other.percentiles or ():
            mine = next((p for p in merged if p["quantile"] == theirs["quantile"]), None)
            if mine is None:
                mine = {"quantile": theirs["quantile"], "min": math.inf, "max": 0.0,
                        "average": 0.0, "count": 0.0}
                merged.append(mine)
            mine["max"] = max(mine["max"], theirs["max"])
            mine["min"] = min(mine["min"], theirs["min"])
            mine["count"] += theirs["count"]
            if mine["count"]:
                weight = theirs["count"] / mine["count"]
                mine["average"] += (theirs["average"] - mine["average"]) * weight
        percentiles = tuple(merged) if merged or self.percentiles is not None else None
        return Latency(self.count + other.count, percentiles, topic, channel, host)

    def to_json(self) -> dict[str, Any]:
        items = None
        if self.percentiles is not None:
            items = [{k: p[k] for k in sorted(p)} for p in self.percentiles]
        return {"count": self.count, "percentiles": items, "topic": self.topic,
                "channel": self.channel, "host": self.host}


@attrs.frozen
class ClientStats:
    """One client of a channel on one nsqd (``connected``: ns since ``connect_ts``)."""

    node: str
    remote_address: str
    version: str
    client_id: str
    hostname: str
    user_agent: str
    connect_ts: int
    connected: int  # nanoseconds since connect_ts, as Go's time.Duration
    in_flight_count: int
    ready_count: int
    finish_count: int
    requeue_count: int
    message_count: int
    sample_rate: int
    deflate: bool
    snappy: bool
    authed: bool
    auth_identity: str
    auth_identity_url: str
    tls: bool
    tls_cipher_suite: str
    tls_version: str
    tls_negotiated_protocol: str
    tls_negotiated_protocol_is_mutual: bool

    @classmethod
    def parse(cls, raw: dict[str, Any], node: str, now: float | None = None) -> ClientStats:
        return cls.from_nsqd(nsqd.ClientStats.from_json(raw), node, now)

    @classmethod
    def from_nsqd(cls, client: nsqd.ClientStats, node: str, now: float | None = None
                  ) -> ClientStats:
        now = int(time.time() if now is None else now)
        return _from_nsqd(cls, client, node=node, connected=(now - client.connect_ts) * _NS)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _from_nsqd(cls: type[_T], shape: AttrsInstance, **derived: Any) -> _T:
    """``cls`` with the fields it shares with nsqd's ``shape`` copied, and the ``derived``
    ones (the rest: nsqd's own, as ``state`` and ``pub_counts``, are not kept)."""
    theirs = attrs.fields_dict(type(shape))
    return cls(**{f.name: getattr(shape, f.name) for f in attrs.fields(cls)
                  if f.name in theirs and f.name not in derived}, **derived)


def _sum(items: Iterable[Any], name: str) -> int:
    return sum(getattr(i, name) for i in items)


def _sum_in_use(items: Iterable[Any], name: str) -> int | None:
    """The sum over the nodes where the count is in use; None when it is in use on none."""
    counts = [c for c in (getattr(i, name) for i in items) if c is not None]
    return sum(counts) if counts else None


def _in_use(counts: dict[str, int | None], settings: dict[str, int | bool]
            ) -> dict[str, Any]:
    """The job features' keys to write, in this order: the counts in use, the settings set."""
    return {**{k: v for k, v in counts.items() if v is not None},
            **{k: v for k, v in settings.items() if v}}


def _by_host(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(sorted(items, key=lambda i: (i.hostname, i.node)))


@attrs.frozen
class ChannelStats:
    """One channel on one nsqd, or summed over several (``aggregate_channel``)."""

    node: str
    hostname: str
    topic_name: str
    channel_name: str
    depth: int = 0
    memory_depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    message_count: int = 0
    client_count: int = 0
    nodes: tuple[ChannelStats, ...] | None = None
    clients: tuple[ClientStats, ...] | None = None
    paused: bool = False
    e2e_processing_latency: Latency = attrs.field(factory=Latency)
    # beyond NSQ (see the module's docstring): None / 0 / false while not in use
    expired_count: int | None = None
    dead_letter_count: int | None = None
    max_attempts: int = 0
    dead_letter_expired: bool = False
    # the log's offsets (see the module's docstring): None without them, and once summed
    mark_delete_offset: int | None = None
    read_offset: int | None = None
    lag: int | None = None  # summed over nodes

    @classmethod
    def parse(cls, raw: dict[str, Any], node: str, hostname: str, topic: str,
              now: float | None = None) -> ChannelStats:
        return cls.from_nsqd(nsqd.ChannelStats.from_json(raw), node, hostname, topic, now)

    @classmethod
    def from_nsqd(cls, channel: nsqd.ChannelStats, node: str, hostname: str, topic: str,
                  now: float | None = None, topic_end: int | None = None) -> ChannelStats:
        """``topic_end``: its topic's ``latest_offset + 1`` on that node, for ``lag``."""
        clients = channel.clients
        mark_delete = channel.mark_delete_offset
        return _from_nsqd(
            cls, channel, node=node, hostname=hostname, topic_name=topic,
            memory_depth=channel.depth - channel.backend_depth,
            clients=None if clients is None else tuple(
                ClientStats.from_nsqd(c, node, now) for c in clients),
            e2e_processing_latency=Latency.parse(channel.e2e_processing_latency),
            lag=None if mark_delete is None or topic_end is None
            else max(topic_end - mark_delete, 0))

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "hostname": self.hostname, "topic_name": self.topic_name,
            "channel_name": self.channel_name, "depth": self.depth,
            "memory_depth": self.memory_depth, "backend_depth": self.backend_depth,
            "in_flight_count": self.in_flight_count, "deferred_count": self.deferred_count,
            "requeue_count": self.requeue_count, "timeout_count": self.timeout_count,
            "message_count": self.message_count, "client_count": self.client_count,
            "nodes": None if self.nodes is None else [n.to_json() for n in self.nodes],
            "clients": None if self.clients is None else [c.to_json() for c in self.clients],
            "paused": self.paused,
            "e2e_processing_latency": self.e2e_processing_latency.to_json(),
            **_in_use({"expired_count": self.expired_count,
                       "dead_letter_count": self.dead_letter_count},
                      {"max_attempts": self.max_attempts,
                       "dead_letter_expired": self.dead_letter_expired}),
            **_in_use({"mark_delete_offset": self.mark_delete_offset,
                       "read_offset": self.read_offset, "lag": self.lag}, {}),
        }


def aggregate_channel(topic: str, channel: str, parts: Sequence[ChannelStats]) -> ChannelStats:
    """One channel summed over the nodes that have it (``node`` = ``*``)."""
    latency = Latency()
    for part in parts:
        latency = latency.merged(part.e2e_processing_latency, "*", topic, channel)
    clients = sorted((c for p in parts for c in p.clients or ()),
                     key=lambda c: (c.hostname, c.node, c.remote_address))
    return ChannelStats(
        node="*", hostname="", topic_name=topic, channel_name=channel,
        depth=_sum(parts, "depth"), memory_depth=_sum(parts, "memory_depth"),
        backend_depth=_sum(parts, "backend_depth"),
        in_flight_count=_sum(parts, "in_flight_count"),
        deferred_count=_sum(parts, "deferred_count"), requeue_count=_sum(parts, "requeue_count"),
        timeout_count=_sum(parts, "timeout_count"), message_count=_sum(parts, "message_count"),
        client_count=_sum(parts, "client_count"), nodes=_by_host(parts),
        clients=tuple(clients) or None, paused=any(p.paused for p in parts),
        e2e_processing_latency=latency, expired_count=_sum_in_use(parts, "expired_count"),
        dead_letter_count=_sum_in_use(parts, "dead_letter_count"),
        max_attempts=max((p.max_attempts for p in parts), default=0),
        dead_letter_expired=any(p.dead_letter_expired for p in parts),
        lag=_sum_in_use(parts, "lag"),
    )


@attrs.frozen
class TopicStats:
    """One topic on one nsqd with its channels, or summed over several (``aggregate_topic``)."""

    node: str
    hostname: str
    topic_name: str
    depth: int = 0
    memory_depth: int = 0
    backend_depth: int = 0
    message_count: int = 0
    nodes: tuple[TopicStats, ...] | None = None
    channels: tuple[ChannelStats, ...] | None = None
    paused: bool = False
    e2e_processing_latency: Latency | None = None
    # beyond NSQ: settings (0: none), and the log's offsets (None: not given, or summed)
    message_ttl: int = 0  # seconds
    retention: int = 0  # ns
    retention_bytes: int = 0
    earliest_offset: int | None = None
    latest_offset: int | None = None
    # a replicated topic's (nsqd with --etcd-endpoints): its /stats ``replication`` object
    replication: dict[str, Any] | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any], node: str, hostname: str,
              now: float | None = None) -> TopicStats:
        topic = nsqd.TopicStats.from_json(raw)
        end = None if topic.latest_offset is None else topic.latest_offset + 1
        return _from_nsqd(
            cls, topic, node=node, hostname=hostname,
            memory_depth=topic.depth - topic.backend_depth,
            channels=tuple(ChannelStats.from_nsqd(c, node, hostname, topic.topic_name, now, end)
                           for c in topic.channels),
            e2e_processing_latency=Latency.parse(topic.e2e_processing_latency))

    @property
    def channel_names(self) -> list[str]:
        return [c.channel_name for c in self.channels or ()]

    def channel(self, name: str) -> ChannelStats | None:
        return next((c for c in self.channels or () if c.channel_name == name), None)

    def to_json(self) -> dict[str, Any]:
        latency = self.e2e_processing_latency
        return {
            "node": self.node, "hostname": self.hostname, "topic_name": self.topic_name,
            "depth": self.depth, "memory_depth": self.memory_depth,
            "backend_depth": self.backend_depth, "message_count": self.message_count,
            "nodes": None if self.nodes is None else [n.to_json() for n in self.nodes],
            "channels": None if self.channels is None else [c.to_json() for c in self.channels],
            "paused": self.paused,
            "e2e_processing_latency": None if latency is None else latency.to_json(),
            **_in_use({}, {"message_ttl": self.message_ttl, "retention": self.retention,
                           "retention_bytes": self.retention_bytes}),
            **_in_use({"earliest_offset": self.earliest_offset,
                       "latest_offset": self.latest_offset}, {}),
            **({"replication": self.replication} if self.replication is not None else {}),
        }


def aggregate_topic(topic: str, parts: Sequence[TopicStats]) -> TopicStats:
    """One topic summed over its nodes; with no nodes, the empty value the Go API returns."""
    if not parts:
        return TopicStats(node="", hostname="", topic_name=topic)
    latency = Latency()
    for part in parts:
        if part.e2e_processing_latency is not None:
            latency = latency.merged(part.e2e_processing_latency, "*", topic)
    by_channel: dict[str, list[ChannelStats]] = {}
    for part in parts:
        for channel in part.channels or ():
            by_channel.setdefault(channel.channel_name, []).append(channel)
    channels = tuple(aggregate_channel(topic, name, by_channel[name]) for name in sorted(by_channel))
    return TopicStats(
        node="*", hostname="", topic_name=topic, depth=_sum(parts, "depth"),
        memory_depth=_sum(parts, "memory_depth"), backend_depth=_sum(parts, "backend_depth"),
        message_count=_sum(parts, "message_count"), nodes=_by_host(parts), channels=channels,
        paused=any(p.paused for p in parts), e2e_processing_latency=latency,
        message_ttl=max(p.message_ttl for p in parts),
        retention=max(p.retention for p in parts),
        retention_bytes=max(p.retention_bytes for p in parts),
        replication=_replication(parts),
    )


def _replication(parts: Sequence[TopicStats]) -> dict[str, Any] | None:
    """A replicated topic's ``replication``: the same on every replica but for what the
    leader alone knows (its followers' lag), so the leader's where it answered."""
    found = [p.replication for p in parts if p.replication is not None]
    if not found:
        return None
    return max(found, key=lambda r: (len(r.get("lag") or {}), r.get("epoch", 0)))
