"""A durable channel's internal logs, its dead letters and its own queue (``privatelog``),
shipped from the leader to its followers (docs/design/replication.md, "What of a channel is
replicated"): channel records in ``DATA`` of kind 3 (records of one of the logs, at the
leader's offsets) and kind 4 (that log's cursor: a cursor journal entry's payload).

Payloads, after ``u8 log`` (``DEAD`` 0, ``OWN`` 1):

- kind 3: ``u64 from | u64 next | the batches`` (``wire.encode_batches``). The follower cuts
  its copy back to ``from`` when it holds more, appends the batches at their offsets and moves
  its end on to ``next`` (offsets between hold no record). A connection's first records of a
  log start at the leader's mark-delete position (what the follower held past it may be
  another leader's, or its own); those after go on from where the last ones ended. A log the
  leader does not have is sent once per connection as ``from = next = 0`` with no batch: a
  follower that has one empties it.
- kind 4: the cursor journal entry (mark-delete, acknowledged ranges); the follower's copy
  of the log takes it (``Cursor.restore``) and writes it to its journal.

Order is what makes a failover lose nothing. A message becomes a dead letter by being written
to the dead letters before it is acknowledged on the channel's cursor; a dead letter
respawned is written to the own queue before it is acknowledged on the dead letters. So the
leader sends a channel's cursors (kind 2, and kind 4 of both logs) only when every record its
two logs held at that moment has been sent on this connection (in this ``DATA`` or before),
and the follower applies a ``DATA``'s records before its cursors: a follower's cursor never
says a message is done with while it lacks the dead letter (or own-queue record) it became.
What is written after is sent with the next records, the cursors after it.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

import attrs

from .. import cursorfile
from ..cursorfile import CursorState
from ..errors import LogError
from . import wire
from .wire import PRIVATE_CURSOR, PRIVATE_RECORDS

if TYPE_CHECKING:
    from ..broker import Broker
    from ..channel import Channel
    from ..privatelog import PrivateLog
    from .replica import Replica

log = logging.getLogger("nsqd")

#: the two internal logs of a channel, as kinds 3 and 4 name them
DEAD, OWN = 0, 1
_NAMES = ("dead letters", "own queue")
#: records read per log per answer at most
MAX_RECORDS = 1 << 14

_LOG = struct.Struct(">B")
_RANGE = struct.Struct(">BQQ")

Record = tuple[str, int, bytes]


def private_log(channel: Channel, which: int) -> PrivateLog | None:
    """The channel's internal log ``which``, if it has one (on disk: durable channels)."""
    if which == DEAD:
        dead = channel.dead_letters_if_any
        return dead.backlog.disk if dead is not None else None
    own = channel.own
    return own.disk if own is not None else None


def _made(channel: Channel, which: int) -> PrivateLog | None:
    """The channel's internal log ``which``, made (with its task) if it was not."""
    if which == DEAD:
        return channel.dead_letters.backlog.disk
    return channel.own_queue.disk


@attrs.frozen
class _Sent:
    """What one connection was sent of one internal log: the log (a channel made again has
    new ones) and where the next records start."""

    log: PrivateLog | None
    next: int
    cursor: bytes = b""


