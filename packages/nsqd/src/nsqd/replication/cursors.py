"""Channels' cursors shipped from the leader to its followers (docs/design/replication.md,
"What of a channel is replicated"): kind 2 channel records in ``DATA`` (after the
settings of kinds 0 and 1, ``replication.settings``), the payload of a
cursor journal entry (``cursorfile``: mark-delete, acknowledged-ahead ranges, per-message
attempts and due times, so deferred and requeued messages too).

The leader side (``Shipped``, one per follower connection): a durable channel's state is sent
when it differs from what this connection sent last, at most every ``CURSOR_SHIP_INTERVAL``
per topic, and only once the follower holds the records below its mark-delete. The follower
side (``apply_cursor``): the channel made if it is not, its cursor set to the state and
written to its journal (its ``--sync-every`` policy); never one past its log's end.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from .. import cursorfile
from .private import PrivateShipped
from .private import apply_cursor as apply_private_cursor
from .private import apply_records as apply_private_records
from .settings import DELETED, apply_channel, apply_topic, channel_record, durable, topic_record
from .wire import (
    CHANNEL_SETTINGS,
    CURSOR,
    PRIVATE_CURSOR,
    PRIVATE_RECORDS,
    TOPIC_SETTINGS,
    encode_channel_records,
)

if TYPE_CHECKING:
    from ..broker import Broker
    from ..channel import Channel
    from ..topic import Topic
    from .replica import Replica

log = logging.getLogger("nsqd")

#: a channel's cursor is shipped at most this often (seconds): the bound on what a failover
#: delivers again (FINished within it, plus one fetch round trip)
CURSOR_SHIP_INTERVAL = 0.1


class Shipped:
    """What one follower connection was sent of each topic's channels."""

    def __init__(self) -> None:
        self._sent: dict[str, dict[str, bytes]] = {}
        #: the settings records sent, per topic: the topic's under "" (kind 0), then each
        #: channel's (kind 1)
        self._settings: dict[str, dict[str, bytes]] = {}
        self._at: dict[str, float] = {}
        #: the channels' internal logs sent, per topic (``replication.private``)
        self._private: dict[str, PrivateShipped] = {}
        #: the leader's epoch each topic's records were sent at
        self._epochs: dict[str, int] = {}

    async def due(self, topic: Topic, holds: int, now: float, *, epoch: int = 0,
                  budget: int = 1 << 20) -> bytes:
        """Channel records of ``topic`` to send now to a follower holding every record
        below ``holds``; what they say is taken as sent. ``epoch``: the leader's (what was
        sent at another is sent again: the follower may hold another leader's);
        ``budget``: about how many bytes of internal logs' records to send at most. May
        wait for the disk (internal logs' records), never between the look at a channel's
        internal logs and at its cursors (``replication.private``'s order)."""
        name = topic.name
        if now - self._at.get(name, -math.inf) < CURSOR_SHIP_INTERVAL:
            return b""
        if self._epochs.get(name, epoch) != epoch:
            self._forget(name)
        self._epochs[name] = epoch
        private = self._private.setdefault(name, PrivateShipped())
        logs = await private.records(durable(topic), budget)
        sent = self._sent.setdefault(name, {})
        settings = self._settings.setdefault(name, {})
        # (settings first: they make a channel a follower lacks; records before cursors;
        # none of a channel deleted during the wait, after its deletion)
        records = self._settings_due(topic, sent, settings, private)
        records += [record for channel, record in logs
                    if topic.channels.get(channel.name) is channel]
        for cname, channel in topic.channels.items():
            if channel.cursor.journal is None:  # ephemeral: never replicated
                continue
            state = channel.cursor_state()
            if state.mark_delete > holds:
                continue  # (sent once the follower has the records below it)
            private_cursors = private.cursors(channel)
            if private_cursors is None:
                continue  # (sent once every record of its internal logs is)
            records += private_cursors
            payload = cursorfile.encode(state)
            if sent.get(cname) != payload:
                sent[cname] = payload
                records.append((cname, CURSOR, payload))
        if not records:
            return b""
        self._at[name] = now
        return encode_channel_records(records)

    def _forget(self, topic: str) -> None:
        self._sent.pop(topic, None)
        self._settings.pop(topic, None)
        self._private.pop(topic, None)
        self._at.pop(topic, None)

    @staticmethod
    def _settings_due(topic: Topic, sent: dict[str, bytes], settings: dict[str, bytes],
                      private: PrivateShipped) -> list[tuple[str, int, bytes]]:
        """Kind 0 and 1 records that differ from what was sent (``settings``): the
        topic's first, then each durable channel's, and a deleted channel's last record;
        a deleted channel's cursor is forgotten (sent again if it is made again)."""
        records: list[tuple[str, int, bytes]] = []
        record = topic_record(topic)
        if settings.get("") != record:
            settings[""] = record
            records.append(("", TOPIC_SETTINGS, record))
        channels = {c.name: c for c in durable(topic)}
        for name in [n for n in settings if n and n not in channels]:
            del settings[name]
            sent.pop(name, None)
            private.forget(name)
            records.append((name, CHANNEL_SETTINGS, DELETED))
        for name, channel in channels.items():
            record = channel_record(channel)
            if settings.get(name) != record:
                settings[name] = record
                records.append((name, CHANNEL_SETTINGS, record))
        return records


