"""A channel's private queues, its own queue and its dead letters (docs/design/storage.md, "The
own queue and dead letters"): made by the broker when the channel first needs one (or at
start, when it has one on disk), each with a task of its own, and removed with the channel.

Each is a ``Backlog`` on a ``privatelog.PrivateLog`` in the topic's directory for a durable
channel, in memory for an ephemeral one (or a deleted one: its name's files are a new
channel's now). ``ChannelQueues`` holds what making them takes (the options, the clock, where
topics live) and starts and stops their tasks through the broker's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .backlog import Backlog
from .deadletters import DeadLetters
from .privatelog import DEAD, OWN, PrivateLog, directory_name

if TYPE_CHECKING:
    from .channel import Channel
    from .clock import Clock
    from .options import Options

log = logging.getLogger("nsqd")

#: Starts a task keyed by what it serves (stopped with ``Stop`` of that key).
Spawn = Callable[[object, Callable[[], Awaitable[None]]], None]
Stop = Callable[[object], None]
#: Starts work that nothing stops (a removal), if the broker is running.
Background = Callable[[Callable[[], Awaitable[None]]], None]


class ChannelQueues:
    def __init__(self, opts: Options, clock: Clock, topic_directory: Callable[[str], Path], *,
                 spawn: Spawn, stop: Stop, background: Background) -> None:
        self.opts = opts
        self.clock = clock
        self._topic_directory = topic_directory
        self._spawn = spawn
        self._stop = stop
        self._background = background

    def dead_letters_for(self, channel: Channel) -> DeadLetters:
        """The dead-letter queue of ``channel``, and its task."""
        dead = DeadLetters(self._queue(channel, DEAD, lambda: None))
        self._spawn(dead, dead.backlog.run)
        return dead

    def own_queue_for(self, channel: Channel) -> Backlog:
        """The own queue of ``channel`` (see ``backlog``), and its task."""
        own = self._queue(channel, OWN, channel.changed)
        self._spawn(own, own.run)
        return own

    def on_disk(self, topic_name: str, channel_name: str) -> tuple[bool, bool]:
        """Whether the channel has an own queue, and dead letters, on disk (from a last run)."""
        directory = self._topic_directory(topic_name)
        return ((directory / directory_name(channel_name, OWN)).is_dir(),
                (directory / directory_name(channel_name, DEAD)).is_dir())

    def remove(self, channel: Channel) -> None:
        """The channel is deleted: its queues' tasks stop, and their files go (moved aside at
        once: a channel made again with the name has its own)."""
        for queue in (channel.own, channel.dead_letters_if_any):
            if queue is not None:
                self._stop(queue)
                backlog = queue.backlog if isinstance(queue, DeadLetters) else queue
                if backlog.disk is not None:
                    backlog.disk.detach()
                    self._background(backlog.disk.delete)

    @staticmethod
    def dead_letter_name(channel: Channel) -> str:
        """How the log names the dead letters of ``channel``."""
        return f"{channel.topic_name}:{channel.name}{DEAD}"

    def _queue(self, channel: Channel, kind: str, on_readable: Callable[[], None]) -> Backlog:
        # Not for a deleted channel either: its name's files are a new channel's now.
        durable = channel.cursor.journal is not None and not channel.deleted
        disk = self._log(channel, kind) if durable else None
        return Backlog(0 if durable else 1 << 62, disk, on_readable)

    def _log(self, channel: Channel, kind: str) -> PrivateLog:
        """A channel's internal log (``privatelog``)."""
        o = self.opts
        directory = self._topic_directory(channel.topic_name) / directory_name(channel.name, kind)
        return PrivateLog(f"{channel.topic_name}:{channel.name}{kind}", directory,
                          clock=self.clock, max_bytes_per_file=o.max_bytes_per_file,
                          sync_every=o.sync_every, sync_timeout=o.sync_timeout, logger=log)
