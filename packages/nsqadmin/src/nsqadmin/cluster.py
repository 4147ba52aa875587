"""What the cluster looks like, asked over the daemons' HTTP APIs (cf. the Go
internal/clusterinfo/data.go), and the admin actions fanned out to every daemon concerned.

Two discovery modes, as in the Go nsqadmin:

* lookupd mode (``--lookupd-http-address``): topics are the union of every lookupd's
  ``/topics``, nodes the union of their ``/nodes`` (one per ``broadcast_address:tcp_port``),
  a topic's producers the union of ``/lookup?topic=`` (one per HTTP address);
* nsqd mode (``--nsqd-http-address``): each configured nsqd's ``/info`` and ``/stats``.

Every query goes to all daemons at once (one Trio task each). A daemon that fails becomes an
``UpstreamError`` in the ``Partial`` result and the rest still count; when every daemon asked
fails, ``ClusterError`` is raised. Asking nobody (no producers) is an empty answer, not an error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs
import trio
from nsq_common import ChannelStats, TopicStats, aggregate_channel

from .rewind import RewindTarget
from .settings import Settings
from .stats import Node, NodeTopic, PeekedMessage, find_node, mark_out_of_date
from .upstream import ClusterError, Partial, Upstream, UpstreamError

log = logging.getLogger("nsqadmin")
RESPAWN_BATCH = 100  # dead letters respawned on each nsqd per action
NO_SETTINGS = Settings()
A = TypeVar("A")
R = TypeVar("R")


async def fan_out(items: Iterable[A], call: Callable[[A], Awaitable[R]]
                  ) -> tuple[list[tuple[A, R]], list[UpstreamError]]:
    """Run ``call`` on every item concurrently; results keep the items' order."""
    items = list(items)
    slots: list[tuple[A, R] | None] = [None] * len(items)
    errors: list[UpstreamError] = []

    async def one(index: int, item: A) -> None:
        try:
            slots[index] = (item, await call(item))
        except UpstreamError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for index, item in enumerate(items):
            nursery.start_soon(one, index, item)
    return [s for s in slots if s is not None], errors


def _check(kind: str, asked: int, errors: list[UpstreamError]) -> None:
    if asked and len(errors) == asked:
        raise ClusterError(kind, errors)


