"""What nsqd's edges (the HTTP API, ``/stats``, ``/metrics``) ask of the replication cluster
(docs/design/replication.md). ``nsqd.replication.edge.Edge`` is it; ``app.serve`` puts one on
the broker (``Broker.replication``) only with ``--etcd-endpoints``, so without it nothing of
this is called (and ``nsqd.replication`` is not imported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .message import QueuedMessage
    from .record import Records

#: the header of a request a node forwards to a topic's leader (``/topic/replicas``, and those
#: ``nsqd.relay`` relays): never forwarded on
FORWARDED = "X-NSQ-Forwarded-By"


class Replicas(Protocol):
    #: this node's id (``<broadcast address>:<tcp port>``)
    @property
    def node(self) -> str: ...

    async def create(self, topic: str, replicas: int | None) -> bool:
        """Place ``topic`` on ``replicas`` nodes (None: ``--default-replicas``), or find where
        it is; whether this node holds a replica. Raises ``HttpError``."""
        ...

    async def publish_new(self, topic: str, msgs: list[QueuedMessage] | Records) -> bool:
        """A publish to ``topic``, which this node does not have: placed as ``/topic/create``
        places it (``--default-replicas``); placed here, False once this node holds it as its
        role says (the publish goes on here, by the replicated rules); placed on other nodes
        only, True once sent to its leader and acknowledged. Raises ``StoreFailed``."""
        ...

    async def hold(self, topic: str) -> bool:
        """``topic``, which this node does not have, placed as ``publish_new`` places it
        (lmstfy's queue, before its first job); whether this node holds it (as its role
        says) rather than other nodes only. Raises ``StoreFailed``."""
        ...

    async def change(self, topic: str, replicas: int, *, forwarded: str | None) -> None:
        """``/topic/replicas``: done by the leader, forwarded to it from another node
        (``forwarded``: the node that forwarded it here). Raises ``HttpError``."""
        ...

    async def delete(self, topic: str, *, forwarded: str | None) -> bool:
        """``/topic/delete`` of a placed topic: by its leader (its copy, then its keys: every
        replica deletes its own), forwarded to it from another node; False when ``topic`` is
        not placed (a local topic, deleted as nsqd deletes one). Raises ``HttpError``."""
        ...

    def leader_url(self, topic: str, listener: str) -> str | None:
        """Where a request on ``topic`` only its leader answers goes: None when it is not
        placed, or led here (answered here); else ``http://host:port`` of the leader's
        ``listener`` (``"http"``: its HTTP API, ``"lmstfy"``: its lmstfy data API), ``""``
        while no leader, or none with that listener, is known. A dict lookup for a topic
        that is not placed."""
        ...

    async def changed(self) -> None:
        """Return when the cluster's view (leaders, nodes) next changes."""
        ...

    def describe(self, topic: str) -> dict[str, Any] | None:
        """``topic``'s ``replication`` object of /stats; None when it is not placed."""
        ...

    def isr_changes(self, topic: str) -> tuple[int, int]:
        """Removals from and additions to ``topic``'s ISR this node made as its leader."""
        ...