async def cut_back(broker: Broker, replica: Replica) -> None:
    """A follower's log was cut back: no channel's cursor here may count anything at or past
    the log's end as done with. What it fetches there is the leader's, which that cursor
    never saw: a restart after ``kill -9`` counts its log's hole as done
    (``restart.open_cursor``), and the leader's records fetched into those offsets would be
    skipped were this replica to lead before the leader's first cursor reached it. Each
    such cursor is brought back to the end and written to its journal (so that a restart
    does not bring the old one back), as ``apply_cursor`` writes the leader's."""
    end = replica.log.end
    for name, channel in list(replica.topic.channels.items()):
        cursor = channel.cursor
        if cursor.journal is None:
            continue
        state = cursor.state()
        if state.mark_delete <= end and all(stop <= end for _, stop in state.ranges):
            continue
        log.info("replication: topic %s: channel %s: cursor back to %d with the log",
                 replica.topic.name, name, min(state.mark_delete, end))
        await _restore(broker, replica, channel, cursorfile.CursorState(
            min(state.mark_delete, end),
            tuple((start, min(stop, end)) for start, stop in state.ranges if start < end),
            tuple(extra for extra in state.extras if extra[0] < end)))


async def apply_cursor(broker: Broker, replica: Replica, channel_name: str,
                       payload: bytes) -> None:
    """A follower's channel takes the leader's cursor state (made here if it is not)."""
    topic = replica.topic.name
    try:
        state = cursorfile.decode(payload)
    except ValueError as exc:
        log.error("replication: topic %s: channel %s: a cursor not applied - %s", topic,
                  channel_name, exc)
        return
    if replica.leading or state.mark_delete > replica.log.end:
        return
    channel = broker.get_channel(replica.topic, channel_name)
    if channel.cursor.journal is None:
        return
    await _restore(broker, replica, channel, state)


async def _restore(broker: Broker, replica: Replica, channel: Channel,
                   state: cursorfile.CursorState) -> None:
    """``channel``'s cursor set to ``state`` and written to its journal (fsynced under
    ``--sync-every=1``); a journal that cannot be written is logged."""
    cursor = channel.cursor
    cursor.restore(state, replica.log.start)
    try:
        await cursor.flush(channel.cursor_state, sync=broker.opts.sync_every == 1, force=True)
    except OSError as exc:
        log.error("replication: topic %s: channel %s: cursor not written - %s",
                  replica.topic.name, channel.name, exc)


async def apply_record(broker: Broker, replica: Replica, channel_name: str, kind: int,
                       payload: bytes) -> None:
    """A follower takes one channel record of the leader's (kinds 0 to 4).

    Raises:
        wire.WireError: an internal log's records malformed.
        LogError: they could not be stored (``private.apply_records``).
    """
    if kind == TOPIC_SETTINGS:
        apply_topic(broker, replica, payload)
    elif kind == CHANNEL_SETTINGS:
        apply_channel(broker, replica, channel_name, payload)
    elif kind == CURSOR:
        await apply_cursor(broker, replica, channel_name, payload)
    elif kind == PRIVATE_RECORDS:
        await apply_private_records(broker, replica, channel_name, payload)
    elif kind == PRIVATE_CURSOR:
        await apply_private_cursor(broker, replica, channel_name, payload)
