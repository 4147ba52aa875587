"""The replication cluster as nsqd's HTTP API sees it (``nsqd.replicas.Replicas``): placing a
topic on ``/topic/create``, ``/topic/replicas`` answered by the topic's leader, and what
``/stats`` and ``/metrics`` show (docs/design/replication.md, "Placement and re-placement").

``/topic/replicas`` sent to a node that does not lead the topic is forwarded over HTTP to the
leader's HTTP port (its node key's ``http_port``) with ``X-NSQ-Forwarded-By``, and the
leader's answer is given back: any node takes it, as producers need not know the leader. A
forwarded request is never forwarded again (a leader changing meanwhile answers 503
``LEADER_UNAVAILABLE``, to be sent again).

Answers beyond NSQ: 400 ``INVALID_REPLICAS`` (fewer than 1, or more than the live nodes),
404 ``TOPIC_NOT_FOUND`` (not placed), 503 ``LEADER_UNAVAILABLE`` (no leader, or it cannot
be reached), 503 ``ETCD_UNAVAILABLE`` (etcd cannot be reached).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import httpx
from nsq_common import join_host_port
from nsq_serving import HttpError

from ..replicas import FORWARDED
from .coordinator import Coordinator
from .election import StaleEpoch
from .etcd import EtcdError
from .placement import PlacementError, place

log = logging.getLogger("nsqd")

#: seconds the leader has to answer a forwarded /topic/replicas
FORWARD_TIMEOUT = 30.0


def _unavailable(exc: EtcdError) -> HttpError:
    log.warning("replication: etcd: %s", exc)
    return HttpError(503, "ETCD_UNAVAILABLE")


@attrs.define(eq=False)
class Edge:
    coordinator: Coordinator
    default_replicas: int

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
        leader = view.leader[1].node if view.leader is not None else None
        node = coordinator.view.nodes.get(leader) if leader is not None else None
        if forwarded is not None or node is None:
            raise HttpError(503, "LEADER_UNAVAILABLE")
        info = node[1]
        url = f"http://{join_host_port(info.broadcast_address, info.http_port)}/topic/replicas"
        try:
            async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT) as client:
                answer = await client.post(url, params={"topic": topic, "replicas": replicas},
                                           headers={FORWARDED: coordinator.node})
        except httpx.HTTPError as exc:
            log.warning("replication: topic %s: /topic/replicas not forwarded to %s: %s",
                        topic, leader, exc)
            raise HttpError(503, "LEADER_UNAVAILABLE") from None
        if answer.status_code != 200:
            raise HttpError(answer.status_code, _message(answer))

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
