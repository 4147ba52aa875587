"""Leader election with the epoch incremented in the same etcd transaction, and the leader's
changes of the in-sync set compared on the state it leads at (docs/design/replication.md,
transactions 3 and 4).

Election is etcd's recipe (a key created under the candidate's lease only while absent)
joined to the topic's state: the ``leader`` key's absence *and* the state's revision as the
candidate read it are compared, so of any number of candidates racing one succeeds, the epoch
goes up by exactly one, and a candidate acting on a stale state fails.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .etcd import Compare, EtcdClient, EtcdError, Op
from .keys import LeaderMark, TopicState, leader_key, node_key, state_key

log = logging.getLogger("nsqd")

#: re-reads of the state when an ISR change is refused at the same epoch
ATTEMPTS = 10


class StaleEpoch(Exception):
    """The caller no longer leads the topic at the epoch it acted at."""

    def __init__(self, topic: str, epoch: int, state: TopicState | None) -> None:
        now = f"epoch {state.epoch}, leader {state.leader}" if state else "no state"
        super().__init__(f"topic {topic}: not leader at epoch {epoch} any more ({now})")
        self.state = state


async def read_state(client: EtcdClient, topic: str) -> tuple[TopicState, int] | None:
    """The topic's state and its mod revision; None if the topic has none."""
    kv = await client.get(state_key(topic))
    if kv is None:
        return None
    return TopicState.decode(kv.value), kv.mod_revision


async def campaign(client: EtcdClient, topic: str, *, node: str, lease: int
                   ) -> TopicState | None:
    """Try to become ``topic``'s leader (``node``, holding ``lease``): only when it has no
    leader and ``node`` is in its ISR. The new state if this node won, else None.

    Raises:
        EtcdError, EtcdUnavailable.
    """
    read = await read_state(client, topic)
    if read is None:
        return None
    state, revision = read
    if node not in state.isr:
        return None
    isr = tuple(n for n in state.isr if n != state.leader or n == node)
    won = TopicState(node, state.epoch + 1, isr)
    result = await client.txn(
        [Compare.create(leader_key(topic), 0),
         Compare.mod(state_key(topic), revision),
         Compare.lease(node_key(node), lease)],
        [Op.put(leader_key(topic), LeaderMark(node, won.epoch).encode(), lease=lease),
         Op.put(state_key(topic), won.encode())])
    if not result.succeeded:
        return None
    log.info("replication: elected leader of topic %s at epoch %d (in sync: %s)", topic,
             won.epoch, ", ".join(won.isr))
    return won


async def change_isr(client: EtcdClient, topic: str, *, leader: str, lease: int, epoch: int,
                     add: Iterable[str] = (), remove: Iterable[str] = ()) -> TopicState:
    """As ``topic``'s leader at ``epoch`` (holding ``lease``), add and remove in-sync
    replicas (never the leader itself); the state written (or found, if nothing changes).

    Raises:
        StaleEpoch: ``leader`` does not lead the topic at ``epoch`` any more.
        EtcdError, EtcdUnavailable.
    """
    state, _ = await change_isr_at(client, topic, leader=leader, lease=lease, epoch=epoch,
                                   add=add, remove=remove)
    return state


async def change_isr_at(client: EtcdClient, topic: str, *, leader: str, lease: int,
                        epoch: int, add: Iterable[str] = (), remove: Iterable[str] = ()
                        ) -> tuple[TopicState, int]:
    """``change_isr``, with the revision the state returned was written at (what orders it
    against the states a watch shows).

    Raises:
        StaleEpoch: ``leader`` does not lead the topic at ``epoch`` any more.
        EtcdError, EtcdUnavailable.
    """
    adding, removing = list(add), set(remove) - {leader}
    for _ in range(ATTEMPTS):
        read = await read_state(client, topic)
        if read is None or read[0].leader != leader or read[0].epoch != epoch:
            raise StaleEpoch(topic, epoch, read[0] if read else None)
        state, revision = read
        isr = [n for n in state.isr if n not in removing]
        isr += [n for n in adding if n not in isr]
        if tuple(isr) == state.isr:
            return state, revision
        changed = TopicState(leader, epoch, tuple(isr))
        result = await client.txn(
            [Compare.mod(state_key(topic), revision),
             Compare.lease(leader_key(topic), lease)],
            [Op.put(state_key(topic), changed.encode())])
        if result.succeeded:
            log.info("replication: topic %s in sync at epoch %d: %s", topic, epoch,
                     ", ".join(changed.isr))
            return changed, result.revision
        mark = await client.get(leader_key(topic))
        if mark is None or mark.lease != lease:
            read = await read_state(client, topic)
            raise StaleEpoch(topic, epoch, read[0] if read else None)
    raise EtcdError(f"topic {topic}: its state changed under every one of {ATTEMPTS} tries")
