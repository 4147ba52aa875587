"""What nsqd keeps across a restart: brought back at start, saved at close.

At start, before any client comes (``Broker.run``): queues in Go's layout and the channels'
private queues of the release before internal logs brought into the logs first
(``bring_in_old_queues``), then nsqd.dat's topics and channels (``load``), each channel's
cursor where its journal says (``open_cursor``, also a new channel's). At close (``save``):
every client gone (its in-flight messages back to their channels), every cursor persisted with
what its channel holds, what the logs hold in memory written, then nsqd.dat.

What this needs of the broker is ``Registry``, which ``Broker`` satisfies.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import attrs

from . import cursorfile, metadata
from .cursor import Cursor
from .errors import LogError, StartError
from .logfiles import MAX_OFFSET

if TYPE_CHECKING:
    from .channel import Channel
    from .client import Client
    from .clock import Clock
    from .options import Options
    from .topic import Topic

log = logging.getLogger("nsqd")

#: A file of a queue in Go's layout (no ``#``: not an own queue nor dead letters), or an import
#: under way (``goimport``).
_OLD_QUEUE_FILE = re.compile(r"[^#]+\.(?:diskqueue\.(?:meta|\d{6,})|deferred)\.dat|goimport\.json")
#: A channel's own queue or dead letters of the release before internal logs
#: (``privatemigration``).
_PRIVATE_QUEUE_FILE = re.compile(r"[^:#~]+:[^:#~]+#(?:own|dead)\.diskqueue\.(?:meta|\d{6,})\.dat")
_IMPORT_MARKER = "goimport.json"


class Registry(Protocol):
    """What a restart needs of the broker: its topics, channels and clients."""

    @property
    def topics(self) -> dict[str, Topic]: ...

    @property
    def clients(self) -> dict[int, Client]: ...

    def get_topic(self, name: str, *, changed: bool = True) -> Topic: ...

    def get_channel(self, topic: Topic, name: str, *, start: str | None = None,
                    changed: bool = True, listed: bool = False) -> Channel: ...

    def remove_client(self, client: Client) -> None: ...

    async def store_dead_letters(self, channel: Channel) -> None: ...


async def bring_in_old_queues(opts: Options, clock: Clock) -> None:
    """Queues in Go's layout (Go's nsqd, an earlier version of ours) into the logs before
    anything is loaded (``goimport``), after the channels' private queues of the release
    before internal logs (``privatemigration``): each module is loaded only when the
    data path has such files. An import a crash interrupted is settled first (a marker
    of that release names its own queues' files as they were)."""
    try:
        names = os.listdir(opts.data_path or ".")
    except OSError:
        return
    go_layout = any(_OLD_QUEUE_FILE.fullmatch(name) for name in names)
    if go_layout and _IMPORT_MARKER in names:
        from .goimport import settle

        if not await settle(opts, log, clock):
            return
    if any(_PRIVATE_QUEUE_FILE.fullmatch(name) for name in names):
        from .privatemigration import migrate

        try:
            await migrate(opts, log, clock)
        except OSError as exc:
            raise StartError(f"failed to move the channels' private queues into their "
                             f"logs - {exc}") from None
    if go_layout:
        from .goimport import bring_in

        await bring_in(opts, log, clock)


def load(registry: Registry, data_path: str) -> None:
    """Topics, channels and their positions from what the last run left; nothing is
    written here (a full disk must not stop nsqd from starting).

    Raises:
        StartError: nsqd.dat cannot be read.
    """
    path = metadata.metadata_path(data_path)
    try:
        topics, warnings = metadata.load(path)
    except ValueError as exc:
        raise StartError(f"failed to load metadata - {exc}") from None
    for warning in warnings:
        log.warning("%s", warning)
    for meta in topics:
        topic = registry.get_topic(meta.name, changed=False)
        topic.configure(message_ttl=meta.message_ttl, retention_ns=meta.retention,
                        retention_bytes=meta.retention_bytes)
        if meta.next_offset > MAX_OFFSET:  # damage: it must not move the log's end
            log.error("TOPIC(%s): nsqd.dat's next_offset %d is past the largest offset "
                      "(%d), ignored", meta.name, meta.next_offset, MAX_OFFSET)
            meta = attrs.evolve(meta, next_offset=topic.log.end)
        topic.log.resume_at(meta.next_offset)
        if not meta.channels:
            hold = metadata.hold_of(meta, topic.log.saved_hold)
            topic.log.hold_from(min(max(hold, topic.log.start), topic.log.end))
        for cmeta in meta.channels:
            channel = registry.get_channel(topic, cmeta.name, changed=False, listed=True)
            if cmeta.paused:
                channel.pause()
            channel.configure(max_attempts=cmeta.max_attempts,
                              dead_letter_expired=cmeta.dead_letter_expired)
        if meta.paused:
            topic.pause(None if meta.paused_at is None
                        else min(max(meta.paused_at, topic.log.start), topic.log.end))
    if topics:
        log.info("loaded metadata: %d topics", len(topics))


def open_cursor(topic: Topic, name: str, directory: Path, start: str | None, listed: bool
                ) -> Cursor:
    """The cursor of a channel, its journal in ``directory``: where the journal says, or, for
    a new channel, at ``start``. A journal that should be there and is not (``listed``), or
    that cannot be read or holds no whole entry, starts the channel at the earliest offset
    stored: what it held is delivered again, never skipped. A journal past the log's end
    (damage: no cursor passes the offsets given) is brought back to the end; it never moves
    it."""
    path = directory / f"{name}{cursorfile.SUFFIX}"
    cursor = Cursor(topic.start_position(start), cursorfile.CursorJournal(path))
    end = topic.log.end
    what = "is missing" if listed else None
    try:
        state = cursorfile.load(path, logger=log)
        if state is None and path.exists():
            what = "holds no whole entry"
    except OSError as exc:
        state, what = None, f"cannot be read ({exc})"
    if state is not None and state.mark_delete > end:
        log.error("TOPIC(%s): channel(%s): cursor journal %s is past the log's end (%d > "
                  "%d): the channel starts at the end", topic.name, name, path,
                  state.mark_delete, end)
        state = cursorfile.CursorState(end)
    if state is not None:
        cursor.restore(state, topic.log.start)
    elif what is not None:
        earliest = topic.log.start
        log.error("TOPIC(%s): channel(%s): cursor journal %s %s: the channel starts at the "
                  "earliest offset stored, %d (what it held is delivered again)",
                  topic.name, name, path, what, earliest)
        cursor.move_to(earliest)
    hole = topic.log.hole
    if hole is not None and cursor.read < hole[1]:
        cursor.skip(*hole)  # offsets no message has: done with
    return cursor


async def save(registry: Registry, metadata_writer: metadata.MetadataWriter) -> None:
    """Every client gone, then, topic by topic, its channels' dead letters stored, its
    cursors persisted (with what their channels hold: attempts, due times), its log and its
    channels' private logs closed (what they hold in memory written); then nsqd.dat. A
    failure is logged, and the rest saved."""
    for client in list(registry.clients.values()):
        registry.remove_client(client)  # their in-flight messages go back to the channels
    for topic in list(registry.topics.values()):
        for channel in list(topic.channels.values()):
            await registry.store_dead_letters(channel)
        await topic.persist_cursors(in_flight=True)
        try:
            await topic.log.close()
        except LogError as exc:
            log.error("TOPIC(%s): %s", topic.name, exc)
        for channel in topic.channels.values():
            await _close_private(channel)
    try:
        metadata_writer.write_now()
    except OSError as exc:
        log.error("failed to persist metadata - %s", exc)


async def _close_private(channel: Channel) -> None:
    """Close a channel's own and dead-letter queues' disk queues (what they hold in memory
    was written already: they keep nothing in memory but on an ephemeral channel)."""
    dead = channel.dead_letters_if_any
    for backlog in (channel.own, dead.backlog if dead is not None else None):
        if backlog is not None and backlog.disk is not None:
            try:
                await backlog.disk.close()
            except LogError as exc:
                log.error("%s: %s", backlog.disk.name, exc)
