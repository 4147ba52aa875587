"""Messages across a clean restart (nsqd.dat, the topics and channels, is ``metadata.py``).

At shutdown every queued and in-flight message of every durable topic and channel goes to its
disk queue, and deferred ones to a side file with their due time (``deferred_store``); at
start the deferred ones come back with what is left of their delay. Ephemeral topics and
channels keep nothing, as in NSQ.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable

import trio

from . import deferred_store
from .backlog import Backlog, encode_record
from .channel import Channel
from .errors import DiskQueueError
from .message import QueuedMessage
from .topic import Topic

log = logging.getLogger("nsqd")


async def save_all(topics: Iterable[Topic], data_path: str, now: float,
                   store_dead_letters: Callable[[Channel], Awaitable[None]]) -> None:
    """Save every message of ``topics`` and their channels (their clients are gone already,
    so in-flight messages are back in the queues or in flight to nobody)."""
    wall = time.time_ns()
    for topic in topics:
        for channel in list(topic.channels.values()):
            await store_dead_letters(channel)
            msgs = channel.backlog.clear_memory() + channel.in_flight.clear()
            deferred = [(wall + int(max(0.0, m.deadline - now) * 1e9), m)
                        for m in channel.deferred.clear()]
            await save_queue(data_path, f"{topic.name}:{channel.name}", channel.backlog, msgs,
                             deferred)
        held = topic.backlog.clear_memory()
        deferred = [(wall + int(m.defer * 1e9), m) for m in held if m.defer]
        await save_queue(data_path, topic.name, topic.backlog, [m for m in held if not m.defer],
                         deferred)


async def save_queue(data_path: str, queue_name: str, backlog: Backlog,
                     msgs: list[QueuedMessage], deferred: list[tuple[int, QueuedMessage]]
                     ) -> None:
    """Write one queue's messages to its disk queue and its deferred ones beside it; a
    failure is logged (shutdown goes on with the other queues)."""
    disk = backlog.disk
    if disk is None:
        return  # ephemeral: nothing survives, as in NSQ
    try:
        if msgs:
            await disk.put([encode_record(m) for m in msgs])
        deferred_path = deferred_store.deferred_path(data_path, queue_name)
        await trio.to_thread.run_sync(deferred_store.save, deferred_path, deferred)
        backlog.ack_all()  # every message read from disk is written back (or done)
        # The queue's run() has stopped (cancelled): only close() persists that commit;
        # without it a restart would deliver the records just written back a second time.
        await disk.close()
    except (DiskQueueError, OSError) as exc:
        log.error("%s: failed to save messages at shutdown - %s", queue_name, exc)
    else:
        if msgs or deferred:
            log.info("%s: saved %d messages and %d deferred", queue_name, len(msgs),
                     len(deferred))


def restore_deferred(data_path: str, queue_name: str, owner: Topic | Channel, now: float
                     ) -> None:
    """Give a new topic or channel back the deferred messages saved at the last shutdown."""
    path = deferred_store.deferred_path(data_path, queue_name)
    entries = deferred_store.load(path)
    if not entries:
        return
    wall = time.time_ns()
    for due, msg in entries:
        delay = max(0.0, (due - wall) / 1e9)
        if isinstance(owner, Channel):
            msg.deadline = now + delay
            owner.deferred.add(msg)
        else:
            msg.defer = max(delay, 1e-9)
            owner.backlog.put_back([msg])
    if any(msg.expires or msg.is_job for _, msg in entries):
        owner.backlog.extended = True
    log.info("%s: restored %d deferred messages", queue_name, len(entries))