class PrivateShipped:
    """What one follower connection was sent of one topic's channels' internal logs."""

    def __init__(self) -> None:
        self._sent: dict[tuple[str, int], _Sent] = {}

    def forget(self, channel: str) -> None:
        """The channel is deleted: a channel made again with its name starts afresh."""
        for which in (DEAD, OWN):
            self._sent.pop((channel, which), None)

    async def records(self, channels: list[Channel], budget: int
                      ) -> list[tuple[Channel, Record]]:
        """Kind 3 records of ``channels``' internal logs not sent yet, each with its
        channel, up to about ``budget`` bytes of records (what is over waits for the next
        ship); what they hold is taken as sent. May wait for the disk."""
        out: list[tuple[Channel, Record]] = []
        for channel in channels:
            for which in (DEAD, OWN):
                key = (channel.name, which)
                private = private_log(channel, which)
                sent = self._sent.get(key)
                if private is None:
                    if sent is None or sent.log is not None:
                        self._sent[key] = _Sent(None, 0)
                        out.append((channel, (channel.name, PRIVATE_RECORDS,
                                              _RANGE.pack(which, 0, 0))))
                    continue
                plog = private.log
                first = sent is None or sent.log is not private
                start = (max(plog.start, private.cursor.mark_delete) if first or sent is None
                         else sent.next)
                end = plog.end
                if (start >= end and not first) or budget <= 0:
                    continue
                runs: list[tuple[int, list[bytes]]] = []
                if start < end:
                    try:
                        read = await plog.read_at(start, MAX_RECORDS, max(budget, 1))
                    except LogError as exc:  # (closed: its channel deleted; or unreadable)
                        log.info("replication: %s: %s not read - %s", channel.name,
                                 _NAMES[which], exc)
                        continue
                    runs = wire.within_budget(read, budget)
                if self._sent.get(key) is not sent:  # (the channel deleted meanwhile)
                    continue
                # (nothing stored from ``start`` to ``end``: a gap, passed)
                after = runs[-1][0] + len(runs[-1][1]) if runs else end
                self._sent[key] = _Sent(private, after, b"" if first or sent is None
                                        else sent.cursor)
                budget -= sum(len(r) + 4 for _, records in runs for r in records)
                out.append((channel, (channel.name, PRIVATE_RECORDS,
                                      _RANGE.pack(which, start, after)
                                      + wire.encode_batches(runs))))
        return out

    def cursors(self, channel: Channel) -> list[Record] | None:
        """Kind 4 records of the channel's internal logs' cursors that changed since they
        were sent; None when some record of either log is not sent yet (then neither these
        nor the channel's own cursor may go: ``replication.private``'s order)."""
        out: list[Record] = []
        for which in (DEAD, OWN):
            private = private_log(channel, which)
            if private is None:
                continue
            sent = self._sent.get((channel.name, which))
            if sent is None or sent.log is not private or sent.next < private.log.end:
                return None
            payload = cursorfile.encode(private.cursor.state())
            if payload != sent.cursor:
                self._sent[(channel.name, which)] = attrs.evolve(sent, cursor=payload)
                out.append((channel.name, PRIVATE_CURSOR, _LOG.pack(which) + payload))
        return out


# -- the follower ------------------------------------------------------------------------------
async def apply_records(broker: Broker, replica: Replica, channel_name: str,
                        payload: bytes) -> None:
    """A follower's copy of a channel's internal log takes the leader's records (kind 3).

    Raises:
        wire.WireError: the payload is malformed.
        LogError: they could not be stored (the connection ends: the next one sends every
            record again, before any cursor).
    """
    if len(payload) < _RANGE.size:
        raise wire.WireError("a private log's records cut short")
    which, start, after = _RANGE.unpack_from(payload)
    batches = wire.decode_batches(payload[_RANGE.size:])
    if which not in (DEAD, OWN):
        raise wire.WireError(f"an internal log {which} not known")
    if replica.leading:
        return
    channel = broker.get_channel(replica.topic, channel_name)
    if channel.cursor.journal is None:
        return  # (ephemeral: never replicated)
    empty = not batches and after == 0
    private = private_log(channel, which) if empty else _made(channel, which)
    if private is None:
        return
    plog = private.log
    if plog.end > start:
        # what it held from ``start`` on is not done with here until the leader's cursor
        # (after the records) says so: those offsets may hold other records now
        state = private.cursor.state()
        if state.mark_delete > start or (state.ranges and state.ranges[-1][1] > start):
            ranges = tuple((first, min(end, start)) for first, end in state.ranges
                           if first < start)
            private.cursor.restore(CursorState(min(state.mark_delete, start), ranges),
                                   plog.start)
        await plog.truncate(start)
    for base, records in batches:
        await plog.append_at(base, records)
    plog.skip_to(after)


async def apply_cursor(broker: Broker, replica: Replica, channel_name: str,
                       payload: bytes) -> None:
    """A follower's copy of a channel's internal log takes the leader's cursor (kind 4)."""
    topic = replica.topic.name
    try:
        (which,) = _LOG.unpack_from(payload)
        state = cursorfile.decode(payload[_LOG.size:])
    except (struct.error, ValueError) as exc:
        log.error("replication: topic %s: channel %s: a private cursor not applied - %s",
                  topic, channel_name, exc)
        return
    channel = replica.topic.channels.get(channel_name)
    if replica.leading or channel is None or which not in (DEAD, OWN):
        return
    private = private_log(channel, which)
    if private is None or state.mark_delete > private.log.end:
        return
    private.cursor.restore(state, private.log.start)
    private.log.poke()  # (segments below it may go)
    try:
        await private.cursor.flush(sync=broker.opts.sync_every == 1, force=True)
    except OSError as exc:
        log.error("replication: topic %s: channel %s: the %s' cursor not written - %s", topic,
                  channel_name, _NAMES[which], exc)
