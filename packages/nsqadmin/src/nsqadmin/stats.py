"""Topic, channel, client and node statistics as nsqadmin shows and serves them
(cf. the Go internal/clusterinfo/types.go, NSQ 1.3.0 shapes).

Each nsqd's ``/stats`` becomes per-node values (``node`` = that nsqd's HTTP address); the
``aggregate_*`` functions sum them across nodes into one value whose ``node`` is ``*`` and
whose ``nodes`` lists the per-node parts. ``to_json`` writes the JSON API's field order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

_NS = 1_000_000_000


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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
        now = int(time.time() if now is None else now)
        connect_ts = int(raw.get("connect_ts", 0))
        return cls(
            node=node, remote_address=str(raw.get("remote_address", "")),
            version=str(raw.get("version", "")), client_id=str(raw.get("client_id", "")),
            hostname=str(raw.get("hostname", "")), user_agent=str(raw.get("user_agent", "")),
            connect_ts=connect_ts, connected=(now - connect_ts) * _NS,
            in_flight_count=int(raw.get("in_flight_count", 0)),
            ready_count=int(raw.get("ready_count", 0)),
            finish_count=int(raw.get("finish_count", 0)),
            requeue_count=int(raw.get("requeue_count", 0)),
            message_count=int(raw.get("message_count", 0)),
            sample_rate=int(raw.get("sample_rate", 0)), deflate=bool(raw.get("deflate")),
            snappy=bool(raw.get("snappy")), authed=bool(raw.get("authed")),
            auth_identity=str(raw.get("auth_identity", "")),
            auth_identity_url=str(raw.get("auth_identity_url", "")), tls=bool(raw.get("tls")),
            tls_cipher_suite=str(raw.get("tls_cipher_suite", "")),
            tls_version=str(raw.get("tls_version", "")),
            tls_negotiated_protocol=str(raw.get("tls_negotiated_protocol", "")),
            tls_negotiated_protocol_is_mutual=bool(raw.get("tls_negotiated_protocol_is_mutual")),
        )

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _sum(items: Iterable[Any], name: str) -> int:
    return sum(getattr(i, name) for i in items)


def _by_host(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(sorted(items, key=lambda i: (i.hostname, i.node)))


@attrs.frozen
class ChannelStats:
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
    # beyond NSQ (an nsqd with the job features; 0 from any other)
    expired_count: int = 0
    dead_letter_count: int = 0

    @classmethod
    def parse(cls, raw: dict[str, Any], node: str, hostname: str, topic: str,
              now: float | None = None) -> ChannelStats:
        depth, backend = int(raw.get("depth", 0)), int(raw.get("backend_depth", 0))
        clients = raw.get("clients")
        return cls(
            node=node, hostname=hostname, topic_name=topic,
            channel_name=str(raw.get("channel_name", "")), depth=depth,
            memory_depth=depth - backend, backend_depth=backend,
            in_flight_count=int(raw.get("in_flight_count", 0)),
            deferred_count=int(raw.get("deferred_count", 0)),
            requeue_count=int(raw.get("requeue_count", 0)),
            timeout_count=int(raw.get("timeout_count", 0)),
            message_count=int(raw.get("message_count", 0)),
            client_count=int(raw.get("client_count", 0)),
            clients=None if clients is None else tuple(
                ClientStats.parse(c, node, now) for c in clients),
            paused=bool(raw.get("paused")),
            e2e_processing_latency=Latency.parse(raw.get("e2e_processing_latency")),
            expired_count=int(raw.get("expired_count", 0)),
            dead_letter_count=int(raw.get("dead_letter_count", 0)),
        )

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
            "expired_count": self.expired_count, "dead_letter_count": self.dead_letter_count,
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
        e2e_processing_latency=latency, expired_count=_sum(parts, "expired_count"),
        dead_letter_count=_sum(parts, "dead_letter_count"),
    )


@attrs.frozen
class TopicStats:
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
    message_ttl: int = 0  # seconds; beyond NSQ (0 from any other nsqd)

    @classmethod
    def parse(cls, raw: dict[str, Any], node: str, hostname: str,
              now: float | None = None) -> TopicStats:
        name = str(raw.get("topic_name", ""))
        depth, backend = int(raw.get("depth", 0)), int(raw.get("backend_depth", 0))
        channels = tuple(ChannelStats.parse(c, node, hostname, name, now)
                         for c in raw.get("channels") or ())
        return cls(
            node=node, hostname=hostname, topic_name=name, depth=depth,
            memory_depth=depth - backend, backend_depth=backend,
            message_count=int(raw.get("message_count", 0)), channels=channels,
            paused=bool(raw.get("paused")),
            e2e_processing_latency=Latency.parse(raw.get("e2e_processing_latency")),
            message_ttl=int(raw.get("message_ttl", 0)),
        )

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
            "message_ttl": self.message_ttl,
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
    )


@attrs.frozen
class NodeTopic:
    topic: str
    tombstoned: bool = False


@attrs.frozen
class Node:
    """One nsqd as lookupd or its own ``/info`` describes it (the Go "Producer").

    ``address`` is where nsqadmin reaches its HTTP API: the configured address in nsqd mode,
    ``broadcast_address:http_port`` otherwise. ``http_address`` is its name in URLs and JSON.
    """

    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    remote_address: str = ""
    remote_addresses: tuple[str, ...] | None = None
    topics: tuple[NodeTopic, ...] = ()
    out_of_date: bool = False
    reach: str = ""
    health: str = ""

    @property
    def http_address(self) -> str:
        return join_host_port(self.broadcast_address, self.http_port)

    @property
    def tcp_address(self) -> str:
        return join_host_port(self.broadcast_address, self.tcp_port)

    @property
    def address(self) -> str:
        return self.reach or self.http_address

    def to_json(self) -> dict[str, Any]:
        return {
            "remote_addresses": None if self.remote_addresses is None
            else list(self.remote_addresses),
            "remote_address": self.remote_address, "hostname": self.hostname,
            "broadcast_address": self.broadcast_address, "tcp_port": self.tcp_port,
            "http_port": self.http_port, "version": self.version,
            "topics": [attrs.asdict(t) for t in self.topics] or None,
            "out_of_date": self.out_of_date,
        }


def version_key(version: str) -> tuple[int, int, int]:
    """A semver's (major, minor, patch); unparsable versions count as 0.0.0, as in Go."""
    core = version.split("-", 1)[0].split("+", 1)[0].split(".")
    if len(core) != 3 or not all(p.isdigit() for p in core):
        return (0, 0, 0)
    return (int(core[0]), int(core[1]), int(core[2]))


def mark_out_of_date(nodes: Sequence[Node]) -> list[Node]:
    """Flag the nodes whose version is below the newest one seen."""
    if not nodes:
        return []
    newest = max(version_key(n.version) for n in nodes)
    return [attrs.evolve(n, out_of_date=version_key(n.version) < newest) for n in nodes]


@attrs.frozen
class QueuedMessage:
    """One message as an nsqd with the job features shows it without taking it
    (``/channel/peek``, ``/channel/deadletter``): beyond NSQ."""

    node: str
    hostname: str
    id: str
    attempts: int
    timestamp: int  # ns since the epoch, at publish
    size: int  # bytes of the body
    text: str | None  # the body, when it is UTF-8

    @classmethod
    def parse(cls, raw: dict[str, Any], node: str, hostname: str) -> QueuedMessage:
        body = str(raw.get("body") or "")
        text = raw.get("text")
        return cls(node=node, hostname=hostname, id=str(raw.get("id", "")),
                   attempts=int(raw.get("attempts", 0)), timestamp=int(raw.get("timestamp", 0)),
                   size=len(body) * 3 // 4 - body[-2:].count("="),
                   text=text if isinstance(text, str) else None)
