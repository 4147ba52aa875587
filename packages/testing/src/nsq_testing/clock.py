"""A wall clock for code that reads the time through a callable (nsqlookupd's registry):
nanoseconds since the epoch that move only when the test moves them."""

from __future__ import annotations

from dataclasses import dataclass

S = 10**9  # nanoseconds in a second


@dataclass
class FakeClock:
    now: int = 1_700_000_000 * S

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * S)
