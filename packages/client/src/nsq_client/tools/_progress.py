"""``Progress``: a tool's counts and rate. On a terminal, one status line on stderr rewritten
every second; otherwise a log line every ``log_every`` seconds."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import trio

log = logging.getLogger("nsq_client.tools")


class Progress:
    """Counts and rate: a live line on a terminal, a periodic log line elsewhere.

    Args:
        program: the tool's name, at the start of the line.
        stream: where the live line goes (stderr); a terminal means live mode.
        log_every: seconds between log lines when not on a terminal (0: never).
    """

    def __init__(self, program: str, *, stream: Any = None, log_every: float = 60.0,
                 enabled: bool = True) -> None:
        self.program = program
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self.log_every = log_every if enabled else 0.0
        self.counts: dict[str, int] = {}
        self._start = time.monotonic()
        self._last_total = 0
        self._last_time = self._start
        self._drawn = False

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        first = next(iter(self.counts.values()), 0)
        elapsed = max(now - self._last_time, 1e-9)
        rate = (first - self._last_total) / elapsed
        self._last_total, self._last_time = first, now
        parts = ", ".join(f"{n} {name}" for name, n in self.counts.items()) or "0"
        return f"{self.program}: {parts} ({rate:,.1f}/s)"

    async def run(self) -> None:
        """Refresh until cancelled; the live line is cleared at the end."""
        if not self.tty and not self.log_every:
            await trio.sleep_forever()
        try:
            while True:
                await trio.sleep(1.0 if self.tty else self.log_every)
                if self.tty:
                    self.stream.write("\r" + self.line() + "\x1b[K")
                    self.stream.flush()
                    self._drawn = True
                else:
                    log.info("%s", self.line())
        finally:
            if self._drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    def summary(self) -> str:
        total = time.monotonic() - self._start
        parts = ", ".join(f"{n} {name}" for name, n in self.counts.items()) or "nothing"
        return f"{self.program}: {parts} in {total:.1f}s"
