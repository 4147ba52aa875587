"""Delivery and timeouts: the broker's pump and queue-scan tasks.

- ``run`` (the pump) delivers messages for every channel marked dirty (new messages, a freed
  in-flight slot, a RDY change, an unpause), all of them per wake-up: never a task or an
  await per message. Marking is a set add and an event set, cheap enough for every FIN.
- ``run_scan`` (the queue scan) wakes every 100 ms, as nsqd's does, and requeues timed-out
  in-flight messages and releases due deferred ones.

Channels that collected dead letters in a pass have them stored (an await, the disk queue)
after every channel of the pass was pumped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from .channel import Channel

QUEUE_SCAN_INTERVAL = 0.1


class Pump:
    def __init__(self, clock: Callable[[], float], channels: Callable[[], Iterable[Channel]],
                 store_dead_letters: Callable[[Channel], Awaitable[None]]) -> None:
        self.now = clock
        self._channels = channels  # every channel, for the scan
        self._store_dead_letters = store_dead_letters
        self._dirty: set[Channel] = set()
        self._event = trio.Event()

    def mark_dirty(self, channel: Channel) -> None:
        """Pump ``channel`` at the next pass."""
        self._dirty.add(channel)
        self._event.set()

    def forget(self, channel: Channel) -> None:
        """A deleted channel: never pump it again."""
        self._dirty.discard(channel)

    async def run(self) -> None:
        while True:
            await self._event.wait()
            self._event = trio.Event()
            dirty, self._dirty = self._dirty, set()
            now = self.now()
            for channel in dirty:
                if not channel.deleted:
                    channel.pump(now)
                    topic = channel.topic
                    if (channel.cursor.dirty >= topic.sync_every
                            and channel.cursor.journal is not None):
                        topic.persist_soon()  # --sync-every acknowledgements: persist
            for channel in dirty:
                if channel.dead_letters_pending and not channel.deleted:
                    await self._store_dead_letters(channel)
            await trio.lowlevel.checkpoint()

    async def run_scan(self) -> None:
        while True:
            await trio.sleep(QUEUE_SCAN_INTERVAL)
            now = self.now()
            for channel in self._channels():
                if channel.in_flight or channel.deferred:
                    channel.scan(now)
