"""``Pipeline``: one task keeping many publishes in flight without waiting for each.

A publish is queued on a connection (``Link.send``) and counted in the pipeline's own
``Tracker``; the task waits only when ``max_pending`` are unanswered. The pool that chooses
the connection is the ``Producer`` (``LinkPool``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import trio
from nsq_common import commands

from ._publishing import Link, Tracker

_CHECKPOINT_EVERY = 256
_pub_command = commands.pub  # a global: one lookup less per pipelined publish


class LinkPool(Protocol):
    """Where a pipeline's publishes go (the ``Producer``)."""

    def _ready_link(self) -> Link | None:
        """The next connection per the strategy when one is connected, without waiting."""

    async def _link(self) -> Link:
        """A usable connection, connecting as needed."""


class Pipeline:
    """Keeps up to ``max_pending`` publishes of one task in flight.

    ``await pl.pub(...)`` returns as soon as the command is queued, waiting only while
    ``max_pending`` publishes are unanswered. The first failure is raised by the next call,
    or by ``flush()`` / leaving ``async with``, which wait for every answer::

        async with producer.pipeline(max_pending=500) as pl:
            for line in lines:
                await pl.pub("events", line)
    """

    def __init__(self, producer: LinkPool, max_pending: int) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        self._producer = producer
        self._max = max_pending
        self._tracker = Tracker()
        self._since_checkpoint = 0

    @property
    def pending(self) -> int:
        return self._tracker.pending

    async def pub(self, topic: str, body: bytes) -> None:
        # _take_slot inlined (a call per message cost about 20% of a pipelined publish's own
        # time, bench: Pipeline.pub with a stand-in connection): this runs once per message.
        tracker = self._tracker
        if tracker.error is not None:
            raise tracker.error
        link = self._producer._ready_link() if tracker.pending < self._max else None
        if link is None:
            link = await self._wait_slot()
        else:
            tracker.pending += 1
        link.send(_pub_command(topic, body), tracker)
        self._since_checkpoint += 1
        if self._since_checkpoint >= _CHECKPOINT_EVERY:
            self._since_checkpoint = 0
            await trio.lowlevel.checkpoint()

    async def mpub(self, topic: str, bodies: Iterable[bytes]) -> None:
        items = list(bodies)
        if not items:
            raise ValueError("mpub needs at least one message")
        # A whole batch: worth sending at once rather than waiting for the writer task.
        await self._send(commands.mpub(topic, items), through=True)

    async def dpub(self, topic: str, delay: float, body: bytes) -> None:
        await self._send(commands.dpub(topic, int(delay * 1000), body))

    async def flush(self) -> None:
        """Wait for every answer; raise the first failure."""
        await self._tracker.wait(0)
        self._raise()

    def _take_slot(self) -> Link | None:
        """Count one more publish and return the connection to send it on, when neither
        needs waiting for (room in the window, a connection ready); None otherwise.

        Raises:
            NSQError: an earlier publish of the pipeline failed.
        """
        tracker = self._tracker
        if tracker.error is not None:
            raise tracker.error
        if tracker.pending >= self._max:
            return None
        link = self._producer._ready_link()
        if link is not None:
            tracker.pending += 1
        return link

    async def _wait_slot(self) -> Link:
        """``_take_slot`` when it had to wait: for room in the window, then a connection."""
        tracker = self._tracker
        if tracker.pending >= self._max:
            await tracker.wait(self._max - 1)
            self._raise()
        producer = self._producer
        link = producer._ready_link() or await producer._link()
        tracker.pending += 1
        return link

    async def _send(self, command: bytes, through: bool = False) -> None:
        tracker = self._tracker
        link = self._take_slot() or await self._wait_slot()
        if through:
            link.send_through(command, tracker)
        else:
            link.send(command, tracker)
        # Queueing does not yield; yield now and then so the writer sends as we go.
        self._since_checkpoint += 1
        if self._since_checkpoint >= _CHECKPOINT_EVERY:
            self._since_checkpoint = 0
            await trio.lowlevel.checkpoint()

    def _raise(self) -> None:
        error = self._tracker.error
        if error is not None:
            raise error

    async def __aenter__(self) -> Pipeline:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            await self.flush()
