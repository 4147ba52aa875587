"""Consumer backoff, as go-nsq does it: a pure state machine with an injected clock.

Every answered message sends a signal: FIN is *resume*, REQ with backoff is *backoff*, REQ
without backoff is *continue*. The machine keeps a counter and, while paused, a deadline::

    signal      counter                                  then
    ---------   --------------------------------------   -------------------------------------
    resume      -1 if > 0                                 0 (and it changed): RESUME, every
    backoff     +1 if strategy(counter + 1) <= max        connection back to its RDY share;
    continue    unchanged                                 > 0: PAUSE for strategy(counter),
                                                          RDY 0 everywhere, then one RDY 1

While a pause runs (``paused``), signals are ignored: the messages that were already in
flight when it began say nothing new about the downstream. When the pause ends the caller
sends RDY 1 to one connection to test the waters (``expire``); the answer to that message
moves the counter again. So five failures in a row climb 2 s, 4 s, 8 s, 16 s, 32 s (with a
1 s multiplier) and it takes five successes in a row to climb back down to full speed.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable

import attrs


class Signal(enum.Enum):
    RESUME = "resume"
    BACKOFF = "backoff"
    CONTINUE = "continue"


class Action(enum.Enum):
    NONE = "none"
    PAUSE = "pause"  # RDY 0 everywhere, then wait ``Backoff.pause_for`` seconds
    RESUME = "resume"  # leave backoff: every connection back to its share


def exponential(multiplier: float) -> Callable[[int], float]:
    """go-nsq's ExponentialStrategy: ``multiplier * 2**attempt``."""

    def strategy(attempt: int) -> float:
        return multiplier * (2.0 ** attempt)

    return strategy


def full_jitter(multiplier: float, rng: random.Random) -> Callable[[int], float]:
    """go-nsq's FullJitterStrategy: uniform in ``[0, multiplier * 2**attempt)``."""

    def strategy(attempt: int) -> float:
        return rng.random() * multiplier * (2.0 ** attempt)

    return strategy


@attrs.define(eq=False)
class Backoff:
    """The backoff counter and pause deadline of one consumer.

    Args:
        strategy: attempt number -> pause length in seconds.
        max_duration: the longest pause; the counter stops climbing past it.
    """

    strategy: Callable[[int], float]
    max_duration: float
    counter: int = 0
    # Deadline of the running pause (clock seconds), None when no pause runs.
    paused_until: float | None = None
    pause_for: float = 0.0

    @property
    def in_backoff(self) -> bool:
        """True while the counter is above zero (paused, or probing with RDY 1)."""
        return self.counter > 0

    @property
    def paused(self) -> bool:
        return self.paused_until is not None

    def signal(self, signal: Signal, now: float) -> Action:
        """Record a message outcome; say what to do with RDY."""
        if self.paused_until is not None:
            return Action.NONE
        counter = self.counter
        if signal is Signal.RESUME:
            if counter == 0:
                return Action.NONE  # the common case, kept cheap
            self.counter = counter - 1
            if self.counter == 0:
                return Action.RESUME
        elif signal is Signal.BACKOFF and self.strategy(counter + 1) <= self.max_duration:
            self.counter = counter + 1
        if self.counter == 0:
            return Action.NONE
        return self._pause(min(self.strategy(self.counter), self.max_duration), now)

    def _pause(self, duration: float, now: float) -> Action:
        self.pause_for = duration
        self.paused_until = now + duration
        return Action.PAUSE

    def expire(self) -> None:
        """The pause is over; the caller sends RDY 1 to one connection."""
        self.paused_until = None
        self.pause_for = 0.0

    def retry_later(self, now: float, duration: float = 1.0) -> Action:
        """No connection to test with: pause ``duration`` more, counter unchanged (go-nsq: 1 s)."""
        return self._pause(duration, now)
