"""The replication keys in etcd and their values (docs/design/replication.md, "The keys").

::

    /nsq/nodes/<node>                 leased (the node's)    NodeInfo
    /nsq/topics/<topic>/placement     -                      Placement
    /nsq/topics/<topic>/state         -                      TopicState
    /nsq/topics/<topic>/leader        leased (the leader's)  LeaderMark

Values are compact JSON; a value that cannot be read is treated as absent (and logged by
whoever reads it), never as a crash.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

ROOT = b"/nsq/"
NODES = ROOT + b"nodes/"
TOPICS = ROOT + b"topics/"


def node_key(node: str) -> bytes:
    return NODES + node.encode()


def topic_prefix(topic: str) -> bytes:
    return TOPICS + topic.encode() + b"/"


def placement_key(topic: str) -> bytes:
    return topic_prefix(topic) + b"placement"


def state_key(topic: str) -> bytes:
    return topic_prefix(topic) + b"state"


def leader_key(topic: str) -> bytes:
    return topic_prefix(topic) + b"leader"


def parse_topic_key(key: bytes) -> tuple[str, str] | None:
    """``(topic, part)`` of a key under TOPICS (part: placement, state, leader), else None."""
    if not key.startswith(TOPICS):
        return None
    topic, sep, part = key[len(TOPICS):].decode("utf-8", "replace").rpartition("/")
    return (topic, part) if sep and topic else None


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _load(data: bytes) -> dict[str, Any]:
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError("not an object")
    return value


@attrs.frozen
class NodeInfo:
    """A live node, as its node key says."""

    node: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str = ""
    #: the port of its lmstfy data API (0: none; absent from the value then, and in the
    #: values of nodes that predate it)
    lmstfy_port: int = 0

    def encode(self) -> bytes:
        value = attrs.asdict(self)
        if not self.lmstfy_port:
            del value["lmstfy_port"]
        return _dump(value)

    @classmethod
    def decode(cls, data: bytes) -> NodeInfo:
        v = _load(data)
        return cls(str(v["node"]), str(v["broadcast_address"]), int(v["tcp_port"]),
                   int(v["http_port"]), str(v.get("version", "")),
                   int(v.get("lmstfy_port", 0)))


@attrs.frozen
class Placement:
    """Where a topic lives: ``replicas`` wanted, on ``nodes``."""

    replicas: int
    nodes: tuple[str, ...]

    def encode(self) -> bytes:
        return _dump({"replicas": self.replicas, "nodes": list(self.nodes)})

    @classmethod
    def decode(cls, data: bytes) -> Placement:
        v = _load(data)
        return cls(int(v["replicas"]), tuple(str(n) for n in v["nodes"]))


@attrs.frozen
class TopicState:
    """Who leads a topic at which epoch, and which replicas are in sync."""

    leader: str
    epoch: int
    isr: tuple[str, ...]

    def encode(self) -> bytes:
        return _dump({"leader": self.leader, "epoch": self.epoch, "isr": list(self.isr)})

    @classmethod
    def decode(cls, data: bytes) -> TopicState:
        v = _load(data)
        return cls(str(v["leader"]), int(v["epoch"]), tuple(str(n) for n in v["isr"]))


@attrs.frozen
class LeaderMark:
    """The leased key that exists while a topic's leader is alive."""

    node: str
    epoch: int

    def encode(self) -> bytes:
        return _dump({"node": self.node, "epoch": self.epoch})

    @classmethod
    def decode(cls, data: bytes) -> LeaderMark:
        v = _load(data)
        return cls(str(v["node"]), int(v["epoch"]))
