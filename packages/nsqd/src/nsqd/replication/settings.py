"""A replicated topic's settings and its channels' existence and settings, shipped from the
leader to its followers (docs/design/replication.md, "What of a channel is replicated"):
channel records of kind 0 (the topic: paused, retention, retention bytes, message TTL, and
the names of its durable channels) and kind 1 (a channel: deleted or not, paused,
``max_attempts``, ``dead_letter_expired``, lmstfy's ready list), JSON.

The leader sends them (``Shipped.due`` in ``cursors``) on a connection's first fetch and when
they differ from what that connection sent; the follower (``apply_topic``,
``apply_channel``) makes, configures, pauses and deletes as they say, and lists them in its
nsqd.dat, so a new leader has them after a failover. Ephemeral channels are never
replicated: neither sent nor deleted by a topic record.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..broker import Broker
    from ..channel import Channel
    from ..topic import Topic
    from .replica import Replica

log = logging.getLogger("nsqd")

#: a channel's kind 1 record once it is deleted
DELETED = b'{"deleted":true}'


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def durable(topic: Topic) -> list[Channel]:
    return [c for c in topic.channels.values() if not c.ephemeral]


def topic_record(topic: Topic) -> bytes:
    log_ = topic.log
    return _dump({"paused": topic.paused, "retention_ns": log_.retention_ns,
                  "retention_bytes": log_.retention_bytes, "message_ttl": topic.message_ttl,
                  "channels": sorted(c.name for c in durable(topic))})


def channel_record(channel: Channel) -> bytes:
    return _dump({"deleted": False, "paused": channel.paused,
                  "max_attempts": channel.max_attempts,
                  "dead_letter_expired": channel.dead_letter_expired,
                  "requeue_behind": channel.requeue_behind})


def _load(what: str, payload: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(payload)
        if not isinstance(value, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        log.error("replication: %s: settings not applied - %s", what, exc)
        return None
    return value


def apply_topic(broker: Broker, replica: Replica, payload: bytes) -> None:
    """A follower's topic takes the leader's settings; its durable channels the leader does
    not have are deleted."""
    topic = replica.topic
    value = _load(f"topic {topic.name}", payload)
    if value is None or replica.leading or topic.deleted:
        return
    try:
        changed = topic.configure(message_ttl=int(value["message_ttl"]),
                                  retention_ns=int(value["retention_ns"]),
                                  retention_bytes=int(value["retention_bytes"]))
        paused, names = bool(value["paused"]), set(value["channels"])
    except (KeyError, TypeError, ValueError) as exc:
        log.error("replication: topic %s: settings not applied - %s", topic.name, exc)
        return
    if paused != topic.paused:
        topic.pause() if paused else topic.unpause()
        changed = True
    for channel in durable(topic):
        if channel.name not in names:
            broker.delete_channel(topic, channel.name)
    if changed:
        broker.metadata_changed()
        topic.log.poke()


def apply_channel(broker: Broker, replica: Replica, name: str, payload: bytes) -> None:
    """A follower's channel made, configured, paused or deleted as the leader's is."""
    topic = replica.topic
    value = _load(f"topic {topic.name}: channel {name}", payload)
    if value is None or replica.leading or topic.deleted:
        return
    if value.get("deleted"):
        channel = topic.channels.get(name)
        if channel is not None and not channel.ephemeral:
            broker.delete_channel(topic, name)
        return
    made = name not in topic.channels
    channel = broker.get_channel(topic, name)
    if channel.ephemeral:
        return
    try:
        changed = channel.configure(max_attempts=int(value["max_attempts"]),
                                    dead_letter_expired=bool(value["dead_letter_expired"]),
                                    requeue_behind=bool(value["requeue_behind"]))
        paused = bool(value["paused"])
    except (KeyError, TypeError, ValueError) as exc:
        log.error("replication: topic %s: channel %s: settings not applied - %s", topic.name,
                  name, exc)
        return
    if paused != channel.paused:
        channel.pause() if paused else channel.unpause()
        changed = True
    if changed or made:
        broker.metadata_changed()
