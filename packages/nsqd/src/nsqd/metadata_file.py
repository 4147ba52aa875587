"""nsqd.dat read and checked as plain values: which topics and channels it lists, with settings.

The one parser of the file's layout (``metadata`` builds its classes from what this returns).
Nothing heavier than ``json`` is imported here: nsqd's early start reads nsqd.dat before
attrs, logging and Trio load (docs/performance.md, "The early start").

Each topic comes back as a dict of ``TopicMeta``'s fields (``channels`` a list of dicts of
``ChannelMeta``'s); entries the real nsqd would skip are left out with a warning for each.
"""

from __future__ import annotations

import json
import os

from nsq_common import go_errno_text, is_valid_name

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from typing import Any

FILE_NAME = "nsqd.dat"
#: Topic keys beyond NSQ, each a non-negative integer, kept only when present.
_TOPIC_COUNTS = ("retention", "retention_bytes", "next_offset", "hold", "paused_at")


def metadata_file(data_path: str) -> str:
    return os.path.join(data_path or ".", FILE_NAME)


def _count(value: object) -> int | None:
    """A non-negative JSON integer, or None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def parse(data: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """The topics of nsqd.dat's bytes, and warnings about entries skipped.

    Raises:
        ValueError: not nsqd metadata (also AttributeError or TypeError for an entry of the
            wrong JSON type: ``read`` turns each into nsqd's message).
    """
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("metadata is not a JSON object")
    topics: list[dict[str, Any]] = []
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
            channels.append({"name": cname, "paused": bool(c.get("paused", False)),
                             "max_attempts": attempts or 0,
                             "dead_letter_expired": c.get("dead_letter_expired") is True})
        ttl = _count(t.get("message_ttl", 0))
        if ttl is None:
            warnings.append(f"ignoring invalid message_ttl of topic {name}")
        topic = {"name": name, "paused": bool(t.get("paused", False)), "channels": channels,
                 "message_ttl": ttl or 0}
        for key in _TOPIC_COUNTS:
            if key in t:
                value = _count(t[key])
                if value is None:
                    warnings.append(f"ignoring invalid {key} of topic {name}")
                else:
                    topic[key] = value
        topics.append(topic)
    return topics, warnings


def read(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """``parse`` of the file at ``path``; a missing file lists nothing.

    Raises:
        ValueError: ``failed to parse metadata in <file> - <err>``, or ``failed to read
            metadata from <file> - open <file>: <reason>`` when it cannot be read (a
            --data-path that is a file, say); nsqd then refuses to start, as Go's does.
    """
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise ValueError(f"failed to read metadata from {path} - open {path}: "
                         f"{go_errno_text(exc)}") from None
    try:
        return parse(data)
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"failed to parse metadata in {path} - {exc}") from None
