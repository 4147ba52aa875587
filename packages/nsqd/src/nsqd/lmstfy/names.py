"""lmstfy's namespace and queue names, and the NSQ topic and channel each queue lives in.

A queue ``<namespace>/<queue>`` is the topic ``lmstfy.<namespace>.<queue>`` with one channel,
``jobs``. lmstfy's names are ASCII letters, digits, ``-`` and ``_`` (no ``.``), so the dots
keep every pair apart. NSQ's names stop at 64 characters: a longer pair becomes
``lmstfy.<the first 40 characters of namespace.queue>.<16 hex digits of its SHA-256>``, still
one topic per queue; the queue list (``/info``) keeps the real names.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "lmstfy."
CHANNEL = "jobs"
MAX_NAME = 255
_NAME = re.compile(r"[-_A-Za-z0-9]+\Z")
_QUEUE_LIST = re.compile(r"[-_,A-Za-z0-9]+\Z")


def name_error(namespace: str, queue: str) -> str | None:
    """lmstfy's answer to bad names on a queue's routes, checked in its order."""
    if len(namespace.encode()) > MAX_NAME or len(queue.encode()) > MAX_NAME:
        return "namespace or queue name too long"
    if not _NAME.match(namespace):
        return "namespace name contains forbidden characters"
    if not _NAME.match(queue) or queue.startswith("_"):
        return "queue name contains forbidden characters"
    return None


def queue_list_error(namespace: str, queues: str) -> str | None:
    """lmstfy's answer to bad names on the consume route (``q1,q2,...``)."""
    if not _NAME.match(namespace):
        return "namespace name contains forbidden characters"
    if not _QUEUE_LIST.match(queues):
        return "queue name contains forbidden characters"
    return None


def valid_namespace(namespace: str) -> bool:
    return bool(_NAME.match(namespace))


def topic_name(namespace: str, queue: str) -> str:
    name = f"{PREFIX}{namespace}.{queue}"
    if len(name) <= 64:
        return name
    digest = hashlib.sha256(f"{namespace}/{queue}".encode()).hexdigest()[:16]
    return f"{PREFIX}{namespace}.{queue}"[:len(PREFIX) + 40] + "." + digest
