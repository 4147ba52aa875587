"""The cluster as this node's watch of ``/nsq/`` shows it: live nodes (with their leases),
and per topic its placement, state and leader key. Built from a range, kept by the watch's
events; values that cannot be read are logged and left out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import attrs

from .etcd import Event, KeyValue
from .keys import NODES, LeaderMark, NodeInfo, Placement, TopicState, parse_topic_key

log = logging.getLogger("nsqd")


@attrs.define
class TopicView:
    placement: Placement | None = None
    state: TopicState | None = None
    #: the etcd revision ``state`` was written at (0 while there is none): what tells an
    #: older state from a newer one
    state_revision: int = 0
    #: the leader key: (its lease, its value), None while the topic has no live leader
    leader: tuple[int, LeaderMark] | None = None


@attrs.define
class ClusterView:
    nodes: dict[str, tuple[int, NodeInfo]] = attrs.field(factory=dict)
    topics: dict[str, TopicView] = attrs.field(factory=dict)
    revision: int = 0

    def load(self, kvs: Iterable[KeyValue], revision: int) -> None:
        """Start again from a range of every key."""
        self.nodes.clear()
        self.topics.clear()
        for kv in kvs:
            self._put(kv)
        self.revision = revision

    def apply(self, events: Iterable[Event], revision: int) -> None:
        for event in events:
            if event.deleted:
                self._delete(event.kv.key)
            else:
                self._put(event.kv)
        self.revision = revision

    def _put(self, kv: KeyValue) -> None:
        try:
            if kv.key.startswith(NODES):
                self.nodes[kv.key[len(NODES):].decode()] = (kv.lease, NodeInfo.decode(kv.value))
                return
            parsed = parse_topic_key(kv.key)
            if parsed is None:
                return
            topic, part = parsed
            view = self.topics.setdefault(topic, TopicView())
            if part == "placement":
                view.placement = Placement.decode(kv.value)
            elif part == "state":
                view.state = TopicState.decode(kv.value)
                view.state_revision = kv.mod_revision
            elif part == "leader":
                view.leader = (kv.lease, LeaderMark.decode(kv.value))
        except (ValueError, KeyError, TypeError) as exc:
            log.error("replication: unreadable value of %r in etcd: %s", kv.key, exc)

    def _delete(self, key: bytes) -> None:
        if key.startswith(NODES):
            self.nodes.pop(key[len(NODES):].decode(), None)
            return
        parsed = parse_topic_key(key)
        if parsed is None or parsed[0] not in self.topics:
            return
        topic, part = parsed
        view = self.topics[topic]
        if part == "placement":
            view.placement = None
        elif part == "state":
            view.state, view.state_revision = None, 0
        elif part == "leader":
            view.leader = None
        if view == TopicView():
            del self.topics[topic]
