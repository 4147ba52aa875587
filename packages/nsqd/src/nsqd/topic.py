"""A topic: it takes published messages and copies each to every one of its channels.

Messages published while the topic has no channel, or is paused, wait in the topic's own
backlog (memory, then disk) and flow to the channels once there are some and it is unpaused:
that is the job of ``run``, the topic's one task (NSQ's topic messagePump). Otherwise a publish
goes straight to the channels. The first channel gets the original message object and every
other channel a copy, so a single-channel topic costs no copies at all; messages published as
records (``put_records``: PUB and MPUB) are immutable and every channel gets the same ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
from nsq_common import is_ephemeral

from .backlog import Backlog, Records, WithBacklog, decode_records
from .channel import Channel

if TYPE_CHECKING:
    from collections.abc import Callable

    from .diskqueue import DiskQueue
    from .message import QueuedMessage

DRAIN_BATCH = 1000


class Topic(WithBacklog):
    def __init__(self, name: str, *, mem_queue_size: int = 10000, disk: DiskQueue | None = None,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.now = clock
        self.channels: dict[str, Channel] = {}
        self.backlog = Backlog(mem_queue_size, disk, self.wake)
        self.paused = False
        self.deleted = False
        # False while nsqd asks the lookupds which channels this new topic has elsewhere.
        self.started = True
        self.message_count = 0
        self.message_bytes = 0
        self.message_ttl = 0  # seconds; messages published without a TTL of their own get it
        self._wake = trio.Event()

    def wake(self) -> None:
        """Something may flow to the channels now (a new channel, an unpause, disk data)."""
        self._wake.set()

    async def put(self, msgs: list[QueuedMessage], *, extended: bool = False) -> None:
        """Publish: straight to the channels, or held in the backlog. ``extended``: some of
        ``msgs`` have an expiry of their own or are jobs.

        Raises:
            DiskQueueError: the messages could not be stored.
        """
        self.message_count += len(msgs)
        self.message_bytes += sum([len(m.body) for m in msgs])
        if self.message_ttl:
            ttl_ns = self.message_ttl * 1_000_000_000
            for msg in msgs:
                if not msg.expires:
                    msg.expires = msg.timestamp + ttl_ns
        if self.message_ttl or extended:
            self.backlog.extended = True
        if self.paused or not self.channels or not self.started:
            await self.backlog.put(msgs)
        else:
            await self._fan_out(msgs)

    async def put_records(self, records: list[bytes]) -> None:
        """Publish new messages as their plain records (``backlog.new_records``), which
        every channel shares; as ``put``.

        Raises:
            DiskQueueError: the messages could not be stored.
        """
        if self.message_ttl:  # each needs its expiry: as messages
            await self.put(decode_records(records))
            return
        self.message_count += len(records)
        self.message_bytes += sum(map(len, records)) - 26 * len(records)
        if self.paused or not self.channels or not self.started:
            await self.backlog.put_records(records)
        else:
            await self._fan_out_records(records)

    def _channels(self) -> list[Channel]:
        channels = list(self.channels.values())
        if self.backlog.extended:  # the channels must look at expiries from now on
            for channel in channels:
                channel.backlog.extended = True
        return channels

    async def _fan_out(self, msgs: list[QueuedMessage]) -> None:
        channels = self._channels()
        now = self.now()
        for channel in channels[1:]:
            await channel.put([m.copy() for m in msgs], now)
        await channels[0].put(msgs, now)

    async def _fan_out_records(self, records: list[bytes]) -> None:
        for channel in self._channels():
            await channel.put_records(records)

    def add_channel(self, channel: Channel) -> None:
        self.channels[channel.name] = channel
        self.wake()

    def _may_flow(self) -> None:
        self.wake()

    def empty(self) -> None:
        """Drop what the topic holds in memory; its disk files are dropped by the caller."""
        self.backlog.clear_memory()
        self.backlog.ack_all()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Move held messages to the channels whenever that becomes possible."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.backlog.run)
            task_status.started()
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                while self.started and not self.paused and self.channels:
                    taken = self.backlog.take_for_delivery(DRAIN_BATCH)
                    if not taken:
                        break
                    if isinstance(taken, Records):
                        await self._fan_out_records(taken)
                    else:
                        await self._fan_out(taken)
                    self.backlog.ack_all()  # the channels hold them now
