"""The nodes of a cluster and queued messages as nsqadmin shows and serves them (cf. the Go
internal/clusterinfo/types.go, NSQ 1.3.0 shapes). Topic, channel and client statistics, which
nsq_stat reads too, are nsq_common's (``TopicStats``, ``ChannelStats``, ``aggregate_topic``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
from nsq_common import ChannelStats, TopicStats, join_host_port


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


def display_names(nodes: Iterable[Node]) -> dict[str, str]:
    """Each node's name on the pages, by HTTP address: its hostname, or ``hostname:http_port``
    where two nodes share a hostname (two nsqd on one machine)."""
    nodes = list(nodes)
    seen = Counter(n.hostname for n in nodes)
    return {n.http_address: n.hostname if seen[n.hostname] == 1 and n.hostname
            else join_host_port(n.hostname or n.broadcast_address, n.http_port) for n in nodes}


def find_node(nodes: Iterable[Node], name: str) -> Node | None:
    """The node ``name`` names, as pages, URLs and the API name nodes: its
    ``broadcast_address:http_port`` (its name in URLs and JSON) or the address nsqadmin
    reaches it at; else what the pages show, ``hostname:http_port``, or its hostname alone,
    when that names one node only."""
    nodes = list(nodes)
    exact = next((n for n in nodes if name in (n.http_address, n.reach)), None)
    if exact is not None or not name:
        return exact
    for shown in (lambda n: join_host_port(n.hostname, n.http_port), lambda n: n.hostname):
        found = [n for n in nodes if n.hostname and shown(n) == name]
        if len(found) == 1:
            return found[0]
    return None


def version_key(version: str) -> tuple[int, int, int]:
    """A semver's (major, minor, patch); unparsable versions count as 0.0.0, as in Go."""
    core = version.split("-", 1)[0].split("+", 1)[0].split(".")
    if len(core) != 3 or not all(p.isascii() and p.isdigit() for p in core):
        return (0, 0, 0)
    return (int(core[0]), int(core[1]), int(core[2]))


def mark_out_of_date(nodes: Sequence[Node]) -> list[Node]:
    """Flag the nodes whose version is below the newest one seen."""
    if not nodes:
        return []
    newest = max(version_key(n.version) for n in nodes)
    return [attrs.evolve(n, out_of_date=version_key(n.version) < newest) for n in nodes]


@attrs.frozen
class PeekedMessage:
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
    def parse(cls, raw: dict[str, Any], node: str, hostname: str) -> PeekedMessage:
        body = str(raw.get("body") or "")
        text = raw.get("text")
        return cls(node=node, hostname=hostname, id=str(raw.get("id", "")),
                   attempts=int(raw.get("attempts", 0)), timestamp=int(raw.get("timestamp", 0)),
                   size=len(body) * 3 // 4 - body[-2:].count("="),
                   text=text if isinstance(text, str) else None)


JOB_COUNTS = ("dead_letter_count", "expired_count")


def job_columns(channels: Iterable[ChannelStats]) -> list[str]:
    """The job features' counts (beyond NSQ) that a table of ``channels`` shows: those in use
    on any of them (a table of channels that use none has exactly NSQ's columns)."""
    channels = list(channels)
    return [name for name in JOB_COUNTS
            if any(getattr(c, name) is not None for c in channels)]


@attrs.frozen
class ChannelPosition:
    """Where a channel is in its topic's log on one nsqd (beyond NSQ: ``include_offsets``):
    the log's range, the channel's cursor, and how far behind the newest message it is."""

    node: str
    hostname: str
    earliest_offset: int
    latest_offset: int
    mark_delete_offset: int
    read_offset: int
    lag: int
    retention: int  # ns, 0: none
    retention_bytes: int


def channel_positions(per_node: Iterable[TopicStats], channel: str) -> list[ChannelPosition]:
    """The channel's position on each nsqd that gave its offsets (ours; Go's gives none)."""
    found = []
    for topic in per_node:
        part = topic.channel(channel)
        if (part is None or topic.earliest_offset is None or topic.latest_offset is None
                or part.mark_delete_offset is None or part.read_offset is None):
            continue
        found.append(ChannelPosition(
            topic.node, topic.hostname, topic.earliest_offset, topic.latest_offset,
            part.mark_delete_offset, part.read_offset, part.lag or 0, topic.retention,
            topic.retention_bytes))
    return sorted(found, key=lambda p: (p.hostname, p.node))
