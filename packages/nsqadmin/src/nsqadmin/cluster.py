"""What the cluster looks like, asked over the daemons' HTTP APIs (cf. the Go
internal/clusterinfo/data.go). The changes made to it are ``cluster_actions``.

Two discovery modes, as in the Go nsqadmin:

* lookupd mode (``--lookupd-http-address``): topics are the union of every lookupd's
  ``/topics``, nodes the union of their ``/nodes`` (one per ``broadcast_address:tcp_port``),
  a topic's producers the union of ``/lookup?topic=`` (one per HTTP address);
* nsqd mode (``--nsqd-http-address``): each configured nsqd's ``/info`` and ``/stats``.

Every query goes to all daemons at once (``fanout``). A daemon that fails becomes an
``UpstreamError`` in the ``Partial`` result and the rest still count; when every daemon asked
fails, ``ClusterError`` is raised. Asking nobody (no producers) is an empty answer, not an error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import trio
from nsq_common import ChannelStats, TopicStats, aggregate_channel

from .fanout import check, fan_out, first_error
from .stats import Node, NodeTopic, PeekedMessage, find_node, mark_out_of_date
from .upstream import Partial, Upstream, UpstreamError

log = logging.getLogger("nsqadmin")


@attrs.frozen
class Stats:
    """``/stats`` of several nodes: per-node topics, channels summed across nodes (keyed by
    channel name when one topic was asked for, else by ``topic:channel``), health and
    ``start_time`` (unix seconds) by node."""

    topics: tuple[TopicStats, ...] = ()
    channels: dict[str, ChannelStats] = attrs.field(factory=dict)
    health: dict[str, str] = attrs.field(factory=dict)
    started: dict[str, float] = attrs.field(factory=dict)


@attrs.frozen
class LookupdRegistrations:
    """What one lookupd has registered: topic -> (channels, number of live producers)."""

    address: str
    topics: dict[str, tuple[tuple[str, ...], int]] = attrs.field(factory=dict)
    error: UpstreamError | None = None


def _node_from_lookupd(raw: dict[str, Any]) -> Node:
    topics = raw.get("topics") or []
    tombstones = raw.get("tombstones") or []
    return Node(
        hostname=str(raw.get("hostname", "")),
        broadcast_address=str(raw.get("broadcast_address", "")),
        tcp_port=int(raw.get("tcp_port", 0)), http_port=int(raw.get("http_port", 0)),
        version=str(raw.get("version", "")), remote_address=str(raw.get("remote_address", "")),
        topics=tuple(sorted((NodeTopic(str(t), bool(tombstones[i]) if i < len(tombstones)
                                       else False) for i, t in enumerate(topics)),
                            key=lambda t: t.topic)),
    )


def _node_from_info(address: str, info: dict[str, Any], topics: Sequence[str] = (),
                    health: str = "") -> Node:
    # Very old nsqd lack broadcast_address/http_port in /info: fall back to the address used.
    host, _, port = address.split("://", 1)[-1].rstrip("/").rpartition(":")
    return Node(
        hostname=str(info.get("hostname") or host.strip("[]")),
        broadcast_address=str(info.get("broadcast_address") or host.strip("[]")),
        tcp_port=int(info.get("tcp_port", 0)), http_port=int(info.get("http_port") or port),
        version=str(info.get("version", "")), topics=tuple(NodeTopic(t) for t in topics),
        reach=address, health=health,
    )


@attrs.define(eq=False)
class ClusterInfo:
    upstream: Upstream
    lookupd_addresses: list[str] = attrs.field(factory=list)
    nsqd_addresses: list[str] = attrs.field(factory=list)

    @property
    def lookupd_mode(self) -> bool:
        return bool(self.lookupd_addresses)

    # --- lookupd queries ---------------------------------------------------------------

    async def lookupd_topics(self) -> Partial[list[str]]:
        async def ask(address: str) -> list[str]:
            body = await self.upstream.get_json(address, "/topics")
            return [str(t) for t in body.get("topics") or ()]

        answers, errors = await fan_out(self.lookupd_addresses, ask)
        check("nsqlookupd", len(self.lookupd_addresses), errors)
        return Partial(sorted({t for _, topics in answers for t in topics}), tuple(errors))

    async def lookupd_topic_channels(self, topic: str) -> Partial[list[str]]:
        async def ask(address: str) -> list[str]:
            body = await self.upstream.get_json(address, "/channels", {"topic": topic})
            return [str(c) for c in body.get("channels") or ()]

        answers, errors = await fan_out(self.lookupd_addresses, ask)
        check("nsqlookupd", len(self.lookupd_addresses), errors)
        return Partial(sorted({c for _, channels in answers for c in channels}), tuple(errors))

    async def lookupd_nodes(self) -> Partial[list[Node]]:
        async def ask(address: str) -> list[dict[str, Any]]:
            body = await self.upstream.get_json(address, "/nodes")
            return list(body.get("producers") or ())

        answers, errors = await fan_out(self.lookupd_addresses, ask)
        check("nsqlookupd", len(self.lookupd_addresses), errors)
        nodes: dict[str, Node] = {}
        for lookupd, producers in answers:
            for raw in producers:
                node = _node_from_lookupd(raw)
                known = nodes.setdefault(node.tcp_address, node)
                seen = f"{lookupd}/{node.remote_address or 'N/A'}"
                nodes[node.tcp_address] = attrs.evolve(
                    known, remote_addresses=(*(known.remote_addresses or ()), seen))
        ordered = sorted(mark_out_of_date(list(nodes.values())),
                         key=lambda n: (n.hostname, n.http_address))
        return Partial(ordered, tuple(errors))

    async def lookupd_topic_producers(self, topic: str) -> Partial[list[Node]]:
        async def ask(address: str) -> list[dict[str, Any]]:
            body = await self.upstream.get_json(address, "/lookup", {"topic": topic})
            return list(body.get("producers") or ())

        answers, errors = await fan_out(self.lookupd_addresses, ask)
        # lookupd answers 404 TOPIC_NOT_FOUND for a topic it never heard of: not a failure.
        errors = [e for e in errors if "TOPIC_NOT_FOUND" not in e.message]
        check("nsqlookupd", len(self.lookupd_addresses), errors)
        producers: dict[str, Node] = {}
        for _, raws in answers:
            for raw in raws:
                node = _node_from_lookupd(raw)
                producers.setdefault(node.http_address, node)
        return Partial(list(producers.values()), tuple(errors))

    async def lookupd_registrations(self) -> list[LookupdRegistrations]:
        """Each lookupd's own topics and channels, and how many producers each topic has."""

        async def one(address: str) -> LookupdRegistrations:
            try:
                body = await self.upstream.get_json(address, "/topics")
            except UpstreamError as exc:
                return LookupdRegistrations(address, error=exc)

            async def lookup(topic: str) -> tuple[tuple[str, ...], int]:
                found = await self.upstream.get_json(address, "/lookup", {"topic": topic})
                return (tuple(sorted(str(c) for c in found.get("channels") or ())),
                        len(found.get("producers") or ()))

            answers, errors = await fan_out(sorted(str(t) for t in body.get("topics") or ()),
                                            lookup)
            return LookupdRegistrations(address, dict(answers),
                                        errors[0] if errors else None)

        results, _ = await fan_out(self.lookupd_addresses, one)
        return [r for _, r in results]

    # --- nsqd queries ------------------------------------------------------------------

    async def nsqd_topics(self) -> Partial[list[str]]:
        async def ask(address: str) -> list[str]:
            body = await self.upstream.get_json(address, "/stats",
                                                {"format": "json", "include_clients": "false"})
            return [str(t.get("topic_name")) for t in body.get("topics") or ()]

        answers, errors = await fan_out(self.nsqd_addresses, ask)
        check("nsqd", len(self.nsqd_addresses), errors)
        return Partial(sorted({t for _, topics in answers for t in topics}), tuple(errors))

    async def nsqd_nodes(self, addresses: Sequence[str] | None = None) -> Partial[list[Node]]:
        addresses = list(self.nsqd_addresses if addresses is None else addresses)

        async def ask(address: str) -> Node:
            info: dict[str, Any] = {}
            stats: dict[str, Any] = {}

            async def get_info() -> None:
                info.update(await self.upstream.get_json(address, "/info"))

            async def get_stats() -> None:
                stats.update(await self.upstream.get_json(
                    address, "/stats", {"format": "json", "include_clients": "false"}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(get_info)
                nursery.start_soon(get_stats)
            topics = [str(t.get("topic_name")) for t in stats.get("topics") or ()]
            return _node_from_info(address, info, topics, str(stats.get("health", "")))

        answers, errors = await fan_out(addresses, first_error(ask))
        check("nsqd", len(addresses), errors)
        return Partial(mark_out_of_date([n for _, n in answers]), tuple(errors))

    async def nsqd_topic_producers(self, topic: str) -> Partial[list[Node]]:
        async def ask(address: str) -> Node | None:
            body = await self.upstream.get_json(
                address, "/stats", {"format": "json", "topic": topic, "include_clients": "false"})
            names = [str(t.get("topic_name")) for t in body.get("topics") or ()]
            if topic not in names:
                return None
            info = await self.upstream.get_json(address, "/info")
            return _node_from_info(address, info, names, str(body.get("health", "")))

        answers, errors = await fan_out(self.nsqd_addresses, ask)
        check("nsqd", len(self.nsqd_addresses), errors)
        return Partial([n for _, n in answers if n is not None], tuple(errors))

    # --- either mode ---------------------------------------------------------------------

    async def topics(self) -> Partial[list[str]]:
        return await (self.lookupd_topics() if self.lookupd_mode else self.nsqd_topics())

    async def nodes(self) -> Partial[list[Node]]:
        return await (self.lookupd_nodes() if self.lookupd_mode else self.nsqd_nodes())

    async def topic_producers(self, topic: str) -> Partial[list[Node]]:
        if self.lookupd_mode:
            return await self.lookupd_topic_producers(topic)
        return await self.nsqd_topic_producers(topic)

    def find_node(self, nodes: Iterable[Node], name: str) -> Node | None:
        """The node called ``name`` (``stats.find_node``: its ``broadcast_address:http_port``,
        the configured address it is reached at, or its name on the pages)."""
        return find_node(nodes, name)

    async def stats(self, nodes: Sequence[Node], topic: str = "", channel: str = "",
                    include_clients: bool = True, now: float | None = None,
                    include_offsets: bool = False) -> Partial[Stats]:
        """``/stats`` of ``nodes``, optionally for one topic (and channel); with
        ``include_offsets``, each log's offsets and channel's cursor (beyond NSQ: Go's nsqd
        ignores the parameter and gives none)."""
        params = {"format": "json"}
        if topic:
            params["topic"] = topic
            if channel:
                params["channel"] = channel
        if not include_clients:
            params["include_clients"] = "false"
        if include_offsets:
            params["include_offsets"] = "true"

        async def ask(node: Node) -> dict[str, Any]:
            return dict(await self.upstream.get_json(node.address, "/stats", params))

        answers, errors = await fan_out(nodes, ask)
        check("nsqd", len(nodes), errors)
        topics: list[TopicStats] = []
        parts: dict[str, list[ChannelStats]] = {}
        health: dict[str, str] = {}
        started: dict[str, float] = {}
        for node, body in answers:
            health[node.http_address] = str(body.get("health", ""))
            start = body.get("start_time")
            if isinstance(start, int | float) and not isinstance(start, bool):
                started[node.http_address] = float(start)
            for raw in body.get("topics") or ():
                stats = TopicStats.parse(raw, node.http_address, node.hostname, now)
                if topic and stats.topic_name != topic:
                    continue
                topics.append(stats)
                for part in stats.channels or ():
                    key = part.channel_name if topic else f"{stats.topic_name}:{part.channel_name}"
                    parts.setdefault(key, []).append(part)
        topics.sort(key=lambda t: (t.hostname, t.node))
        channels = {key: aggregate_channel(ps[0].topic_name, ps[0].channel_name, ps)
                    for key, ps in parts.items()}
        return Partial(Stats(tuple(topics), channels, health, started), tuple(errors))

    async def channel_messages(self, topic: str, channel: str, which: str, n: int
                               ) -> Partial[list[PeekedMessage]]:
        """Up to ``n`` messages from each of the topic's producers, node by node, without
        taking them: the next ones the channel would deliver (``which="peek"``) or its first
        dead letters (``"deadletter"``). A producer without the channel, or without these
        routes (any other nsqd), has none."""
        if which not in ("peek", "deadletter"):
            raise ValueError(which)
        producers = await self.topic_producers(topic)
        params = {"topic": topic, "channel": channel, "n": str(n)}

        async def ask(node: Node) -> list[PeekedMessage]:
            try:
                body = await self.upstream.get_json(node.address, f"/channel/{which}", params)
            except UpstreamError as exc:
                if exc.status == 404:
                    return []
                raise
            return [PeekedMessage.parse(raw, node.http_address, node.hostname)
                    for raw in body.get("messages") or () if isinstance(raw, dict)]

        answers, errors = await fan_out(producers.value, ask)
        found = [m for _, messages in answers for m in messages]
        return Partial(found, (*producers.errors, *errors))
