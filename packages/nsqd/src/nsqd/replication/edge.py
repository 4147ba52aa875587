"""The replication cluster as nsqd's HTTP API sees it (``nsqd.replicas.Replicas``): placing a
topic on ``/topic/create``, ``/topic/replicas`` answered by the topic's leader, and what
``/stats`` and ``/metrics`` show (docs/design/replication.md, "Placement and re-placement").

``/topic/replicas`` sent to a node that does not lead the topic is forwarded over HTTP to the
leader's HTTP port (its node key's ``http_port``) with ``X-NSQ-Forwarded-By``, and the
leader's answer is given back: any node takes it, as producers need not know the leader. A
forwarded request is never forwarded again (a leader changing meanwhile answers 503
``LEADER_UNAVAILABLE``, to be sent again). ``leader_url`` says where a topic's leader's
listeners are, for the other requests only the leader answers (``nsqd.relay``).

Answers beyond NSQ: 400 ``INVALID_REPLICAS`` (fewer than 1, or more than the live nodes),
404 ``TOPIC_NOT_FOUND`` (not placed), 503 ``LEADER_UNAVAILABLE`` (no leader, or it cannot
be reached), 503 ``ETCD_UNAVAILABLE`` (etcd cannot be reached).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import httpx
import trio
from nsq_common import join_host_port
from nsq_serving import HttpError

from ..errors import StoreFailed
from ..replicas import FORWARDED
from .coordinator import Coordinator
from .election import StaleEpoch
from .etcd import EtcdError
from .placement import PlacementError, place
from .view import TopicView

if TYPE_CHECKING:
    from ..message import QueuedMessage
    from ..record import Records
    from .keys import NodeInfo

log = logging.getLogger("nsqd")

#: seconds the leader has to answer a forwarded /topic/replicas
FORWARD_TIMEOUT = 30.0
#: seconds a first publish waits for the topic it placed to have a leader in the view
PLACED_WITHIN = 10.0


def _unavailable(exc: EtcdError) -> HttpError:
    log.warning("replication: etcd: %s", exc)
    return HttpError(503, "ETCD_UNAVAILABLE")


@attrs.define(eq=False)
class Edge:
    coordinator: Coordinator
    default_replicas: int
    #: a publish sent to the leader on another node (``DataPath.forward``)
    forward: Callable[[str, str, list[QueuedMessage] | Records], Awaitable[None]] | None = None

    async def create(self, topic: str, replicas: int | None) -> bool:
        coordinator = self.coordinator
        try:
            placement, _ = await place(
                coordinator.client, topic,
                self.default_replicas if replicas is None else replicas, prefer=coordinator.node)
        except PlacementError:
            raise HttpError(400, "INVALID_REPLICAS") from None
        except EtcdError as exc:
            raise _unavailable(exc) from None
        return coordinator.node in placement.nodes

    async def publish_new(self, topic: str, msgs: list[QueuedMessage] | Records) -> bool:
        return await self._first_publish(topic, msgs)

    async def hold(self, topic: str) -> bool:
        return not await self._first_publish(topic, None)

    async def _first_publish(self, topic: str, msgs: list[QueuedMessage] | Records | None
                             ) -> bool:
        """``publish_new``'s placing; with no ``msgs`` (``hold``), True once it is seen
        placed on other nodes only, sending nothing."""
        coordinator = self.coordinator
        try:
            here = await self.create(topic, None)
        except HttpError as exc:
            raise StoreFailed(f"topic {topic} not placed: {exc.text}") from None
        with trio.move_on_after(PLACED_WITHIN):
            while True:
                role = coordinator.roles.get(topic)
                if here and role is not None and role.leader:
                    return False  # held here, leading or following its leader
                view = coordinator.view.topics.get(topic)
                if (not here and view is not None and view.placement is not None
                        and self.node not in view.placement.nodes and view.leader is not None):
                    if msgs is None:
                        return True
                    if self.forward is None:
                        raise StoreFailed(f"topic {topic} is placed on other nodes")
                    await self.forward(view.leader[1].node, topic, msgs)
                    return True
                await coordinator.reconciled.wait()
        raise StoreFailed(f"topic {topic} placed, but no leader seen within {PLACED_WITHIN}s")

    async def change(self, topic: str, replicas: int, *, forwarded: str | None) -> None:
        coordinator = self.coordinator
        view = coordinator.view.topics.get(topic)
        if view is None or view.placement is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        role = coordinator.roles.get(topic)
        if role is not None and role.leading:
            try:
                await coordinator.resize(topic, replicas)
            except PlacementError:
                raise HttpError(400, "INVALID_REPLICAS") from None
            except StaleEpoch:
                raise HttpError(503, "LEADER_UNAVAILABLE") from None
            except EtcdError as exc:
                raise _unavailable(exc) from None
            return
        await self._forward(view, "/topic/replicas", {"topic": topic, "replicas": replicas},
                            forwarded=forwarded)

    async def delete(self, topic: str, *, forwarded: str | None) -> bool:
        coordinator = self.coordinator
        view = coordinator.view.topics.get(topic)
        if view is None or view.placement is None:
            return False
        role = coordinator.roles.get(topic)
        if role is not None and role.leading:
            try:
                await coordinator.delete(topic)
            except StaleEpoch:
                raise HttpError(503, "LEADER_UNAVAILABLE") from None
            except EtcdError as exc:
                raise _unavailable(exc) from None
            return True
        await self._forward(view, "/topic/delete", {"topic": topic}, forwarded=forwarded)
        return True

    async def _forward(self, view: TopicView, path: str, params: dict[str, Any], *,
                       forwarded: str | None) -> None:
        """A request only the topic's leader answers, sent to it (never forwarded on)."""
        coordinator = self.coordinator
        node = self._leader_node(view)
        if forwarded is not None or node is None:
            raise HttpError(503, "LEADER_UNAVAILABLE")
        leader, info = node
        url = f"http://{join_host_port(info.broadcast_address, info.http_port)}{path}"
        try:
            async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT) as client:
                answer = await client.post(url, params=params,
                                           headers={FORWARDED: coordinator.node})
        except httpx.HTTPError as exc:
            log.warning("replication: topic %s: %s not forwarded to %s: %s",
                        params["topic"], path, leader, exc)
            raise HttpError(503, "LEADER_UNAVAILABLE") from None
        if answer.status_code != 200:
            raise HttpError(answer.status_code, _message(answer))

    def _leader_node(self, view: TopicView) -> tuple[str, NodeInfo] | None:
        """The topic's leader (its node id) and its node key, when the view shows both."""
        if view.leader is None:
            return None
        leader = view.leader[1].node
        node = self.coordinator.view.nodes.get(leader)
        return (leader, node[1]) if node is not None else None

    def leader_url(self, topic: str, listener: str) -> str | None:
        coordinator = self.coordinator
        view = coordinator.view.topics.get(topic)
        if view is None or view.placement is None:
            return None
        role = coordinator.roles.get(topic)
        if role is not None and role.leading:
            return None
        node = self._leader_node(view)
        if node is None or node[0] == coordinator.node:  # (here, its role not taken yet)
            return ""
        info = node[1]
        port = info.lmstfy_port if listener == "lmstfy" else info.http_port
        return f"http://{join_host_port(info.broadcast_address, port)}" if port else ""

    async def changed(self) -> None:
        await self.coordinator.reconciled.wait()

    @property
    def node(self) -> str:
        return self.coordinator.node

    def describe(self, topic: str) -> dict[str, Any] | None:
        return self.coordinator.describe(topic)

    def isr_changes(self, topic: str) -> tuple[int, int]:
        return self.coordinator.isr_changes(topic)


def _message(answer: httpx.Response) -> str:
    """The text of an NSQ error answer (``{"message": ...}``)."""
    try:
        return str(answer.json()["message"])
    except (ValueError, KeyError, TypeError):
        return "INTERNAL_ERROR"
