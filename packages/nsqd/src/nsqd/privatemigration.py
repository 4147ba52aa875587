"""The private queues of the release before internal logs, moved into them at start
(docs/design/storage.md, "The own queue and dead letters").

That release kept a channel's own queue and its dead letters in go-diskqueue files in the
data path, ``<topic>:<channel>#own.diskqueue.*`` and ``<topic>:<channel>#dead.diskqueue.*``.
Each such queue is moved once into the channel's internal log (``privatelog``), crash-safe at
every step:

1. its records not acknowledged yet (from its metadata's read position: that release moved
   it only over acknowledged records) are appended to a new log in a staging directory
   beside the log's (``<channel>#own.migrating``), closed (fsynced, its index written);
2. the staging directory is renamed to the log's (``<channel>#own``), and the topic's
   directory fsynced;
3. the old files are removed (the data files, then the metadata), and the data path fsynced.

A start after a kill in 1 removes the staging directory and begins again from the old files,
which nothing changed; after 2 the log's directory is there, so the old files left are only
removed. So nothing is lost and nothing is moved twice. The log's cursor has no journal yet:
it starts at the log's first record, as a new internal log's does.

This runs before anything opens the channels' logs (``Broker.run``, ``goexport``), and only
when the data path has such files (the module is not even loaded otherwise). The data path
holds no new queue of that kind after it: what is left (a ``.bad`` file put aside by that
release) is an operator's.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from . import gofiles
from .privatelog import directory_name
from .record import is_plain
from .topiclog import TopicLog

if TYPE_CHECKING:
    from .clock import Clock
    from .options import Options

#: A file of a private queue of that release (not one a deletion moved aside: ``~``).
PRIVATE_QUEUE_FILE = re.compile(
    r"(?P<topic>[^:#~]+):(?P<channel>[^:#~]+)(?P<kind>#own|#dead)\.diskqueue\.(?:meta|\d{6,})\.dat")
#: The suffix of a staging directory (no channel's name has a ``#``).
STAGING = ".migrating"
TOPICS_DIR = "topics"  # as the broker lays them out


def is_private_queue_file(name: str) -> bool:
    return PRIVATE_QUEUE_FILE.fullmatch(name) is not None


def private_queues(names: Iterable[str]) -> list[tuple[str, str, str]]:
    """The ``(topic, channel, kind)`` of each private queue the file ``names`` hold."""
    found = {(m["topic"], m["channel"], m["kind"])
             for m in map(PRIVATE_QUEUE_FILE.fullmatch, names) if m is not None}
    return sorted(found)


async def migrate(opts: Options, logger: logging.Logger, clock: Clock) -> None:
    """Move every private queue of the data path into its channel's internal log (see the
    module's docstring).

    Raises:
        OSError: a queue could not be moved (what was moved stays; that queue's files stay,
            and the next start takes it up again).
    """
    data = Path(opts.data_path or ".")
    queues = private_queues(await trio.to_thread.run_sync(os.listdir, data))
    for topic, channel, kind in queues:
        await _migrate_one(data, topic, channel, kind, opts, logger, clock)


async def _migrate_one(data: Path, topic: str, channel: str, kind: str, opts: Options,
                       logger: logging.Logger, clock: Clock) -> None:
    name = f"{topic}:{channel}{kind}"
    directory = data / TOPICS_DIR / topic
    target = directory / directory_name(channel, kind)
    staging = target.with_name(target.name + STAGING)
    if not await trio.to_thread.run_sync(target.is_dir):
        await trio.to_thread.run_sync(_remove_tree, staging)
        count = await _copy(data, name, staging, opts, logger, clock)
        if count:  # (nothing to keep: no log)
            await trio.to_thread.run_sync(_put_in_place, staging, target)
        else:
            await trio.to_thread.run_sync(_remove_tree, staging)
        logger.info("%s: %d messages moved from its go-diskqueue files into %s", name, count,
                    target)
    await trio.to_thread.run_sync(_remove_old, data, name)


async def _copy(data: Path, name: str, staging: Path, opts: Options,
                logger: logging.Logger, clock: Clock) -> int:
    """The queue's records not acknowledged into a new log at ``staging``; how many."""
    # every append written through; fsynced when a segment rolls and at close
    log = TopicLog(name, staging, mem_queue_size=0, max_bytes_per_file=opts.max_bytes_per_file,
                   sync_every=1 << 62, sync_timeout=opts.sync_timeout, clock=clock,
                   logger=logger)
    count = 0

    async def append(batch: list[bytes]) -> None:
        nonlocal count
        batch = [gofiles.checked_record(record) for record in batch]
        await log.append(batch, plain=all(map(is_plain, batch)))
        count += len(batch)

    try:
        await gofiles.each_batch(data, name, logger, append)
    finally:
        await log.close()
    return count


def _remove_tree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


def _put_in_place(staging: Path, target: Path) -> None:
    """The staging directory (written, closed) becomes the log's, durably."""
    gofiles.sync_path(staging)
    os.rename(staging, target)
    gofiles.sync_path(target.parent)
    gofiles.sync_path(target.parent.parent)


def _remove_old(data: Path, name: str) -> None:
    """The old queue's files: data files first, the metadata last (so a start after a kill
    here still finds the queue, and its log's directory, and goes on removing)."""
    for _, path in gofiles.data_files(data, name):
        path.unlink(missing_ok=True)
    gofiles.meta_path(data, name).unlink(missing_ok=True)
    gofiles.sync_path(data)
