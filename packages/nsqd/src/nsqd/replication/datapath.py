"""The data path of replicated topics on one node (docs/design/replication.md): what the
coordinator's roles mean for the topics' logs.

Task tree::

    DataPath.run
    ├── one Fetcher per leader node this node follows some topic of
    ├── one Forwarder's reader per leader node a publish here was sent to
    └── the in-sync check: every ``CHECK`` s, for each topic this node leads, followers not
        caught up for ``--replica-lag-max`` shrunk out, placed followers caught up expanded in

``host`` makes a topic placed here (a replica on several nodes: following, no leader yet,
before anything is published to it here); ``sync`` runs after each reconcile of the
coordinator: each topic placed here on more than one node has its ``Replica``
(``Topic.replica``) set to lead or follow as its role says, and its fetcher. ``server``
answers the followers of the topics this node leads (their fetches, and the publishes they
forward: ``publish_forwarded``). ``progress`` gives ``/stats`` a topic's high watermark and
its followers' lag.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import trio
from nsq_common import ProtocolError, decode_mpub_body

from ..errors import Exiting, StoreFailed
from ..record import Records
from .cursors import apply_record, cut_back
from .epochs import NAME as EPOCHS_FILE
from .fetcher import Fetcher
from .forwarder import Forwarder
from .keys import NodeInfo
from .replica import Replica
from .server import ReplicationServer
from .wire import DPUB, MPUB, PUB, Forward

if TYPE_CHECKING:
    from ..broker import Broker
    from ..message import QueuedMessage
    from ..topic import Topic
    from .coordinator import Coordinator

log = logging.getLogger("nsqd")

#: how often a leader looks at its followers' lag
CHECK = 0.5
#: a replica recovering (restarted after it may have lost its memory tail) campaigns only
#: once caught up with a leader, or after this long with none to catch up from (every
#: in-sync replica restarted so: what each lost is lost, as one node's would be)
RECOVERY_WAIT = 60.0


class DataPath:
    def __init__(self, broker: Broker, coordinator: Coordinator, *, min_insync: int,
                 lag_max: float) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.min_insync = min_insync
        self.lag_max = lag_max
        self.replicas: dict[str, Replica] = {}
        self.fetchers: dict[str, Fetcher] = {}
        self.server = ReplicationServer(self.replicas.get, broker.now, self.publish_forwarded)
        self.forwarders: dict[str, Forwarder] = {}
        self._nursery: trio.Nursery | None = None
        self._isr_changing: set[str] = set()
        #: topics this node may not lead yet (``may_lead``), logged once
        self._recovering: set[str] = set()

    @property
    def node(self) -> str:
        return self.coordinator.node

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(CHECK)
                for topic, replica in list(self.replicas.items()):
                    replica.check_fence()
                    if replica.leading and topic not in self._isr_changing:
                        self._check_isr(topic, replica)
                if any(self.may_lead(t, quiet=True) for t in self._recovering):
                    nursery.start_soon(self.coordinator.reconcile)  # (it may campaign now)

    def may_lead(self, topic: str, *, quiet: bool = False) -> bool:
        """Whether this node may campaign for ``topic``: its replica is caught up (not
        RECOVERING), or has waited ``RECOVERY_WAIT`` for a leader to catch up with."""
        replica = self.replicas.get(topic)
        if replica is None or replica.eligible:
            self._recovering.discard(topic)
            return True
        if replica.topic.clock.now() - replica.since >= RECOVERY_WAIT:
            if topic in self._recovering:
                self._recovering.discard(topic)
                log.warning("replication: topic %s: no leader to catch up with for %gs: "
                            "may lead as it is", topic, RECOVERY_WAIT)
            replica.eligible_as_it_is()
            return True
        if not quiet and topic not in self._recovering:
            self._recovering.add(topic)
            log.info("replication: topic %s: recovering (restarted, its memory tail may be "
                     "lost): may not lead before it has caught up with a leader", topic)
        return False

    # -- roles -------------------------------------------------------------------------------
    def host(self, name: str) -> None:
        """A topic placed on this node: made here if it is not, and, placed on several,
        a follower with no leader yet (it appends and delivers nothing) until ``sync``."""
        topic = self.broker.get_topic(name)
        view = self.coordinator.view.topics.get(name)
        if (topic.replica is None and view is not None and view.placement is not None
                and len(view.placement.nodes) > 1):
            self._replica(topic)

    def hold_replicas(self) -> None:
        """At the start, before any client is served: each local topic that was a replica
        here (it has an ``epochs`` file) is a follower of no leader until ``sync`` gives it
        its role. Without this, a restarted node would take publishes to it as an
        unreplicated topic's (acknowledged on its own write, then cut back when it
        truncates to its leader) and deliver from its uncommitted tail until the first
        reconcile: it refuses publishes (no leader) and delivers nothing instead."""
        for topic in list(self.broker.topics.values()):
            directory = topic.log.directory
            if (topic.replica is None and directory is not None
                    and (directory / EPOCHS_FILE).exists()):
                self._replica(topic)

    def _replica(self, topic: Topic) -> Replica:
        replica = Replica(topic, node=self.node, min_insync=self.min_insync,
                          lag_max=self.lag_max, forwarder=self.forward,
                          fence_from=self.coordinator.membership.fence_from)
        try:  # (the mark of a replica here, for ``hold_replicas`` after a restart)
            replica.epochs.mark()
        except OSError as exc:
            log.error("replication: topic %s: epochs file not written - %s", topic.name, exc)
        self.replicas[topic.name] = replica
        topic.replicate(replica)
        return replica

    def sync(self) -> None:
        """Bring each replica and fetcher in line with the coordinator's roles."""
        coordinator = self.coordinator
        following: dict[str, str] = {}
        for name, role in coordinator.roles.items():
            view = coordinator.view.topics.get(name)
            topic = self.broker.topics.get(name)
            replica = self.replicas.get(name)
            if (view is not None and view.placement is not None and topic is not None
                    and len(view.placement.nodes) < 2 and replica is not None
                    and not replica.leading):  # (held at the start: one replica now)
                self._drop(name)
                continue
            if (view is None or view.placement is None or view.state is None or topic is None
                    or len(view.placement.nodes) < 2):
                continue
            if replica is None or topic.replica is not replica:
                replica = self._replica(topic)
            state, replicas = view.state, view.placement.replicas
            if role.leading:
                try:
                    replica.lead(role.epoch, state.isr, replicas, view.state_revision)
                except OSError as exc:
                    log.error("replication: topic %s: cannot lead, its epochs file not "
                              "written - %s", name, exc)
                    replica.follow("", role.epoch, state.isr, replicas)
            else:
                replica.follow(role.leader, role.epoch, state.isr, replicas,
                               view.state_revision)
                if role.leader:
                    following[name] = role.leader
        for name in list(self.replicas):
            # no longer placed here (once etcd's keys are read: not those held at the start)
            if name not in coordinator.roles and coordinator.view.revision:
                self._drop(name)
        self._sync_fetchers(following)

    def _drop(self, name: str) -> None:
        replica = self.replicas.pop(name)
        replica.follow("", replica.epoch, (), replica.replicas)
        if replica.topic.replica is replica:
            replica.topic.replicate(None)

    def _sync_fetchers(self, following: dict[str, str]) -> None:
        by_leader: dict[str, set[str]] = {}
        for topic, leader in following.items():
            by_leader.setdefault(leader, set()).add(topic)
        for leader, fetcher in list(self.fetchers.items()):
            fetcher.follow(by_leader.pop(leader, set()))
            if not fetcher.topics:
                fetcher.stop()
                del self.fetchers[leader]
        if self._nursery is None:
            return
        for leader, topics in by_leader.items():
            fetcher = Fetcher(self.node, leader, self.replicas.get, self._node_info,
                              self.broker.now, partial(apply_record, self.broker),
                              partial(cut_back, self.broker),
                              lambda: not self.coordinator.membership.reachable)
            fetcher.follow(topics)
            self.fetchers[leader] = fetcher
            self._nursery.start_soon(fetcher.run)

    def _node_info(self, node: str) -> NodeInfo | None:
        found = self.coordinator.view.nodes.get(node)
        return found[1] if found is not None else None

    # -- the in-sync set ---------------------------------------------------------------------
    def _check_isr(self, topic: str, replica: Replica) -> None:
        view = self.coordinator.view.topics.get(topic)
        if view is None or view.placement is None:
            return
        now = replica.topic.clock.now()
        remove = replica.lagging(now)
        add = [n for n in replica.caught_up(view.placement.nodes)
               if n in self.coordinator.view.nodes]
        if (remove or add) and self._nursery is not None:
            self._isr_changing.add(topic)
            replica.adding(add)  # (counted in the HW before etcd may hold them)
            self._nursery.start_soon(self._change_isr, topic, replica, add, remove)

    async def _change_isr(self, topic: str, replica: Replica, add: list[str],
                          remove: list[str]) -> None:
        try:
            for node in remove:
                log.info("replication: topic %s: %s not caught up for over %gs: out of the "
                         "in-sync set", topic, node, self.lag_max)
            for node in add:
                log.info("replication: topic %s: %s caught up: into the in-sync set", topic,
                         node)
            view = self.coordinator.view.topics.get(topic)
            seen = view.state if view is not None else None
            if seen is None or seen.epoch != replica.epoch:
                return  # (the view moves on: the next look acts on what it says)
            # through the coordinator, which counts the changes for /metrics
            written = await self.coordinator.change_isr(topic, seen, add=add, remove=remove)
            if written is None:
                return  # (an expansion maybe written: still counted, until one is answered)
            state, revision = written
            if replica.leading and state.epoch == replica.epoch:
                replica.isr_written(state.isr, revision)
        finally:
            self._isr_changing.discard(topic)

    # -- forwarding --------------------------------------------------------------------------
    async def forward(self, leader: str, topic: str, msgs: list[QueuedMessage] | Records
                      ) -> None:
        """A follower's publish, through the leader (``Forwarder``).

        Raises:
            StoreFailed: the leader could not be asked, or refused.
        """
        forwarder = self.forwarders.get(leader)
        if forwarder is None:
            if self._nursery is None:
                raise StoreFailed("replication is not running")
            forwarder = self.forwarders[leader] = Forwarder(self.node, leader, self._node_info,
                                                            self._nursery, self.lag_max)
        await forwarder.publish(topic, msgs)

    async def publish_forwarded(self, ask: Forward) -> bytes:
        """A follower's publish, on this node as its leader: the answer NSQ would send."""
        replica = self.replicas.get(ask.topic)
        role = self.coordinator.roles.get(ask.topic)
        if (not replica.leading if replica is not None  # (never forwarded on again)
                else role is None or not role.leading):  # (one replica: its only node)
            return b"E_PUB_FAILED not the leader of the replicated topic " + ask.topic.encode()
        broker, opts = self.broker, self.broker.opts
        try:
            msgs: list[QueuedMessage] | Records
            if ask.kind == PUB:
                msgs = broker.new_records([ask.body])
            elif ask.kind == MPUB:
                msgs = broker.new_records(decode_mpub_body(ask.body, opts.max_msg_size,
                                                           opts.max_body_size))
            elif ask.kind == DPUB:
                msgs = broker.new_messages([ask.body], ask.defer_ms / 1000)
            else:
                return b"E_INVALID unknown publish kind %d" % ask.kind
            await broker.publish(ask.topic, msgs)
        except (Exiting, StoreFailed) as exc:
            return b"E_PUB_FAILED " + str(exc).encode()
        except ProtocolError as exc:
            return exc.text
        return b"OK"

    # -- what /stats shows -------------------------------------------------------------------
    def progress(self, topic: str) -> tuple[int | None, dict[str, int]]:
        """The topic's high watermark as this node knows it, and (on its leader) each
        follower's lag in records; ``(None, {})`` for a topic not replicated here."""
        replica = self.replicas.get(topic)
        if replica is None:
            return None, {}
        return replica.hw, replica.lag() if replica.leading else {}
