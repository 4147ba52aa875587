"""nsqd's one clock: monotonic time for deadlines, wall time for what messages carry.

Everything in nsqd that reads the time asks the broker's clock, handed down from the broker
(``Broker.clock``, and ``Broker.now``, its ``now``), never ``time`` or Trio directly:
in-flight timeouts, deferrals, the queue scan, heartbeats and output deadlines, lmstfy's
throttle windows and auth expiries read ``now()`` (seconds, Trio's clock, so a deadline from
it may be given to ``trio.move_on_at``); expiries (TTL), due times of delayed jobs and DPUB,
message timestamps and ids, retention, the start time and connection times /stats shows, and
what an import or export of Go's files finds due or expired read ``wall_ns()`` (ns since the
epoch). So a test that runs nsqd on Trio's virtual clock (``trio.testing.MockClock``) with a
``VirtualClock`` moves both together, and a TTL of an hour is tested without waiting an hour.

"Reads the time" means calling ``time.time``/``time_ns``/``monotonic``/``perf_counter`` (any
of ``time``'s clocks), ``datetime.now``/``utcnow``/``today``, or ``trio.current_time``: only
this module does (tests/test_one_clock.py holds that over nsqd's source, with the few
exceptions it names). Waiting is not reading: ``trio.sleep``, ``trio.move_on_after`` and
``trio.fail_after`` run on Trio's clock, which a MockClock drives as it drives ``now()``.
"""

from __future__ import annotations

import time
from typing import Protocol

import trio


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds (deadlines, timeouts)."""
        ...

    def wall_ns(self) -> int:
        """Nanoseconds since the epoch (timestamps, expiries, due times)."""
        ...


class SystemClock:
    """The real clocks: Trio's (so a MockClock still drives deadlines) and the system's."""

    __slots__ = ()

    @staticmethod
    def now() -> float:
        return trio.current_time()

    @staticmethod
    def wall_ns() -> int:
        return time.time_ns()


class VirtualClock:
    """Wall time that moves with Trio's clock from ``wall_start_ns``: under a MockClock, a
    TTL, a delay or a retention runs out as soon as the mock clock says so."""

    __slots__ = ("_offset",)

    def __init__(self, wall_start_ns: int | None = None) -> None:
        start = time.time_ns() if wall_start_ns is None else wall_start_ns
        self._offset = start - int(trio.current_time() * 1e9)

    @staticmethod
    def now() -> float:
        return trio.current_time()

    def wall_ns(self) -> int:
        return self._offset + int(trio.current_time() * 1e9)


class FixedClock:
    """A clock set by hand (tests of pure logic with no Trio run)."""

    __slots__ = ("monotonic", "wall")

    def __init__(self, monotonic: float = 0.0, wall: int = 1_700_000_000_000_000_000) -> None:
        self.monotonic = monotonic
        self.wall = wall

    def now(self) -> float:
        return self.monotonic

    def wall_ns(self) -> int:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.monotonic += seconds
        self.wall += int(seconds * 1e9)
