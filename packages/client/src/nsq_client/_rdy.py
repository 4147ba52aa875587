"""How a consumer spreads its ``max_in_flight`` over its connections: pure, no I/O.

nsqd treats RDY as a standing window (it delivers while in-flight < RDY), not a countdown,
so a connection's RDY is sent once and again only when its share changes (go-nsq >= 1.0.8):

* **share**: ``max_in_flight // connections`` (at least 1, at most max_in_flight), capped by
  each nsqd's ``max_rdy_count``. Recomputed when a connection comes or goes or
  ``max_in_flight`` changes.
* **rotation**: with fewer ``max_in_flight`` than connections, only ``max_in_flight``
  connections hold RDY 1 at a time. Every ``rdy_redistribute_interval`` a holder that has
  been idle for ``low_rdy_idle_timeout`` or held its RDY for ``low_rdy_timeout`` gives it up
  and the free budget goes to randomly chosen connections at 0, preferring ones that did not
  just give theirs up.
* **backoff** (see ``_backoff``): PAUSED = every connection at 0; PROBING = a single RDY 1
  somewhere, rotated the same way when there are several connections.

Invariant: the sum of every connection's RDY never exceeds ``max_in_flight`` (1 while in
backoff). Plans lower RDY before they raise it anywhere, so the invariant holds at every
step, not only at the end.

Each method returns a *plan*: ``[(connection key, new RDY), ...]`` in the order to send.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Hashable, Iterable

import attrs

Plan = list[tuple[Hashable, int]]


class Mode(enum.Enum):
    NORMAL = "normal"
    PAUSED = "paused"
    PROBING = "probing"


@attrs.define(eq=False)
class ConnRdy:
    max_rdy: int
    rdy: int = 0  # what nsqd has been told
    rdy_at: float = 0.0  # when it last changed
    message_at: float = 0.0  # when the last message arrived


@attrs.define(eq=False)
class RdyController:
    """RDY bookkeeping for one consumer.

    Args:
        max_in_flight: the consumer's total window.
        low_rdy_idle_timeout, low_rdy_timeout: seconds, for rotation (go-nsq's names).
        rng: randomness for rotation and probing (inject a seeded one in tests).
    """

    max_in_flight: int
    low_rdy_idle_timeout: float = 10.0
    low_rdy_timeout: float = 30.0
    rng: random.Random = attrs.field(factory=random.Random)
    mode: Mode = Mode.NORMAL
    conns: dict[Hashable, ConnRdy] = attrs.field(factory=dict)
    total: int = 0

    # -- connections -------------------------------------------------------------------------
    def add(self, key: Hashable, max_rdy: int, now: float) -> None:
        """A subscribed connection, at RDY 0; call ``rebalance`` once all new ones are in."""
        self.conns[key] = ConnRdy(max_rdy=max_rdy, rdy_at=now, message_at=now)

    def remove(self, key: Hashable, now: float) -> Plan:
        """A connection is gone: its RDY returns to the pool and the others' shares grow."""
        conn = self.conns.pop(key, None)
        if conn is None:
            return []
        self.total -= conn.rdy
        if self.mode is Mode.PROBING:
            return (self.probe(now) or []) if self.total == 0 and self.conns else []
        return self.rebalance(now)

    def message(self, key: Hashable, now: float) -> None:
        conn = self.conns.get(key)
        if conn is not None:
            conn.message_at = now

    def share(self) -> int:
        """go-nsq's perConnMaxInFlight."""
        n = len(self.conns)
        if n == 0 or self.max_in_flight == 0:
            return 0
        return min(max(1, self.max_in_flight // n), self.max_in_flight)

    # -- normal mode ---------------------------------------------------------------------------
    def set_max_in_flight(self, value: int, now: float) -> Plan:
        if value < 0:
            raise ValueError("max_in_flight must be >= 0")
        self.max_in_flight = value
        return self.rebalance(now)

    def rebalance(self, now: float) -> Plan:
        """Every connection to its share (normal mode only; backoff leaves them alone)."""
        if self.mode is not Mode.NORMAL:
            return []
        if len(self.conns) <= self.max_in_flight or self.max_in_flight == 0:
            share = self.share()
            return self._apply({key: min(share, c.max_rdy) for key, c in self.conns.items()}, now)
        return self._rotate(self.max_in_flight, now, give_up=())

    # -- backoff -----------------------------------------------------------------------------
    def pause(self, now: float) -> Plan:
        """Backoff began (or continues): RDY 0 everywhere."""
        self.mode = Mode.PAUSED
        return self._apply(dict.fromkeys(self.conns, 0), now)

    def probe(self, now: float) -> Plan | None:
        """The pause ended: RDY 1 on one random connection; None when there is none."""
        if not self.conns:
            return None
        self.mode = Mode.PROBING
        return self._rotate(1, now, give_up=())

    def resume(self, now: float) -> Plan:
        """Backoff is over: back to normal shares."""
        self.mode = Mode.NORMAL
        return self.rebalance(now)

    # -- rotation ------------------------------------------------------------------------------
    def needs_redistribution(self) -> bool:
        n = len(self.conns)
        if self.mode is Mode.NORMAL:
            return n > self.max_in_flight > 0
        return self.mode is Mode.PROBING and n > 1

    def redistribute(self, now: float) -> Plan:
        """The periodic pass (every ``rdy_redistribute_interval``): move RDY off idle holders."""
        if not self.needs_redistribution():
            return []
        give_up = [
            key for key, c in self.conns.items()
            if c.rdy > 0 and (now - c.message_at > self.low_rdy_idle_timeout
                              or now - c.rdy_at > self.low_rdy_timeout)
        ]
        budget = self.max_in_flight if self.mode is Mode.NORMAL else 1
        return self._rotate(budget, now, give_up)

    def _rotate(self, budget: int, now: float, give_up: Iterable[Hashable]) -> Plan:
        """Holders keep RDY 1 (unless giving up); the rest of ``budget`` goes to random others."""
        targets = {key: min(c.rdy, 1) for key, c in self.conns.items()}
        given_up = set(give_up)
        for key in given_up:
            targets[key] = 0
        holders = [key for key, rdy in targets.items() if rdy]
        while len(holders) > budget:  # the budget shrank: drop random holders
            targets[holders.pop(self.rng.randrange(len(holders)))] = 0
        free = budget - len(holders)
        if free > 0:
            waiting = [k for k, rdy in targets.items()
                       if not rdy and k not in given_up and self.conns[k].max_rdy > 0]
            chosen = self.rng.sample(waiting, min(free, len(waiting)))
            free -= len(chosen)
            if free > 0:  # not enough fresh ones: the ones that just gave up may go again
                again = [k for k in given_up if self.conns[k].max_rdy > 0]
                chosen += self.rng.sample(again, min(free, len(again)))
            for key in chosen:
                targets[key] = 1
        return self._apply(targets, now)

    def _apply(self, targets: dict[Hashable, int], now: float) -> Plan:
        """Lower first, then raise, never letting the total pass the budget."""
        conns = self.conns
        plan: Plan = []
        raises = []
        for key, target in targets.items():
            conn = conns[key]
            if target < conn.rdy:
                self.total -= conn.rdy - target
                conn.rdy = target
                conn.rdy_at = now
                plan.append((key, target))
            elif target > conn.rdy:
                raises.append((key, target))
        limit = self.max_in_flight if self.mode is Mode.NORMAL else 1
        for key, target in raises:
            conn = conns[key]
            target = min(target, limit - self.total + conn.rdy)
            if target <= conn.rdy:
                continue
            self.total += target - conn.rdy
            conn.rdy = target
            conn.rdy_at = now
            plan.append((key, target))
        return plan
