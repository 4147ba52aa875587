"""Placing a topic on N live nodes, one of them its leader at epoch 1, in one etcd transaction
(docs/design/replication.md, transaction 2 and "Placement and re-placement").
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping

from .etcd import Compare, EtcdClient, KeyValue, Op
from .keys import (
    NODES,
    TOPICS,
    LeaderMark,
    Placement,
    TopicState,
    leader_key,
    node_key,
    parse_topic_key,
    placement_key,
    state_key,
)

log = logging.getLogger("nsqd")

#: tries before giving up when nodes come and go while a topic is being placed
ATTEMPTS = 5


class PlacementError(Exception):
    """The topic cannot be placed as asked (too few live nodes, a bad count)."""


def choose(live: Mapping[str, int], load: Mapping[str, int], replicas: int,
           prefer: str | None = None) -> list[str]:
    """``replicas`` nodes of ``live`` (node -> lease): ``prefer`` first when it is live, then
    those holding the fewest replicas (``load``), ties by node id. The first is the leader.

    Raises:
        PlacementError: fewer live nodes than ``replicas``, or ``replicas`` < 1.
    """
    if replicas < 1:
        raise PlacementError(f"replicas must be at least 1, not {replicas}")
    if replicas > len(live):
        raise PlacementError(f"{replicas} replicas asked, {len(live)} live nodes")
    chosen = [prefer] if prefer is not None and prefer in live else []
    rest = sorted((n for n in live if n not in chosen), key=lambda n: (load.get(n, 0), n))
    return (chosen + rest)[:replicas]


async def place(client: EtcdClient, topic: str, replicas: int, *,
                prefer: str | None = None) -> tuple[Placement, TopicState]:
    """Place ``topic`` (or return where it already is: placing is idempotent).

    Raises:
        PlacementError; EtcdError, EtcdUnavailable.
    """
    for _ in range(ATTEMPTS):
        nodes, _ = await client.range(NODES, prefix=True)
        live = {kv.key[len(NODES):].decode(): kv.lease for kv in nodes}
        topics, _ = await client.range(TOPICS, prefix=True)
        existing = _existing(topics, topic)
        if existing is not None:
            return existing
        chosen = choose(live, replica_counts(topics), replicas, prefer)
        leader = chosen[0]
        where = Placement(replicas, tuple(chosen))
        state = TopicState(leader, 1, tuple(chosen))
        result = await client.txn(
            [Compare.create(placement_key(topic), 0),
             *(Compare.lease(node_key(node), live[node]) for node in chosen)],
            [Op.put(placement_key(topic), where.encode()),
             Op.put(state_key(topic), state.encode()),
             Op.put(leader_key(topic), LeaderMark(leader, 1).encode(), lease=live[leader])])
        if result.succeeded:
            log.info("replication: placed topic %s on %s (leader %s, epoch 1)", topic,
                     ", ".join(chosen), leader)
            return where, state
    raise PlacementError(f"topic {topic}: nodes changed while placing it {ATTEMPTS} times")


def _existing(topics: list[KeyValue], topic: str) -> tuple[Placement, TopicState] | None:
    found: dict[str, bytes] = {}
    for kv in topics:
        parsed = parse_topic_key(kv.key)
        if parsed is not None and parsed[0] == topic:
            found[parsed[1]] = kv.value
    if "placement" not in found or "state" not in found:
        return None
    return Placement.decode(found["placement"]), TopicState.decode(found["state"])


def replica_counts(topics: list[KeyValue]) -> Counter[str]:
    """How many replicas each node holds."""
    load: Counter[str] = Counter()
    for kv in topics:
        parsed = parse_topic_key(kv.key)
        if parsed is not None and parsed[1] == "placement":
            try:
                load.update(Placement.decode(kv.value).nodes)
            except (ValueError, KeyError, TypeError):
                log.error("replication: unreadable placement %r", kv.key)
    return load
