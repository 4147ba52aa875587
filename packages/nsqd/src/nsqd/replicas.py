"""What nsqd's edges (the HTTP API, ``/stats``, ``/metrics``) ask of the replication cluster
(docs/design/replication.md). ``nsqd.replication.edge.Edge`` is it; ``app.serve`` puts one on
the broker (``Broker.replication``) only with ``--etcd-endpoints``, so without it nothing of
this is called (and ``nsqd.replication`` is not imported).
"""

from __future__ import annotations

from typing import Any, Protocol

#: the header of a ``/topic/replicas`` a follower forwards to the leader (never forwarded on)
FORWARDED = "X-NSQ-Forwarded-By"


class Replicas(Protocol):
    #: this node's id (``<broadcast address>:<tcp port>``)
    @property
    def node(self) -> str: ...

    async def create(self, topic: str, replicas: int | None) -> bool:
        """Place ``topic`` on ``replicas`` nodes (None: ``--default-replicas``), or find where
        it is; whether this node holds a replica. Raises ``HttpError``."""
        ...

    async def change(self, topic: str, replicas: int, *, forwarded: str | None) -> None:
        """``/topic/replicas``: done by the leader, forwarded to it from another node
        (``forwarded``: the node that forwarded it here). Raises ``HttpError``."""
        ...

    def describe(self, topic: str) -> dict[str, Any] | None:
        """``topic``'s ``replication`` object of /stats; None when it is not placed."""
        ...

    def isr_changes(self, topic: str) -> tuple[int, int]:
        """Removals from and additions to ``topic``'s ISR this node made as its leader."""
        ...
