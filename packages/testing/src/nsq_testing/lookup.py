"""nsqlookupd helpers for tests: see what it knows.

``registered`` waits until lookupd lists an nsqd (started with ``--lookupd-tcp-address``) as a
producer of some topics.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .daemon import Daemon
from .wait import DEADLINE, wait_until


def lookup_producers(lookupd_http_address: str, topic: str) -> list[dict[str, Any]]:
    """lookupd's producers of ``topic`` (``[]`` when it does not know the topic)."""
    url = f"http://{lookupd_http_address}/lookup?topic={topic}"
    try:
        with urllib.request.urlopen(url, timeout=DEADLINE) as response:
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
               timeout: float = DEADLINE) -> Iterator[None]:
    """Wait until lookupd lists ``nsqd`` (started with ``--lookupd-tcp-address``) as a producer
    of every topic in ``topics``, then run the block.

    Raises:
        RuntimeError: nsqd did not register itself in time.
    """
    try:
        wait_until(lambda: _lists(lookupd, nsqd, topics), timeout=timeout)
    except TimeoutError:
        raise RuntimeError(f"nsqd {nsqd.tcp_address} did not register {list(topics)} "
                           f"with nsqlookupd {lookupd.tcp_address}") from None
    yield
