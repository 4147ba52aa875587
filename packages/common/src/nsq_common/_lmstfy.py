"""lmstfy's job queues as NSQ topics (beyond NSQ): nsqd serves lmstfy's API on its own topics
(docs/lmstfy.md), and nsqadmin finds a queue's topic by the same rule, here once.

A queue ``<namespace>/<queue>`` is the topic ``lmstfy.<namespace>.<queue>`` with one channel,
``jobs``. lmstfy's names are ASCII letters, digits, ``-`` and ``_`` (no ``.``), so the dots
keep every pair apart. NSQ's names stop at 64 characters: a longer pair becomes
``lmstfy.<the first 40 characters of namespace.queue>.<16 hex digits of its SHA-256>``, still
one topic per queue.
"""

from __future__ import annotations

import hashlib

LMSTFY_PREFIX = "lmstfy."
LMSTFY_CHANNEL = "jobs"


def lmstfy_topic_name(namespace: str, queue: str) -> str:
    """The NSQ topic of lmstfy's queue ``namespace``/``queue``."""
    name = f"{LMSTFY_PREFIX}{namespace}.{queue}"
    if len(name) <= 64:
        return name
    digest = hashlib.sha256(f"{namespace}/{queue}".encode()).hexdigest()[:16]
    return name[:len(LMSTFY_PREFIX) + 40] + "." + digest
