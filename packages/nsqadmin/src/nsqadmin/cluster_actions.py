"""The admin actions, fanned out to every daemon concerned (cf. the Go nsqadmin's
http.go handlers over internal/clusterinfo): create, delete, pause, empty, settings, dead
letters, rewind, tombstone. Which daemons are concerned is asked of ``ClusterInfo``.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .cluster import ClusterInfo
from .fanout import fan_out
from .rewind import RewindTarget
from .settings import Settings
from .stats import Node, find_node
from .upstream import ClusterError, Upstream, UpstreamError

RESPAWN_BATCH = 100  # dead letters respawned on each nsqd per action
NO_SETTINGS = Settings()


class NodeNotFound(UpstreamError):
    """An action named a node that is not there (or does not have the topic)."""


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


@attrs.define(eq=False)
class ClusterActions:
    """Changes to the cluster ``ClusterInfo`` shows; each returns an ``ActionResult``."""

    cluster: ClusterInfo

    @property
    def upstream(self) -> Upstream:
        return self.cluster.upstream

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
        producers = await self.cluster.topic_producers(topic)
        done: list[str] = []
        errors = list(producers.errors)
        for path, to_lookupds in steps:
            targets = (self.cluster.lookupd_addresses if to_lookupds
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
        if not self.cluster.lookupd_mode:
            done, errors = await self._post_all(self.cluster.nsqd_addresses, "/topic/create",
                                                topic_params)
            if channel and done:
                done, more = await self._post_all(done, "/channel/create", channel_params)
                errors += more
            if settings.paused and done:
                done, more = await self._post_all(done, f"/{_kind(channel)}/pause", params)
                errors += more
            return ActionResult(action, tuple(done), tuple(errors))
        done, errors = await self._post_all(self.cluster.lookupd_addresses, "/topic/create",
                                            {"topic": topic})
        if channel:
            ok, failed = await self._post_all(self.cluster.lookupd_addresses, "/channel/create", params)
            done, errors = done + ok, errors + failed
        if channel or settings.topic_params or settings.paused:
            producers = await self.cluster.lookupd_topic_producers(topic)
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
        producers = await self.cluster.topic_producers(topic)
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
            named = find_node((await self.cluster.nodes()).value, node)
        except ClusterError:
            named = None
        name, address = (named.http_address, named.address) if named else (node, node)
        done, errors = await self._post_all(self.cluster.lookupd_addresses, "/topic/tombstone",
                                            {"topic": topic, "node": name})
        ok, failed = await self._post_all([address], "/topic/delete", {"topic": topic})
        return ActionResult("tombstone_topic_producer", tuple(done + ok), tuple(errors + failed))


def _kind(channel: str) -> str:
    return "channel" if channel else "topic"