class NodeNotFound(UpstreamError):
    """An action named a node that is not there (or does not have the topic)."""


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
class ActionResult:
    """An admin action: the daemons that did it, and the ones that failed and why."""

    action: str
    done: tuple[str, ...] = ()
    errors: tuple[UpstreamError, ...] = ()
    outcome: str = ""  # what it came to, when the daemon says: "2 jobs respawned."
    offsets: tuple[tuple[str, int], ...] = ()  # a rewind: (nsqd, the channel's offset now)

    @property
    def ok(self) -> bool:
        return not self.errors


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
        _check("nsqlookupd", len(self.lookupd_addresses), errors)
        return Partial(sorted({t for _, topics in answers for t in topics}), tuple(errors))

    async def lookupd_topic_channels(self, topic: str) -> Partial[list[str]]:
        async def ask(address: str) -> list[str]:
            body = await self.upstream.get_json(address, "/channels", {"topic": topic})
            return [str(c) for c in body.get("channels") or ()]

        answers, errors = await fan_out(self.lookupd_addresses, ask)
        _check("nsqlookupd", len(self.lookupd_addresses), errors)
        return Partial(sorted({c for _, channels in answers for c in channels}), tuple(errors))

    async def lookupd_nodes(self) -> Partial[list[Node]]:
        async def ask(address: str) -> list[dict[str, Any]]:
            body = await self.upstream.get_json(address, "/nodes")
            return list(body.get("producers") or ())

        answers, errors = await fan_out(self.lookupd_addresses, ask)
        _check("nsqlookupd", len(self.lookupd_addresses), errors)
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
        _check("nsqlookupd", len(self.lookupd_addresses), errors)
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
        _check("nsqd", len(self.nsqd_addresses), errors)
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

        answers, errors = await fan_out(addresses, _first_error(ask))
        _check("nsqd", len(addresses), errors)
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
        _check("nsqd", len(self.nsqd_addresses), errors)
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
        _check("nsqd", len(nodes), errors)
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

    # --- actions -----------------------------------------------------------------------

    async def _post_all(self, addresses: Sequence[str], path: str, params: dict[str, str]
                        ) -> tuple[list[str], list[UpstreamError]]:
        """POST to every address; an nsqd that answers 404 for the channel (or topic) an
        action names simply does not host it, which is neither done nor failed."""
        absent = "CHANNEL_NOT_FOUND" if path.startswith("/channel/") else "TOPIC_NOT_FOUND"
        skipped: list[str] = []

        async def post(address: str) -> None:
            try:
                await self.upstream.post(address, path, params)
            except UpstreamError as exc:
                if exc.status == 404 and exc.reply == absent and path != "/channel/create":
                    skipped.append(address)
                    return
                raise

        done, errors = await fan_out(addresses, post)
        return [a for a, _ in done if a not in skipped], errors

    async def _producers_then(self, action: str, topic: str, steps: Sequence[tuple[str, bool]],
                              params: dict[str, str]) -> ActionResult:
        """Find the topic's producers, then POST each ``(path, to_lookupds)`` step."""
        producers = await self.topic_producers(topic)
        done: list[str] = []
        errors = list(producers.errors)
        for path, to_lookupds in steps:
            targets = (self.lookupd_addresses if to_lookupds
                       else [p.address for p in producers.value])
            ok, failed = await self._post_all(targets, path, params)
            done += ok
            errors += failed
        return ActionResult(action, tuple(done), tuple(errors))

    async def create_topic_channel(self, topic: str, channel: str = "",
                                   settings: Settings = NO_SETTINGS) -> ActionResult:
        """lookupd mode: register on every lookupd, and create the channel on the topic's
        producers. nsqd mode: create on every configured nsqd. ``settings`` (beyond NSQ) go
        to the nsqd that create the topic (or channel); lookupd mode can only give them to
        the nsqd that already have the topic."""
        action = "create_channel" if channel else "create_topic"
        params = {"topic": topic, **({"channel": channel} if channel else {})}
        topic_params = {"topic": topic, **settings.topic_params}
        channel_params = {**params, **settings.create_channel_params}
        if not self.lookupd_mode:
            done, errors = await self._post_all(self.nsqd_addresses, "/topic/create",
                                                topic_params)
            if channel and done:
                done, more = await self._post_all(done, "/channel/create", channel_params)
                errors += more
            if settings.paused and done:
                done, more = await self._post_all(done, f"/{_kind(channel)}/pause", params)
                errors += more
            return ActionResult(action, tuple(done), tuple(errors))
        done, errors = await self._post_all(self.lookupd_addresses, "/topic/create",
                                            {"topic": topic})
        if channel:
            ok, failed = await self._post_all(self.lookupd_addresses, "/channel/create", params)
            done, errors = done + ok, errors + failed
        if channel or settings.topic_params or settings.paused:
            producers = await self.lookupd_topic_producers(topic)
            nsqds = [p.address for p in producers.value]
            errors += list(producers.errors)
            steps = [("/topic/create", topic_params)] if settings.topic_params else []
            steps += [("/channel/create", channel_params)] if channel else []
            steps += [(f"/{_kind(channel)}/pause", params)] if settings.paused else []
            for path, step_params in steps:
                ok, failed = await self._post_all(nsqds, path, step_params)
                done, errors = done + ok, errors + failed
        return ActionResult(action, tuple(done), tuple(errors))

    async def update_settings(self, topic: str, channel: str, settings: Settings
                              ) -> ActionResult:
        """Change a topic's (``/topic/create`` with ``message_ttl``) or a channel's
        (``/channel/update``) settings on every producer of the topic."""
        if channel:
            return await self._producers_then(
                "update_channel", topic, [("/channel/update", False)],
                {"topic": topic, "channel": channel, **settings.channel_params})
        return await self._producers_then("update_topic", topic, [("/topic/create", False)],
                                          {"topic": topic, **settings.topic_params})

    async def delete_topic(self, topic: str) -> ActionResult:
        steps = [("/topic/delete", True), ("/topic/delete", False)]
        return await self._producers_then("delete_topic", topic, steps, {"topic": topic})

    async def delete_channel(self, topic: str, channel: str) -> ActionResult:
        steps = [("/channel/delete", True), ("/channel/delete", False)]
        return await self._producers_then("delete_channel", topic, steps,
                                          {"topic": topic, "channel": channel})

    async def topic_action(self, verb: str, topic: str, channel: str = "") -> ActionResult:
        """``pause``, ``unpause`` or ``empty`` a topic (or one of its channels) everywhere."""
        if verb not in ("pause", "unpause", "empty"):
            raise ValueError(verb)
        kind = "channel" if channel else "topic"
        params = {"topic": topic, **({"channel": channel} if channel else {})}
        return await self._producers_then(f"{verb}_{kind}", topic, [(f"/{kind}/{verb}", False)],
                                          params)

    async def dead_letter_action(self, verb: str, topic: str, channel: str) -> ActionResult:
        """``respawn`` (up to ``RESPAWN_BATCH`` on each) or ``empty`` (all) the channel's dead
        letters on every producer."""
        if verb not in ("respawn", "empty"):
            raise ValueError(verb)
        params = {"topic": topic, "channel": channel}
        if verb == "respawn":
            params["n"] = str(RESPAWN_BATCH)
        return await self._producers_then(f"{verb}_dead_letters", topic,
                                          [(f"/channel/deadletter/{verb}", False)], params)

    async def rewind_channel(self, topic: str, channel: str, target: RewindTarget,
                             node: str = "") -> ActionResult:
        """Rewind the channel on every producer of the topic that has it (or on ``node``
        alone): nsqd's ``/channel/rewind``, whose answer says where the channel is now."""
        producers = await self.topic_producers(topic)
        errors = list(producers.errors)
        named = find_node(producers.value, node) if node else None
        nodes = [named] if named is not None else [] if node else list(producers.value)
        if node and not nodes:
            errors.append(NodeNotFound(node, f"no nsqd {node} has topic {topic}"))
        params = {"topic": topic, "channel": channel, **target.params}

        async def rewind(producer: Node) -> int | None:
            if target.offset:
                await self._check_offset(producer, topic, channel, target.offset)
            try:
                body = await self.upstream.post_json(producer.address, "/channel/rewind",
                                                     params)
            except UpstreamError as exc:
                if exc.status == 404 and exc.reply in ("CHANNEL_NOT_FOUND", "TOPIC_NOT_FOUND"):
                    return None  # the channel is not there: neither done nor failed
                if exc.status == 404 and exc.reply == "NOT_FOUND":  # no such route: Go's nsqd
                    raise UpstreamError(exc.address, f"{exc} (this nsqd cannot rewind a "
                                        "channel)", exc.status, exc.reply) from None
                raise
            offset = body.get("offset")
            if not isinstance(offset, int):
                raise UpstreamError(producer.address, "POST /channel/rewind: no offset in "
                                    f"the answer {str(body)[:200]}")
            return offset

        answers, failed = await fan_out(nodes, rewind)
        offsets = tuple((p.http_address, o) for p, o in answers if o is not None)
        outcome = ("Its position now: " + ", ".join(f"offset {o:,} on {a}" for a, o in offsets)
                   + ".") if offsets else ""
        return ActionResult("rewind_channel", tuple(a for a, _ in offsets),
                            (*errors, *failed), outcome, offsets)

    async def _check_offset(self, producer: Node, topic: str, channel: str, offset: int
                            ) -> None:
        """Refuse an offset past the end of ``producer``'s log: nsqd would move the cursor
        there, and the messages published up to it would never be delivered."""
        body = await self.upstream.get_json(producer.address, "/stats", {
            "format": "json", "topic": topic, "channel": channel, "include_clients": "false",
            "include_mem": "false", "include_offsets": "true"})
        for raw in body.get("topics") or ():
            latest = raw.get("latest_offset") if isinstance(raw, dict) else None
            if isinstance(latest, int) and offset > latest + 1:
                raise UpstreamError(producer.address, f"offset {offset:,} is past the end of "
                                    f"its log: the next message published gets {latest + 1:,}")

    async def tombstone_topic_producer(self, topic: str, node: str) -> ActionResult:
        """Tombstone ``node`` for ``topic`` on every lookupd, then delete the topic there
        (``node`` by any of its names, ``find_node``; one nsqadmin does not know is used as
        given)."""
        try:
            named = find_node((await self.nodes()).value, node)
        except ClusterError:
            named = None
        name, address = (named.http_address, named.address) if named else (node, node)
        done, errors = await self._post_all(self.lookupd_addresses, "/topic/tombstone",
                                            {"topic": topic, "node": name})
        ok, failed = await self._post_all([address], "/topic/delete", {"topic": topic})
        return ActionResult("tombstone_topic_producer", tuple(done + ok), tuple(errors + failed))


def _kind(channel: str) -> str:
    return "channel" if channel else "topic"


def _first_error(call: Callable[[A], Awaitable[R]]) -> Callable[[A], Awaitable[R]]:
    """Unwrap a nursery's ExceptionGroup so one daemon's UpstreamError reads as one error."""

    async def wrapped(item: A) -> R:
        try:
            return await call(item)
        except BaseExceptionGroup as group:
            first = _leaf(group)
            if isinstance(first, UpstreamError):
                raise first from None
            raise

    return wrapped


def _leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc

