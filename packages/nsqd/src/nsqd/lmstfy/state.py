"""What lmstfy keeps beside the jobs: tokens per namespace, their rate limits, and the queues
ever published to (``/info``), in ``lmstfy.dat`` (JSON) in the data directory, rewritten
whole (atomically) on every change, so they survive restarts.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import attrs
import trio

from ..metadata import write_atomic

log = logging.getLogger("nsqd")
FILE = "lmstfy.dat"


@attrs.frozen
class Limit:
    """lmstfy's limiter: ``read`` consumes and ``write`` publishes per ``interval`` seconds
    (0 or less: that direction is unlimited)."""

    read: int
    write: int
    interval: int

    def to_json(self) -> dict[str, int]:
        return {"read": self.read, "write": self.write, "interval": self.interval}


class State:
    def __init__(self, data_path: str) -> None:
        self.path = Path(data_path or ".") / FILE
        self.tokens: dict[str, dict[str, str]] = {}  # namespace -> token -> description
        self.limits: dict[tuple[str, str], Limit] = {}  # (namespace, token) -> limit
        self.queues: dict[str, list[str]] = {}  # namespace -> queues, in publish order
        self._known: set[tuple[str, str]] = set()  # the same (namespace, queue) pairs

    def load(self) -> None:
        """Read ``lmstfy.dat`` if there is one.

        Raises:
            ValueError: it cannot be parsed (nsqd does not start: nothing is overwritten).
        """
        try:
            raw = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise ValueError(f"failed to load {self.path} - {exc}") from None
        self.tokens = {ns: dict(tokens) for ns, tokens in raw.get("tokens", {}).items()}
        self.limits = {(item["namespace"], item["token"]): Limit(
            int(item["read"]), int(item["write"]), int(item["interval"]))
            for item in raw.get("limits", [])}
        self.queues = {ns: list(queues) for ns, queues in raw.get("queues", {}).items()}
        self._known = {(ns, queue) for ns, queues in self.queues.items() for queue in queues}

    def set_limit(self, key: tuple[str, str], limit: Limit) -> None:
        """The rate limit of (namespace, token); kept once ``save``d."""
        self.limits[key] = limit

    def _encode(self) -> bytes:
        raw: dict[str, Any] = {
            "tokens": self.tokens,
            "limits": [{"namespace": ns, "token": token, **limit.to_json()}
                       for (ns, token), limit in self.limits.items()],
            "queues": self.queues,
        }
        return json.dumps(raw, indent=1).encode()

    async def save(self) -> None:
        """Write the file now (a change is answered only once it is stored)."""
        data = self._encode()
        try:
            await trio.to_thread.run_sync(write_atomic, self.path, data)
        except OSError as exc:
            log.error("failed to persist %s - %s", self.path, exc)
            raise

    def token_valid(self, namespace: str, token: str) -> bool:
        return token in self.tokens.get(namespace, {})

    def add_queue(self, namespace: str, queue: str) -> bool:
        """Remember a queue; True when it is new (asked at every publish: a set, not the
        namespace's list)."""
        key = (namespace, queue)
        if key in self._known:
            return False
        self._known.add(key)
        self.queues.setdefault(namespace, []).append(queue)
        return True

    def forget_queue(self, namespace: str, queue: str) -> bool:
        if (namespace, queue) not in self._known:
            return False
        self._known.discard((namespace, queue))
        queues = self.queues[namespace]
        queues.remove(queue)
        if not queues:
            del self.queues[namespace]
        return True
