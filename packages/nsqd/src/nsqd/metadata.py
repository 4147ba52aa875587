"""nsqd.dat: which topics and channels exist and whether they are paused, in NSQ's JSON layout.

    {"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":true}]}],"version":"1.3.0"}

Written atomically (temp file, fsync, rename, mode 0600) so a crash leaves the old file or the
new one, never half of one. Ephemeral topics and channels are never written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from nsq_common import NSQ_VERSION, go_json, write_atomically

from . import metadata_file

if TYPE_CHECKING:
    import trio

    from .topic import Topic

FILE_NAME = metadata_file.FILE_NAME


@attrs.frozen
class ChannelMeta:
    name: str
    paused: bool = False
    max_attempts: int = 0  # beyond NSQ; written only when set (Go's nsqd ignores the key)
    dead_letter_expired: bool = False  # beyond NSQ; written only when set


@attrs.frozen
class TopicMeta:
    name: str
    paused: bool = False
    channels: tuple[ChannelMeta, ...] = ()
    message_ttl: int = 0  # beyond NSQ; written only when set (Go's nsqd ignores the key)
    # beyond NSQ (docs/design/storage.md), each written only when set:
    retention: int = 0  # ns the log keeps what every channel has read
    retention_bytes: int = 0  # or the newest segments within this size
    next_offset: int = 0  # the offset the next message gets (stable across restarts)
    hold: int | None = None  # without channels: where the first channel starts
    paused_at: int | None = None  # paused: how far its channels may read


def hold_of(meta: TopicMeta, saved: int | None) -> int:
    """Where a topic without channels holds from, as the last run left it: nsqd.dat's
    ``hold`` (left out when it equals ``next_offset``) and the one the log's ``offsets`` file
    keeps (``saved``), whichever is lower (each was the hold when it was written, and a hold
    only ever moves up: the lower one may deliver again, never skip)."""
    listed = meta.hold if meta.hold is not None else meta.next_offset
    return listed if saved is None else min(listed, saved)


def metadata_path(data_path: str) -> Path:
    return Path(metadata_file.metadata_file(data_path))


def encode(topics: list[TopicMeta]) -> bytes:
    doc = {
        "topics": [_topic_doc(t) for t in topics] or None,
        "version": NSQ_VERSION,
    }
    return go_json(doc)


def _channel_doc(channel: ChannelMeta) -> dict[str, object]:
    doc: dict[str, object] = {"name": channel.name, "paused": channel.paused}
    if channel.max_attempts:
        doc["max_attempts"] = channel.max_attempts
    if channel.dead_letter_expired:
        doc["dead_letter_expired"] = True
    return doc


def _topic_doc(topic: TopicMeta) -> dict[str, object]:
    doc: dict[str, object] = {
        "name": topic.name,
        "paused": topic.paused,
        "channels": [_channel_doc(c) for c in topic.channels] or None,
    }
    if topic.message_ttl:
        doc["message_ttl"] = topic.message_ttl
    if topic.retention:
        doc["retention"] = topic.retention
    if topic.retention_bytes:
        doc["retention_bytes"] = topic.retention_bytes
    if topic.next_offset:
        doc["next_offset"] = topic.next_offset
    if topic.hold is not None and not topic.channels and topic.hold != topic.next_offset:
        doc["hold"] = topic.hold
    if topic.paused_at is not None and topic.paused and topic.paused_at != topic.next_offset:
        doc["paused_at"] = topic.paused_at
    return doc


def decode(data: bytes) -> tuple[list[TopicMeta], list[str]]:
    """Parse nsqd.dat (``metadata_file.parse``); returns the topics and warnings about
    entries skipped.

    Raises:
        ValueError: the file is not nsqd metadata.
    """
    topics, warnings = metadata_file.parse(data)
    return [_topic_meta(topic) for topic in topics], warnings


def load(path: Path) -> tuple[list[TopicMeta], list[str]]:
    """Read the file (``metadata_file.read``); a missing file is an empty list.

    Raises:
        ValueError: it cannot be read or parsed, in nsqd's words.
    """
    topics, warnings = metadata_file.read(str(path))
    return [_topic_meta(topic) for topic in topics], warnings


def _topic_meta(fields: dict[str, Any]) -> TopicMeta:
    channels = tuple(ChannelMeta(**channel) for channel in fields.pop("channels"))
    return TopicMeta(channels=channels, **fields)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` all at once (mode 0600).

    Raises:
        OSError: it could not be written; the old file is left as it was.
    """
    write_atomically(path, data, mode=0o600)


def topic_metadata(topics: Iterable[Topic]) -> list[TopicMeta]:
    """What nsqd.dat keeps of ``topics``: every durable topic and channel, with settings."""
    return [
        TopicMeta(t.name, t.paused, tuple(
            ChannelMeta(c.name, c.paused, c.max_attempts, c.dead_letter_expired)
            for c in t.channels.values()
            if not c.ephemeral), t.message_ttl, t.log.retention_ns, t.log.retention_bytes,
            t.log.end, None if t.channels else t.hold, t.paused_at if t.paused else None)
        for t in topics if not t.ephemeral
    ]


class MetadataWriter:
    """Writes nsqd.dat after topics or channels change: ``changed`` is cheap and may be
    called any number of times; ``run`` writes once per wake-up, in a worker thread;
    ``written`` waits until what changed before it is on disk (a new topic or channel is
    listed before the request that made it is answered)."""

    def __init__(self, data_path: str, topics: Callable[[], Iterable[Topic]],
                 logger: logging.Logger) -> None:
        self.path = metadata_path(data_path)
        self._topics = topics
        self._log = logger
        import trio  # here: nsqd's early start reads nsqd.dat (``load``) before Trio loads

        self._event: trio.Event = trio.Event()
        #: changes asked for, and the number of them the last write covered
        self._changes = self._covered = 0
        self._write_ended: trio.Event = trio.Event()
        self._failure: OSError | None = None

    @property
    def behind(self) -> bool:
        """Whether some change is not on disk yet (or the last write failed)."""
        return self._covered < self._changes or self._failure is not None

    def changed(self) -> None:
        self._changes += 1
        self._event.set()

    async def written(self) -> None:
        """Return once a write that began after every change made so far has ended.

        Raises:
            OSError: that write failed (logged by ``run`` too).
        """
        if self._failure is not None:
            self.changed()  # the last write failed: try again
        target = self._changes
        while self._covered < target:
            await self._write_ended.wait()
        if self._failure is not None:  # the write that covered them
            raise self._failure

    def write_now(self) -> None:
        """Write at once, blocking (at start and at shutdown).

        Raises:
            OSError: it could not be written.
        """
        write_atomic(self.path, encode(topic_metadata(self._topics())))

    async def run(self) -> None:
        import trio

        while True:
            await self._event.wait()
            self._event = trio.Event()
            covering = self._changes
            data = encode(topic_metadata(self._topics()))
            try:
                await trio.to_thread.run_sync(write_atomic, self.path, data)
            except OSError as exc:
                self._log.error("failed to persist metadata - %s", exc)
                self._failure = exc
            else:
                self._failure = None
            self._covered = covering
            ended, self._write_ended = self._write_ended, trio.Event()
            ended.set()
