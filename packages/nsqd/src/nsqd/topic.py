"""A topic: it takes published messages and copies each to every one of its channels.

Messages published while the topic has no channel, or is paused, wait in the topic's own
queue and flow to the channels once there are some and it is unpaused (NSQ's topic pump).
The first channel gets the original message object and every other channel a copy, so a
single-channel topic costs no copies at all.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from nsq_common import is_ephemeral

from .channel import Channel, Owner

if TYPE_CHECKING:
    from .message import Message


class Topic:
    def __init__(self, name: str, owner: Owner, *, max_msg_timeout: float) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.owner = owner
        self.max_msg_timeout = max_msg_timeout
        self.channels: dict[str, Channel] = {}
        self.queue: deque[Message] = deque()
        self.paused = False
        self.deleted = False
        self.message_count = 0
        self.message_bytes = 0

    @property
    def depth(self) -> int:
        return len(self.queue)

    @property
    def backend_depth(self) -> int:
        return 0

    def put(self, msgs: list[Message], now: float) -> None:
        self.message_count += len(msgs)
        self.message_bytes += sum([len(m.body) for m in msgs])
        if self.paused or not self.channels:
            self.queue.extend(msgs)
        else:
            self._fan_out(msgs, now)

    def _fan_out(self, msgs: list[Message], now: float) -> None:
        channels = list(self.channels.values())
        for channel in channels[1:]:
            channel.put([m.copy() for m in msgs], now)
        channels[0].put(msgs, now)

    def drain(self, now: float) -> None:
        """Move held messages to the channels, if there are channels and we are not paused."""
        if self.queue and self.channels and not self.paused:
            msgs = list(self.queue)
            self.queue.clear()
            self._fan_out(msgs, now)

    def get_channel(self, name: str, now: float) -> tuple[Channel, bool]:
        """The channel called ``name``, created if missing; the flag says it is new."""
        channel = self.channels.get(name)
        if channel is not None:
            return channel, False
        channel = Channel(self.name, name, self.owner, max_msg_timeout=self.max_msg_timeout)
        self.channels[name] = channel
        self.drain(now)
        return channel, True

    def pause(self) -> None:
        self.paused = True

    def unpause(self, now: float) -> None:
        self.paused = False
        self.drain(now)

    def empty(self) -> None:
        self.queue.clear()
