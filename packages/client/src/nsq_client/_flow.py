"""A consumer's flow control: how many messages each nsqd may send it, and backing off.

Two pure machines decide (``_rdy.RdyController``: the RDY spread over the connections;
``_backoff.Backoff``: go-nsq's backoff states); ``FlowControl`` drives them with Trio's
clock and sends the RDY commands they plan. Its inputs are the consumer's events: a
connection subscribed or closed, a chunk of messages, a message answered (``signal``), a
new ``max_in_flight``; its own tasks are the redistribution tick and the backoff timer.
"""

from __future__ import annotations

import logging
import random

import trio
from nsq_common import commands

from ._backoff import Action, Backoff, Signal, exponential, full_jitter
from ._config import Config
from ._conn import Connection
from ._rdy import Plan, RdyController

log = logging.getLogger("nsq_client")


class FlowControl:
    """RDY and backoff of one consumer (``[topic/channel]`` in its log lines).

    ``rdy`` and ``backoff`` are read by the consumer's per-message paths directly (a call
    less per chunk and per FIN); every change to them goes through the methods here.
    """

    def __init__(self, config: Config, rng: random.Random, topic: str, channel: str) -> None:
        self.topic = topic
        self.channel = channel
        self.rdy = RdyController(config.max_in_flight, config.low_rdy_idle_timeout,
                                 config.low_rdy_timeout, rng)
        strategy = (exponential(config.backoff_multiplier)
                    if config.backoff_strategy == "exponential"
                    else full_jitter(config.backoff_multiplier, rng))
        self.backoff = Backoff(strategy, config.max_backoff_duration)
        self._redistribute_interval = config.rdy_redistribute_interval
        self._nursery: trio.Nursery | None = None
        self._stopped = False

    def start(self, nursery: trio.Nursery) -> None:
        """Backoff timers run in ``nursery`` (the consumer's)."""
        self._nursery = nursery

    def stop(self) -> None:
        """The consumer is closing: answers no longer move RDY or backoff."""
        self._stopped = True

    def is_starved(self, conns: list[Connection]) -> bool:
        """go-nsq's IsStarved: on some connection, the messages handed out and not yet
        answered hold >= 85% of its RDY (nsqd will send no more until some are answered)."""
        for conn in conns:
            rdy = self.rdy.conns.get(conn)
            if rdy is None or conn.closing:
                continue
            held = conn.in_flight - conn.queued
            if held > 0 and held >= int(rdy.rdy * 0.85):
                return True
        return False

    def set_max_in_flight(self, value: int) -> None:
        """New total window; connections get new shares now (0 pauses the consumer)."""
        self._send(self.rdy.set_max_in_flight(value, trio.current_time()))

    def joined(self, conn: Connection, now: float) -> None:
        """A subscribed connection joins the spread (it gets RDY at the next ``rebalance``)."""
        self.rdy.add(conn, conn.max_rdy_count, now)

    def rebalance(self, now: float) -> None:
        """Give every connection its share, once after a group of them joined."""
        self._send(self.rdy.rebalance(now))

    def closed(self, conn: Connection) -> None:
        """``conn`` is gone: its share goes to the others."""
        self._send(self.rdy.remove(conn, trio.current_time()))

    async def redistribute_loop(self) -> None:
        """Every ``rdy_redistribute_interval``, rotate RDY among idle and busy connections."""
        while True:
            await trio.sleep(self._redistribute_interval)
            if not self.backoff.paused:
                self._send(self.rdy.redistribute(trio.current_time()))

    def signal(self, signal: Signal) -> None:
        """A message was answered: success (RESUME) or failure moves the backoff machine."""
        if self._stopped:
            return
        now = trio.current_time()
        backoff = self.backoff
        action = backoff.signal(signal, now)
        if action is Action.PAUSE:
            log.warning("[%s/%s] backing off for %.3fs (backoff level %d), setting all to RDY 0",
                        self.topic, self.channel, backoff.pause_for, backoff.counter)
            self._send(self.rdy.pause(now))
            assert self._nursery is not None
            self._nursery.start_soon(self._backoff_timer, backoff.pause_for)
        elif action is Action.RESUME:
            log.warning("[%s/%s] exiting backoff, returning all to RDY %d",
                        self.topic, self.channel, self.rdy.share())
            self._send(self.rdy.resume(now))

    async def _backoff_timer(self, duration: float) -> None:
        await trio.sleep(duration)
        if self._stopped:
            return
        now = trio.current_time()
        self.backoff.expire()
        plan = self.rdy.probe(now)
        if plan is None:
            log.warning("[%s/%s] no connection available to resume, backing off for 1s",
                        self.topic, self.channel)
            self.backoff.retry_later(now)
            assert self._nursery is not None
            self._nursery.start_soon(self._backoff_timer, self.backoff.pause_for)
            return
        log.warning("[%s/%s] backoff timeout expired, sending RDY 1", self.topic, self.channel)
        self._send(plan)

    @staticmethod
    def _send(plan: Plan) -> None:
        for conn, count in plan:
            assert isinstance(conn, Connection)
            conn.write(commands.rdy(count))
