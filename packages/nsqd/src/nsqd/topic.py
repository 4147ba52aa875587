"""A topic: its log, and its channels, each a cursor into the log (docs/design/storage.md).

Publishing appends to the log once, whatever the number of channels, and tells each channel
how many new messages it has. A topic with no channel holds what is published from ``hold``
for its first channel, as NSQ's topic queue does; a paused topic holds what is published from
``paused_at``: its channels read no further (``visible_end``) until it is unpaused.

The topic's task runs its log's (disk reads, fsyncs, removing segments) and persists its
channels' cursors: every ``--sync-timeout``, and as soon as one has ``--sync-every`` changes
not persisted (fsynced then, with ``--sync-every=1``).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Protocol

import trio
from nsq_common import is_ephemeral

from .record import HEADER_SIZE, Records, decode_record, encode_record, encode_records

if TYPE_CHECKING:
    from .channel import Channel
    from .clock import Clock
    from .message import QueuedMessage
    from .topiclog import TopicLog

log = logging.getLogger("nsqd")


class Replica(Protocol):
    """A topic placed on several nodes, as the topic, its publishers and readers see it
    (``replication.replica.Replica``: only with --etcd-endpoints)."""

    leading: bool
    hw: int

    @property
    def deliver_end(self) -> int: ...

    @property
    def delivering(self) -> bool: ...

    def check_publish(self) -> None: ...

    def published(self) -> None: ...

    async def committed(self, end: int) -> None: ...

    async def forward(self, msgs: list[QueuedMessage] | Records) -> None: ...


#: Where a new channel's cursor starts (``POST /channel/create?start=``).
STARTS = ("earliest", "latest")


class Topic:
    def __init__(self, name: str, log: TopicLog, *, clock: Clock, sync_every: int = 2500,
                 sync_timeout: float = 2.0) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.log = log
        self.clock = clock
        self.sync_every = sync_every
        self.sync_timeout = sync_timeout
        self.channels: dict[str, Channel] = {}
        self.paused = False
        self.paused_at = 0
        self.deleted = False
        # False while nsqd asks the lookupds which channels this new topic has elsewhere: what
        # is published meanwhile is held (from ``_held_from``) for every channel they name.
        self.started = True
        self._held_from = 0
        self.message_count = 0
        self.message_bytes = 0
        self.message_ttl = 0  # seconds; messages published without a TTL of their own get it
        #: a topic placed on several nodes (--etcd-endpoints): its role and high watermark
        self.replica: Replica | None = None
        self._persist_now = trio.Event()
        log.needed = self.needed
        log.on_readable = self._readable

    def configure(self, *, message_ttl: int | None = None, retention_ns: int | None = None,
                  retention_bytes: int | None = None) -> bool:
        """Set the topic's settings given (None: as it is): its default message TTL (seconds)
        and its log's retention; whether any changed."""
        changed = message_ttl is not None and message_ttl != self.message_ttl
        if message_ttl is not None:
            self.message_ttl = message_ttl
        return self.log.retain(retention_ns, retention_bytes) or changed

    def replicate(self, replica: Replica | None) -> None:
        """Placed on several nodes (``replication.replica``), or no longer."""
        self.replica = replica

    def mark_deleted(self) -> None:
        """Deleted: whatever still holds it (a channel's last client) leaves it alone."""
        self.deleted = True

    # -- positions ---------------------------------------------------------------------------
    @property
    def hold(self) -> int:
        """Without channels: the offset the first channel starts at (what the topic holds).
        The log keeps it, in its ``offsets`` file (``TopicLog.hold``, ``hold_from``)."""
        return self.log.hold

    @property
    def visible_end(self) -> int:
        """How far the channels may read: the log's end, or where the topic was paused (or
        began, while it is not started); a replicated topic's, no further than what it may
        deliver (its high watermark while it leads, nothing while it follows)."""
        if not self.started:
            return self._held_from
        end = self.paused_at if self.paused else self.log.end
        replica = self.replica
        return end if replica is None else min(end, replica.deliver_end)

    @property
    def delivers_own(self) -> bool:
        """Whether its channels may deliver what they hold apart from the log (their own
        queues): always, but a replicated topic's only while it leads (a follower's are
        copies of its leader's: docs/design/replication.md)."""
        replica = self.replica
        return replica is None or replica.delivering

    def hold_until_started(self) -> None:
        """Hold what is published until ``start`` (the lookupds are asked for channels)."""
        self.started = False
        self._held_from = self.log.end

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        held = self.visible_end - self._held_from
        for channel in self.channels.values():
            channel.published(held)

    def needed(self) -> int:
        """The lowest offset some channel (or the topic's hold) still needs."""
        channels = self.channels
        if not channels:
            return min(self.hold, self.log.end)
        return min(c.cursor.mark_delete for c in channels.values())

    @property
    def depth(self) -> int:
        """Messages the topic holds (NSQ's topic depth): for its first channel, or what its
        channels may not read yet (``visible_end`` on: while paused or not started), so a
        message is counted at the topic or at a channel at every moment, as in Go's nsqd."""
        end = self.log.end
        if not self.channels:
            start = max(self.hold, self.log.start)
            return max(end - start - self.log.hole_in(start, end), 0)
        return end - self.visible_end

    @property
    def backend_depth(self) -> int:
        start = max(self.hold, self.log.start) if not self.channels else self.visible_end
        return max(min(self.log.written_end, self.log.end) - start, 0)

    def start_position(self, start: str | None) -> int:
        """Where a new channel's cursor starts: ``earliest`` (everything the log still
        holds), ``latest`` (what comes next), or, by default, as NSQ: what the topic holds
        for its first channel, or what comes next (held back while paused)."""
        if start == "earliest":
            return self.log.start
        if start == "latest":
            return self.log.end
        if not self.channels:
            return max(self.hold, self.log.start)
        return self.visible_end

    # -- publishing --------------------------------------------------------------------------
    async def put_records(self, records: Records) -> None:
        """Publish new messages as their plain records (``record.new_records``).

        Raises:
            LogError: the messages could not be stored.
        """
        if self.message_ttl:  # each needs its expiry: as messages
            from .record import decode_records

            await self.put(decode_records(records))
            return
        await self.log.append(records, plain=True)
        self._published(len(records), sum(map(len, records)) - HEADER_SIZE * len(records))

    async def put(self, msgs: list[QueuedMessage]) -> None:
        """Publish messages that need our extension (an expiry, a due time, a job's fields)
        or are plain but made as messages.

        Raises:
            LogError: the messages could not be stored.
        """
        if self.message_ttl:
            ttl_ns = self.message_ttl * 1_000_000_000
            for msg in msgs:
                if not msg.expires:
                    msg.expires = msg.timestamp + ttl_ns
        first = await self.log.append(encode_records(msgs),
                                      plain=not any(m.extended for m in msgs))
        wall = self.clock.wall_ns()
        deferred = [(first + i, msg) for i, msg in enumerate(msgs) if msg.due > wall]
        self._published(len(msgs), sum(len(m.body) for m in msgs), deferred)

    def _published(self, count: int, nbytes: int,
                   deferred: list[tuple[int, QueuedMessage]] | None = None) -> None:
        self.message_count += count
        self.message_bytes += nbytes
        if self.paused or not self.started:
            return
        for channel in self.channels.values():
            if deferred:  # each channel its own copies (its own attempts)
                channel.published(count, [_copy(msg, offset) for offset, msg in deferred])
            else:
                channel.published(count)

    def _readable(self) -> None:
        """The log read from disk what some channel asked for."""
        for channel in self.channels.values():
            channel.changed()

    # -- channels ----------------------------------------------------------------------------
    def add_channel(self, channel: Channel) -> None:
        if not self.channels:
            # (not what the cursor passes over: a crash's gap, what was done with ahead)
            channel.counted(max(channel.cursor.unread(self.visible_end), 0))
        self.channels[channel.name] = channel
        channel.changed()

    def remove_channel(self, name: str) -> Channel:
        channel = self.channels.pop(name)
        if not self.channels:
            self.log.hold_from(self.log.end)  # from now on, held for the next first channel
        self.log.poke()
        return channel

    def pause(self, at: int | None = None) -> None:
        """Hold what is published from now on (``at``: from that offset, as nsqd.dat says)."""
        if not self.paused:
            self.paused_at = self.log.end if at is None else at
            self.paused = True

    def unpause(self) -> None:
        if not self.paused:
            return
        held = self.log.end - self.paused_at
        self.paused = False
        for channel in self.channels.values():
            channel.published(held)

    def empty(self) -> None:
        """Drop what the topic holds (NSQ's topic empty): for its first channel, or
        published while it was paused."""
        end = self.log.end
        if not self.channels:
            self.log.hold_from(end)
        elif self.paused:
            for channel in self.channels.values():
                channel.skip(self.paused_at, end)
            self.paused_at = end
        self.log.poke()

    # -- the task ----------------------------------------------------------------------------
    def persist_soon(self) -> None:
        """A cursor has ``--sync-every`` changes not persisted."""
        self._persist_now.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.log.run)
            task_status.started()
            while True:
                with trio.move_on_after(self.sync_timeout):
                    await self._persist_now.wait()
                self._persist_now = trio.Event()
                await self.persist_cursors()

    async def persist_cursors(self, *, in_flight: bool = False) -> None:
        """Write every durable channel's cursor that changed (fsynced with --sync-every=1);
        ``in_flight``: with the attempts of every message in flight (a clean shutdown)."""
        sync = self.sync_every == 1
        for channel in list(self.channels.values()):
            cursor = channel.cursor
            if cursor.journal is None or (not cursor.dirty and not in_flight):
                continue
            try:
                await cursor.flush(partial(channel.cursor_state, in_flight=in_flight),
                                   sync=sync, force=in_flight)
            except OSError as exc:
                log.error("TOPIC(%s): channel(%s): failed to persist its cursor - %s",
                          self.name, channel.name, exc)


def _copy(msg: QueuedMessage, offset: int) -> QueuedMessage:
    """A fresh copy of a message just published, at ``offset``, for one channel."""
    return decode_record(encode_record(msg), offset)
