"""A topic: it takes published messages and copies each to every one of its channels.

Messages published while the topic has no channel, or is paused, wait in the topic's own
backlog (memory, then disk) and flow to the channels once there are some and it is unpaused:
that is the job of ``run``, the topic's one task (NSQ's topic messagePump). Otherwise a publish
goes straight to the channels. The first channel gets the original message object and every
other channel a copy, so a single-channel topic costs no copies at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
from nsq_common import is_ephemeral

from .backlog import Backlog
from .channel import Channel

if TYPE_CHECKING:
    from collections.abc import Callable

    from .diskqueue import DiskQueue
    from .message import QueuedMessage

DRAIN_BATCH = 1000


class Topic:
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

    @property
    def depth(self) -> int:
        return len(self.backlog)

    @property
    def backend_depth(self) -> int:
        return self.backlog.disk_depth

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

    async def _fan_out(self, msgs: list[QueuedMessage]) -> None:
        channels = list(self.channels.values())
        now = self.now()
        if self.backlog.extended:  # the channels must look at expiries from now on
            for channel in channels:
                channel.backlog.extended = True
        for channel in channels[1:]:
            await channel.put([m.copy() for m in msgs], now)
        await channels[0].put(msgs, now)

    def add_channel(self, channel: Channel) -> None:
        self.channels[channel.name] = channel
        self.wake()

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
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
                    msgs = self.backlog.take(DRAIN_BATCH)
                    if not msgs:
                        break
                    await self._fan_out(msgs)
                    self.backlog.ack_all()  # the channels hold them now
