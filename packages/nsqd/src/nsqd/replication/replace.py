"""Changing where a topic lives, by its leader (docs/design/replication.md, transaction 5 and
"Placement and re-placement"): ``/topic/replicas`` (``resize``) and a replica whose node has
been gone for ``--replica-down-timeout`` placed on another live node (``replace_lost``).

Each is one etcd transaction compared on the placement and the state as the leader read them,
on its own leader key's lease (so a leader that lost its place changes nothing) and on the
lease of each node added (alive, and the process that was chosen). New replicas come last in
the placement, out of the in-sync set (they fetch, and the leader adds them once caught up);
a replica removed leaves the in-sync set in the same transaction.

``delete_keys`` is the end of a topic (``/topic/delete``, by its leader once it has deleted
its own copy): every key under the topic's prefix deleted, compared on its leader key's lease.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping

from .election import StaleEpoch
from .etcd import Compare, EtcdClient, EtcdError, Op
from .keys import (
    NODES,
    TOPICS,
    Placement,
    TopicState,
    leader_key,
    node_key,
    placement_key,
    state_key,
    topic_prefix,
)
from .placement import PlacementError, replica_counts

log = logging.getLogger("nsqd")

#: re-reads when the keys changed between the read and the transaction
ATTEMPTS = 5

#: what a change makes of a placement: (placement, state, live nodes -> lease, replicas held
#: per node) -> the new placement
Plan = Callable[[Placement, TopicState, Mapping[str, int], Counter[str]], Placement]


def _candidates(placement: Placement, live: Mapping[str, int], load: Counter[str]
                ) -> list[str]:
    """Live nodes without a replica of the topic, those holding the fewest replicas first."""
    return sorted((n for n in live if n not in placement.nodes), key=lambda n: (load[n], n))


def resized(replicas: int) -> Plan:
    """``replicas`` replicas: more are added on the live nodes holding the fewest; fewer
    remove followers, those out of the in-sync set first, then the latest added; never the
    leader.

    Raises (from the plan):
        PlacementError: ``replicas`` < 1, or more than the live nodes can hold.
    """
    def plan(placement: Placement, state: TopicState, live: Mapping[str, int],
             load: Counter[str]) -> Placement:
        if replicas < 1:
            raise PlacementError(f"replicas must be at least 1, not {replicas}")
        nodes = list(placement.nodes)
        if replicas > len(nodes):
            added = _candidates(placement, live, load)[:replicas - len(nodes)]
            if len(nodes) + len(added) < replicas:
                raise PlacementError(f"{replicas} replicas asked, {len(live)} live nodes")
            nodes += added
        followers = [n for n in reversed(nodes) if n != state.leader]  # latest added first
        drop = sorted(followers, key=lambda n: n in state.isr)[:len(nodes) - replicas]
        return Placement(replicas, tuple(n for n in nodes if n not in drop))
    return plan


def replaced(lost: set[str]) -> Plan:
    """Each of ``lost`` (followers whose node is gone) replaced by a live node holding the
    fewest replicas, as long as there is one; the others stay (to be replaced later)."""
    def plan(placement: Placement, state: TopicState, live: Mapping[str, int],
             load: Counter[str]) -> Placement:
        candidates = _candidates(placement, live, load)
        gone = [n for n in placement.nodes if n in lost and n not in live and n != state.leader]
        swaps = dict(zip(gone, candidates, strict=False))
        kept = [n for n in placement.nodes if n not in swaps]
        return Placement(placement.replicas, tuple(kept + list(swaps.values())))
    return plan


async def re_place(client: EtcdClient, topic: str, plan: Plan, *, leader: str, lease: int,
                   epoch: int) -> Placement:
    """Apply ``plan`` to ``topic`` as its leader (``leader`` at ``epoch``, holding
    ``lease``); the placement written (or found, when nothing changes).

    Raises:
        StaleEpoch: ``leader`` does not lead the topic at ``epoch`` any more.
        PlacementError: the plan's (or the topic is not placed).
        EtcdError, EtcdUnavailable.
    """
    for _ in range(ATTEMPTS):
        where_kv, state_kv = (await client.get(placement_key(topic)),
                              await client.get(state_key(topic)))
        if where_kv is None or state_kv is None:
            raise PlacementError(f"topic {topic} is not placed")
        placement, state = Placement.decode(where_kv.value), TopicState.decode(state_kv.value)
        if state.leader != leader or state.epoch != epoch:
            raise StaleEpoch(topic, epoch, state)
        nodes, _ = await client.range(NODES, prefix=True)
        live = {kv.key[len(NODES):].decode(): kv.lease for kv in nodes}
        topics, _ = await client.range(TOPICS, prefix=True)
        changed = plan(placement, state, live, replica_counts(topics))
        if changed == placement:
            return placement
        added = [n for n in changed.nodes if n not in placement.nodes]
        isr = tuple(n for n in state.isr if n in changed.nodes)
        puts = [Op.put(placement_key(topic), changed.encode())]
        if isr != state.isr:
            puts.append(Op.put(state_key(topic), TopicState(leader, epoch, isr).encode()))
        result = await client.txn(
            [Compare.mod(placement_key(topic), where_kv.mod_revision),
             Compare.mod(state_key(topic), state_kv.mod_revision),
             Compare.lease(leader_key(topic), lease),
             *(Compare.lease(node_key(n), live[n]) for n in added)],
            puts)
        if result.succeeded:
            log.info("replication: topic %s placed on %s (%d replicas wanted)", topic,
                     ", ".join(changed.nodes), changed.replicas)
            return changed
        mark = await client.get(leader_key(topic))
        if mark is None or mark.lease != lease:
            raise StaleEpoch(topic, epoch, state)
    raise EtcdError(f"topic {topic}: its keys changed under every one of {ATTEMPTS} tries")


async def delete_keys(client: EtcdClient, topic: str, *, leader: str, lease: int, epoch: int
                      ) -> None:
    """As ``topic``'s leader at ``epoch`` (holding ``lease``), delete its keys (the whole
    prefix: placement, state and leader key); every replica then deletes its copy.

    Raises:
        StaleEpoch: ``leader`` does not lead the topic at ``epoch`` any more.
        EtcdError, EtcdUnavailable.
    """
    result = await client.txn([Compare.lease(leader_key(topic), lease)],
                              [Op.delete(topic_prefix(topic), prefix=True)])
    if not result.succeeded:
        raise StaleEpoch(topic, epoch, None)
    log.info("replication: topic %s deleted from the cluster (by %s, its leader at epoch %d)",
             topic, leader, epoch)
