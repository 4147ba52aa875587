"""lmstfy's namespace and queue names, and the NSQ topic and channel each queue lives in.

A queue ``<namespace>/<queue>`` is the topic ``lmstfy.<namespace>.<queue>`` with one channel,
``jobs``. lmstfy's names are ASCII letters, digits, ``-`` and ``_`` (no ``.``), so the dots
keep every pair apart. NSQ's names stop at 64 characters: a longer pair becomes
``lmstfy.<the first 40 characters of namespace.queue>.<16 hex digits of its SHA-256>``, still
one topic per queue; the queue list (``/info``) keeps the real names. The rule is
``nsq_common.lmstfy_topic_name`` (nsqadmin's Jobs pages use it too).
"""

from __future__ import annotations

import re

from nsq_common import LMSTFY_CHANNEL as CHANNEL
from nsq_common import LMSTFY_PREFIX as PREFIX
from nsq_common import lmstfy_topic_name as topic_name

__all__ = ["CHANNEL", "MAX_NAME", "PREFIX", "name_error", "queue_list_error", "topic_name",
           "valid_namespace"]

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
