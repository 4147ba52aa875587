"""nsqd.dat: which topics and channels exist and whether they are paused, in NSQ's JSON layout.

    {"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":true}]}],"version":"1.3.0"}

Written atomically (temp file, fsync, rename, mode 0600) so a crash leaves the old file or the
new one, never half of one. Ephemeral topics and channels are never written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
from nsq_common import NSQ_VERSION, go_errno_text, go_json, is_valid_name, write_atomically

if TYPE_CHECKING:
    import trio

    from .topic import Topic

FILE_NAME = "nsqd.dat"


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


def metadata_path(data_path: str) -> Path:
    return Path(data_path or ".") / FILE_NAME


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


def _count(value: object) -> int | None:
    """A non-negative JSON integer, or None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


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
    """Parse nsqd.dat; returns the topics and warnings about entries skipped.

    Raises:
        ValueError: the file is not nsqd metadata.
    """
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("metadata is not a JSON object")
    topics: list[TopicMeta] = []
    warnings: list[str] = []
    for t in doc.get("topics") or []:
        name = t.get("name", "")
        if not is_valid_name(name):
            warnings.append(f"skipping creation of invalid topic {name}")
            continue
        channels = []
        for c in t.get("channels") or []:
            cname = c.get("name", "")
            if not is_valid_name(cname):
                warnings.append(f"skipping creation of invalid channel {cname}")
                continue
            attempts = _count(c.get("max_attempts", 0))
            if attempts is None:
                warnings.append(f"ignoring invalid max_attempts of channel {cname}")
            channels.append(ChannelMeta(cname, bool(c.get("paused", False)), attempts or 0,
                                        c.get("dead_letter_expired") is True))
        ttl = _count(t.get("message_ttl", 0))
        if ttl is None:
            warnings.append(f"ignoring invalid message_ttl of topic {name}")
        extra = {}
        for key in ("retention", "retention_bytes", "next_offset", "hold", "paused_at"):
            if key in t:
                value = _count(t[key])
                if value is None:
                    warnings.append(f"ignoring invalid {key} of topic {name}")
                else:
                    extra[key] = value
        topics.append(TopicMeta(name, bool(t.get("paused", False)), tuple(channels), ttl or 0,
                                **extra))
    return topics, warnings


def load(path: Path) -> tuple[list[TopicMeta], list[str]]:
    """Read the file; a missing file is an empty list.

    Raises:
        ValueError: ``failed to parse metadata in <file> - <err>``, or ``failed to read
            metadata from <file> - open <file>: <reason>`` when it cannot be read (a
            --data-path that is a file, say); nsqd then refuses to start, as Go's does.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise ValueError(f"failed to read metadata from {path} - open {path}: "
                         f"{go_errno_text(exc)}") from None
    try:
        return decode(data)
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"failed to parse metadata in {path} - {exc}") from None


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
    called any number of times; ``run`` writes once per wake-up, in a worker thread."""

    def __init__(self, data_path: str, topics: Callable[[], Iterable[Topic]],
                 logger: logging.Logger) -> None:
        self.path = metadata_path(data_path)
        self._topics = topics
        self._log = logger
        import trio  # here: nsqd's early start reads nsqd.dat (``load``) before Trio loads

        self._event: trio.Event = trio.Event()

    def changed(self) -> None:
        self._event.set()

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
            data = encode(topic_metadata(self._topics()))
            try:
                await trio.to_thread.run_sync(write_atomic, self.path, data)
            except OSError as exc:
                self._log.error("failed to persist metadata - %s", exc)
