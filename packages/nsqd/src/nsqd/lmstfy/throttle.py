"""lmstfy's throttler: per token, a count of publishes and of consumes in fixed windows of
``interval`` seconds; a window starts with its first request. A request that is not served
(a consume that found nothing, a publish that failed) gives its unit back."""

from __future__ import annotations

from collections.abc import Callable

from .state import Limit


class Throttle:
    def __init__(self, limits: dict[tuple[str, str], Limit],
                 clock: Callable[[], float]) -> None:
        self.limits = limits
        self.clock = clock
        self._windows: dict[tuple[str, str, str], tuple[float, int]] = {}  # -> (end, used)

    def take(self, namespace: str, token: str, action: str) -> bool:
        """Count one ``consume`` or ``produce``; False when over the token's limit."""
        limit = self.limits.get((namespace, token))
        if limit is None:
            return True
        allowed = limit.read if action == "consume" else limit.write
        if allowed <= 0:
            return True
        key = (namespace, token, action)
        now = self.clock()
        end, used = self._windows.get(key, (0.0, 0))
        if now >= end:
            end, used = now + limit.interval, 0
        if used >= allowed:
            return False
        self._windows[key] = (end, used + 1)
        return True

    def give_back(self, namespace: str, token: str, action: str) -> None:
        key = (namespace, token, action)
        window = self._windows.get(key)
        if window is not None and window[1] > 0:
            self._windows[key] = (window[0], window[1] - 1)

    def forget(self, namespace: str, token: str) -> None:
        for action in ("consume", "produce"):
            self._windows.pop((namespace, token, action), None)
