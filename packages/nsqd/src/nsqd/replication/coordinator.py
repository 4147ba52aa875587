"""The coordination task an nsqd with ``--etcd-endpoints`` runs (docs/design/replication.md).

Task tree::

    Coordinator.run
    ├── membership: join (lease + node key), keep-alive, the fence
    ├── watch: a range of /nsq/, then its changes; after each, ``reconcile``
    └── after each change of the membership (a new lease, etcd back), ``reconcile``

``reconcile`` acts for the topics placed on this node: the local copy of a topic placed
here is made, and removed when a placement no longer holds this node (``_hold``); a topic
without a leader key whose ISR holds this node is campaigned for (one transaction; losing is
fine, the winner's state comes through the watch); a topic this node leads has any ISR member
whose node key is gone shrunk out. Each role change is logged (``leading topic T at epoch E``,
``following topic T``), and ``roles`` says what this node is for each of its topics.

The leader also changes where its topics live (``nsqd.replication.replace``): ``resize`` for
``/topic/replicas``, and once a second a replica whose node key has been gone for
``down_timeout`` (as this node saw it go) is placed on another live node.

``describe`` is a topic's ``replication`` object of ``/stats``; ``isr_changes`` counts the
ISR changes this node made, for ``/metrics``. ISR changes this node made, for ``/metrics``.

A topic placed on this node is made here (``host_topic``); after each reconcile the data
path (``replication.datapath``: fetching, the high watermark, acknowledgements) follows
``roles`` (``on_change``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio

from ..clock import Clock, SystemClock
from .election import StaleEpoch, campaign, change_isr_at
from .epochs import NAME as EPOCHS_FILE
from .etcd import EtcdClient, EtcdError
from .keys import ROOT, NodeInfo, TopicState
from .membership import RETRY, Membership
from .placement import PlacementError, place
from .replace import delete_keys, re_place, replaced, resized
from .view import ClusterView, TopicView

log = logging.getLogger("nsqd")


@attrs.frozen
class Role:
    """What this node is for one topic: its leader at ``epoch``, or a follower of ``leader``
    (empty while the topic has none)."""

    leading: bool
    leader: str
    epoch: int


class LocalTopics(Protocol):
    """The node's own topics (``nsqd.broker.Broker`` is one): what a placement makes and
    removes."""

    @property
    def topics(self) -> Mapping[str, object]: ...

    def get_topic(self, name: str) -> object: ...

    def delete_topic(self, name: str) -> bool: ...

    def topic_directory(self, name: str) -> Path: ...


#: seconds between the leader's looks for replicas gone past ``down_timeout``
REPLACE_CHECK = 1.0


@attrs.define(eq=False)
class Coordinator:
    endpoints: Sequence[str]
    info: NodeInfo
    clock: Clock = attrs.field(factory=SystemClock)
    #: whether this node may campaign for a topic (the data path: not RECOVERING)
    may_lead: Callable[[str], bool] = lambda topic: True
    view: ClusterView = attrs.field(factory=ClusterView)
    roles: dict[str, Role] = attrs.field(factory=dict)
    #: the topics of this node, made and removed as placements say (None: left alone)
    local: LocalTopics | None = None
    #: seconds a replica's node may be gone before the leader places it elsewhere
    down_timeout: float = 300.0
    #: ISR changes this node made as leader, per topic: removals and additions
    isr_shrinks: Counter[str] = attrs.field(factory=Counter)
    isr_expansions: Counter[str] = attrs.field(factory=Counter)
    #: nodes of placements this node leads whose key is gone: since when (the clock's now)
    _gone_since: dict[str, float] = attrs.field(init=False, factory=dict)
    #: local topics named as placed ones that never were replicas here (warned about once)
    _kept: set[str] = attrs.field(init=False, factory=set)
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
    #: set (and replaced) after each reconcile: what waits for the view and roles to move
    reconciled: trio.Event = attrs.field(init=False, factory=trio.Event)

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
                nursery.start_soon(self._replace_lost)
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

    async def resize(self, topic: str, replicas: int) -> None:
        """As ``topic``'s leader, give it ``replicas`` replicas (transaction 5).

        Raises:
            StaleEpoch: this node does not lead the topic (any more).
            PlacementError: a bad count, or more than the live nodes.
            EtcdError, EtcdUnavailable.
        """
        role = self.roles.get(topic)
        if role is None or not role.leading:
            raise StaleEpoch(topic, role.epoch if role else 0, None)
        await re_place(self.client, topic, resized(replicas), leader=self.node,
                       lease=self.membership.lease, epoch=role.epoch)

    async def delete(self, topic: str) -> None:
        """As ``topic``'s leader, delete it: its local copy, then its keys (the other replicas
        delete theirs when the watch shows the keys gone). One reconcile at a time: none makes
        the copy again in between.

        Raises:
            StaleEpoch: this node does not lead the topic (any more).
            EtcdError, EtcdUnavailable (the local copy is deleted: a placement still seen
            makes it again, empty, and a /topic/delete sent again finishes it).
        """
        async with self._reconciling:
            role = self.roles.get(topic)
            if role is None or not role.leading:
                raise StaleEpoch(topic, role.epoch if role else 0, None)
            if self.local is not None:
                self.local.delete_topic(topic)
            await delete_keys(self.client, topic, leader=self.node,
                              lease=self.membership.lease, epoch=role.epoch)

    def describe(self, topic: str) -> dict[str, Any] | None:
        """``topic``'s ``replication`` object of /stats (None: not placed), from the view, so
        the same on every replica: the leader (null while it has none), its epoch, the
        replicas, the ISR, and ``progress``'s HW and lag."""
        view = self.view.topics.get(topic)
        if view is None or view.placement is None or view.state is None:
            return None
        hw, lag = self.progress(topic)
        leader = view.leader[1].node if view.leader is not None else None
        return {"leader": leader, "epoch": view.state.epoch,
                "replicas": list(view.placement.nodes), "isr": list(view.state.isr),
                "high_watermark": hw, "lag": lag}

    def isr_changes(self, topic: str) -> tuple[int, int]:
        """Removals from and additions to ``topic``'s ISR this node made as its leader."""
        return self.isr_shrinks[topic], self.isr_expansions[topic]

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
            self.reconciled.set()
            self.reconciled = trio.Event()

    def attach(self, *, host_topic: Callable[[str], object], on_change: Callable[[], None],
               progress_of: Callable[[str], tuple[int | None, dict[str, int]]],
               may_lead: Callable[[str], bool] | None = None) -> None:
        """The data path's hooks (``replication.datapath``): see the fields."""
        self.host_topic, self.on_change, self.progress_of = host_topic, on_change, progress_of
        if may_lead is not None:
            self.may_lead = may_lead

    def progress(self, topic: str) -> tuple[int | None, dict[str, int]]:
        """The topic's high watermark as this node knows it, and (on its leader) each
        follower's lag in records; ``(None, {})`` when unknown."""
        return self.progress_of(topic)

    async def _reconcile(self) -> None:
        for topic in [t for t in self.roles if t not in self.view.topics]:  # keys deleted
            self._hold(topic, None)
            self._set_role(topic, None)
        for topic, view in list(self.view.topics.items()):
            self._hold(topic, view)
            if view.placement is None or self.node not in view.placement.nodes:
                self._set_role(topic, None)
                continue
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
                    await self.change_isr(topic, state, remove=gone)
        self._note_gone()

    def _hold(self, topic: str, view: TopicView | None) -> None:
        """The local copy of ``topic`` as its placement says: made when this node holds a
        replica (``_host``); removed when a placement without this node is seen, or the
        topic's keys are gone, after this node held it as a replica (in this run, or in an
        earlier one: its epochs file). A local topic of the same name that never was a
        replica here is kept (its messages are not the placed topic's), with a warning."""
        placement = view.placement if view is not None else None
        if placement is not None and self.node in placement.nodes:
            self._host(topic)
            return
        local = self.local
        if local is None or topic not in local.topics:
            return
        if topic in self.roles or (local.topic_directory(topic) / EPOCHS_FILE).exists():
            log.info("replication: topic %s is not placed on this node: deleting its local "
                     "copy", topic)
            local.delete_topic(topic)
        elif placement is not None and topic not in self._kept:
            self._kept.add(topic)
            log.warning("replication: topic %s is placed on other nodes; the local topic of "
                        "that name was never a replica here and is kept", topic)

    async def change_isr(self, topic: str, state: TopicState, *, add: Sequence[str] = (),
                         remove: Sequence[str] = ()) -> tuple[TopicState, int] | None:
        """As ``topic``'s leader at ``state``, add and remove in-sync replicas (transaction
        4), counted for /metrics; the state written and its revision, None when refused or
        not answered (logged: it may have been written all the same)."""
        try:
            changed, revision = await change_isr_at(
                self.client, topic, leader=self.node, lease=self.membership.lease,
                epoch=state.epoch, add=add, remove=remove)
        except StaleEpoch as exc:
            log.warning("replication: %s", exc)
            return None
        except EtcdError as exc:
            log.warning("replication: topic %s: in-sync set not changed: %s", topic, exc)
            return None
        self.isr_shrinks[topic] += len(set(state.isr) - set(changed.isr))
        self.isr_expansions[topic] += len(set(changed.isr) - set(state.isr))
        return changed, revision

    def _note_gone(self) -> None:
        """Since when each node of a placement this node leads has had no node key."""
        now = self.clock.now()
        gone = {n for topic, role in self.roles.items() if role.leading
                for n in self._placed(topic) if n not in self.view.nodes}
        for node in list(self._gone_since):
            if node not in gone:
                del self._gone_since[node]
        for node in gone:
            self._gone_since.setdefault(node, now)

    def _placed(self, topic: str) -> tuple[str, ...]:
        view = self.view.topics.get(topic)
        return view.placement.nodes if view is not None and view.placement is not None else ()

    async def _replace_lost(self) -> None:
        """Once a second: the replicas of topics this node leads whose node has been gone
        for ``down_timeout`` placed on other live nodes (when there are any)."""
        while True:
            await trio.sleep(REPLACE_CHECK)
            async with self._reconciling:
                now = self.clock.now()
                lost = {n for n, since in self._gone_since.items()
                        if now - since >= self.down_timeout}
                for topic, role in list(self.roles.items()):
                    if role.leading and lost & set(self._placed(topic)):
                        await self._re_place(topic, role, lost)

    async def _re_place(self, topic: str, role: Role, lost: set[str]) -> None:
        try:
            await re_place(self.client, topic, replaced(lost), leader=self.node,
                           lease=self.membership.lease, epoch=role.epoch)
        except StaleEpoch as exc:
            log.warning("replication: %s", exc)
        except (PlacementError, EtcdError) as exc:
            log.warning("replication: topic %s: lost replicas not placed again: %s", topic,
                        exc)

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
