"""The coordination task an nsqd with ``--etcd-endpoints`` runs (docs/design/replication.md).

Task tree::

    Coordinator.run
    ├── membership: join (lease + node key), keep-alive, the fence
    ├── watch: a range of /nsq/, then its changes; after each, ``reconcile``
    └── after each change of the membership (a new lease, etcd back), ``reconcile``

``reconcile`` acts for the topics placed on this node: a topic without a leader key whose ISR
holds this node is campaigned for (one transaction; losing is fine, the winner's state comes
through the watch); a topic this node leads has any ISR member whose node key is gone shrunk
out. Each role change is logged (``leading topic T at epoch E``, ``following topic T``), and
``roles`` says what this node is for each of its topics.

A topic placed on this node is made here (``host_topic``); after each reconcile the data
path (``replication.datapath``: fetching, the high watermark, acknowledgements) follows
``roles`` (``on_change``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs
import trio

from ..clock import Clock, SystemClock
from .election import StaleEpoch, campaign, change_isr
from .etcd import EtcdClient, EtcdError
from .keys import ROOT, NodeInfo, TopicState
from .membership import RETRY, Membership
from .placement import place
from .view import ClusterView

log = logging.getLogger("nsqd")


@attrs.frozen
class Role:
    """What this node is for one topic: its leader at ``epoch``, or a follower of ``leader``
    (empty while the topic has none)."""

    leading: bool
    leader: str
    epoch: int


@attrs.define(eq=False)
class Coordinator:
    endpoints: Sequence[str]
    info: NodeInfo
    clock: Clock = attrs.field(factory=SystemClock)
    #: whether this node may campaign for a topic (the data path: caught up since start)
    may_lead: Callable[[str], bool] = lambda topic: True
    view: ClusterView = attrs.field(factory=ClusterView)
    roles: dict[str, Role] = attrs.field(factory=dict)
    #: a topic placed on this node: made locally (``Broker.get_topic``)
    host_topic: Callable[[str], object] = lambda topic: None
    #: after each reconcile: the data path follows the roles (``DataPath.sync``)
    on_change: Callable[[], None] = lambda: None
    #: a topic's high watermark and its followers' lag (``DataPath.progress``)
    progress_of: Callable[[str], tuple[int | None, dict[str, int]]] = (
        lambda topic: (None, {}))
    client: EtcdClient = attrs.field(init=False)
    membership: Membership = attrs.field(init=False)
    _reconciling: trio.Lock = attrs.field(init=False, factory=trio.Lock)

    def __attrs_post_init__(self) -> None:
        self.client = EtcdClient(self.endpoints)
        self.membership = Membership(self.client, self.info, self.clock)

    @property
    def node(self) -> str:
        return self.info.node

    async def run(self, *, task_status: trio.TaskStatus[Coordinator] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Join the cluster and follow it until cancelled; a clean stop revokes the lease (so
        the others elect at once rather than after its TTL)."""
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.membership.run)
                await nursery.start(self._watch)
                nursery.start_soon(self._on_membership)
                task_status.started(self)
        finally:
            with trio.move_on_after(2) as scope:
                scope.shield = True
                if self.membership.lease:
                    try:
                        await self.client.revoke(self.membership.lease)
                    except EtcdError as exc:
                        log.warning("replication: lease not revoked at exit: %s", exc)
                await self.client.aclose()

    async def place(self, topic: str, replicas: int) -> TopicState:
        """Place ``topic`` on ``replicas`` live nodes, this one as its leader when possible."""
        _, state = await place(self.client, topic, replicas, prefer=self.node)
        return state

    async def _watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                     ) -> None:
        started = False
        while True:
            try:
                kvs, revision = await self.client.range(ROOT, prefix=True)
                self.view.load(kvs, revision)
                await self.reconcile()
                if not started:
                    task_status.started()
                    started = True
                async for seen, events in self.client.watch(
                        ROOT, prefix=True, start_revision=revision + 1):
                    self.view.apply(events, seen)
                    await self.reconcile()
            except EtcdError as exc:
                log.debug("replication: watch: %s", exc)
            await trio.sleep(RETRY)

    async def _on_membership(self) -> None:
        while True:
            await self.membership.changed.wait()
            await self.reconcile()

    async def reconcile(self) -> None:
        """Act on the view for every topic placed on this node (module docstring); one at a
        time."""
        async with self._reconciling:
            await self._reconcile()
            self.on_change()

    def attach(self, *, host_topic: Callable[[str], object], on_change: Callable[[], None],
               progress_of: Callable[[str], tuple[int | None, dict[str, int]]]) -> None:
        """The data path's hooks (``replication.datapath``): see the fields."""
        self.host_topic, self.on_change, self.progress_of = host_topic, on_change, progress_of

    def progress(self, topic: str) -> tuple[int | None, dict[str, int]]:
        """The topic's high watermark as this node knows it, and (on its leader) each
        follower's lag in records; ``(None, {})`` when unknown."""
        return self.progress_of(topic)

    async def _reconcile(self) -> None:
        for topic, view in list(self.view.topics.items()):
            if view.placement is None or self.node not in view.placement.nodes:
                self._set_role(topic, None)
                continue
            self._host(topic)
            state = view.state
            if state is None:
                continue
            lease = self.membership.lease
            if view.leader is None:
                self._set_role(topic, Role(False, "", state.epoch))
                if (self.node in state.isr and lease and not self.membership.fenced()
                        and self.may_lead(topic)):
                    try:
                        await campaign(self.client, topic, node=self.node, lease=lease)
                    except EtcdError as exc:
                        log.warning("replication: topic %s: campaign failed: %s", topic, exc)
                continue
            mark_lease, mark = view.leader
            leading = mark.node == self.node and mark_lease == lease and state.epoch == mark.epoch
            self._set_role(topic, Role(leading, mark.node, mark.epoch))
            if leading:
                gone = [n for n in state.isr if n != self.node and n not in self.view.nodes]
                if gone:
                    await self._shrink(topic, state, gone)

    async def _shrink(self, topic: str, state: TopicState, gone: list[str]) -> None:
        try:
            await change_isr(self.client, topic, leader=self.node, lease=self.membership.lease,
                             epoch=state.epoch, remove=gone)
        except StaleEpoch as exc:
            log.warning("replication: %s", exc)
        except EtcdError as exc:
            log.warning("replication: topic %s: in-sync set not changed: %s", topic, exc)

    def _host(self, topic: str) -> None:
        """A topic placed on this node exists here (made, if it was not, as a PUB would)."""
        try:
            self.host_topic(topic)
        except Exception as exc:  # (the broker exiting, say: nothing to do then)
            log.warning("replication: topic %s not made here: %s", topic, exc)

    def _set_role(self, topic: str, role: Role | None) -> None:
        if self.roles.get(topic) == role:
            return
        if role is None:
            self.roles.pop(topic, None)
            log.info("replication: topic %s is not placed on this node", topic)
            return
        self.roles[topic] = role
        if role.leading:
            log.info("replication: leading topic %s at epoch %d", topic, role.epoch)
        elif role.leader:
            log.info("replication: following topic %s (leader %s, epoch %d)", topic,
                     role.leader, role.epoch)
        else:
            log.info("replication: topic %s has no leader (last epoch %d)", topic, role.epoch)
