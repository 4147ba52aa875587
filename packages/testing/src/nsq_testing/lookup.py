"""nsqlookupd helpers for tests: see what it knows.

``registered`` waits until lookupd lists an nsqd (started with ``--lookupd-tcp-address``) as a
producer of some topics.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .daemon import Daemon


def lookup_producers(lookupd_http_address: str, topic: str) -> list[dict[str, Any]]:
    """lookupd's producers of ``topic`` (``[]`` when it does not know the topic)."""
    url = f"http://{lookupd_http_address}/lookup?topic={topic}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return list(json.loads(response.read()).get("producers") or [])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise


def _lists(lookupd: Daemon, nsqd: Daemon, topics: Sequence[str]) -> bool:
    return all(any(p.get("tcp_port") == nsqd.tcp_port for p in lookup_producers(lookupd.http_address, t))
               for t in topics)


@contextmanager
def registered(lookupd: Daemon, nsqd: Daemon, topics: Sequence[str], *,
               timeout: float = 10.0) -> Iterator[None]:
    """Wait until lookupd lists ``nsqd`` (started with ``--lookupd-tcp-address``) as a producer
    of every topic in ``topics``, then run the block.

    Raises:
        RuntimeError: nsqd did not register itself in time.
    """
    deadline = time.monotonic() + timeout
    while not _lists(lookupd, nsqd, topics):
        if time.monotonic() > deadline:
            raise RuntimeError(f"nsqd {nsqd.tcp_address} did not register {list(topics)} "
                               f"with nsqlookupd {lookupd.tcp_address}")
        time.sleep(0.05)
    yield
