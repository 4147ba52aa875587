"""A publisher's connection: requests on the wire matched to nsqd's answers, in order.

nsqd answers each PUB, MPUB and DPUB with exactly one OK or error frame, in the order they
came, so a connection needs no request ids: each publish sent appends a ``Request`` to the
connection's FIFO, and each answer pops the oldest. A ``Tracker`` counts the unanswered
publishes of one caller (one ``pub``, or one ``Pipeline``) and keeps its first error, so that
the caller waits on it alone. What a lost or refused request becomes (sent again elsewhere,
or failed) is the pool's decision: ``LinkOwner``, the ``Producer``.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Protocol

import trio

from ._backoff import Signal
from ._config import Config
from ._conn import Connection, Connector
from ._errors import ConnectionClosed, NSQError, PublishError, ServerError
from ._message import Message

log = logging.getLogger("nsq_client")

#: nsqd could not take the publish (it is exiting, or its disk failed): worth another nsqd.
RETRYABLE = frozenset({"E_PUB_FAILED", "E_MPUB_FAILED", "E_DPUB_FAILED"})


class LinkOwner(Protocol):
    """What a ``Link`` tells its pool (the ``Producer``)."""

    def _rest(self, name: str, reason: str) -> None:
        """Skip the nsqd at ``name`` for a while."""

    def _retry(self, request: Request, cause: NSQError) -> None:
        """Send ``request`` again on another connection, or fail it with ``cause``."""

    def _link_closed(self, link: Link) -> None:
        """``link``'s connection is gone."""


class Tracker:
    """Unanswered publishes of one caller (one ``pub``, or one pipeline) and its first error."""

    __slots__ = ("_event", "_wake_at", "error", "pending")

    def __init__(self) -> None:
        self.pending = 0
        self.error: NSQError | None = None
        self._event: trio.Event | None = None
        self._wake_at = 0

    def done(self, error: NSQError | None = None) -> None:
        self.pending -= 1
        if error is not None and self.error is None:
            self.error = error
        event = self._event
        if event is not None and (self.pending <= self._wake_at or error is not None):
            event.set()

    def done_many(self, count: int) -> None:
        """``count`` publishes answered OK."""
        self.pending -= count
        event = self._event
        if event is not None and self.pending <= self._wake_at:
            event.set()

    def settled(self) -> bool:
        """Nothing pending, or a failure."""
        return self.pending <= 0 or self.error is not None

    async def wait(self, at_most: int) -> None:
        """Until no more than ``at_most`` are pending, or one failed."""
        while self.pending > at_most and self.error is None:
            self._event = trio.Event()
            self._wake_at = at_most
            await self._event.wait()
        self._event = None


# A publish on the wire: (command, its caller's tracker, how many times it was sent). A plain
# tuple, not an object: one is made per message of a pipeline.
Request = tuple[bytes, Tracker, int]


class Link:
    """One producer connection and the FIFO of its unanswered requests."""

    def __init__(self, producer: LinkOwner, address: str, config: Config,
                 connector: Connector | None) -> None:
        self.producer = producer
        self.address = address
        self.pending: deque[Request] = deque()
        self.conn = Connection(address, config, self, connector, read_by_callers=True)
        self.failed = False  # a fatal error frame came: nsqd is closing this connection

    @property
    def usable(self) -> bool:
        return not (self.failed or self.conn.closed)

    def send(self, command: bytes, tracker: Tracker, sends: int = 0) -> None:
        self.pending.append((command, tracker, sends + 1))
        self.conn.write(command)

    async def send_now(self, command: bytes, tracker: Tracker) -> None:
        self.pending.append((command, tracker, 1))
        await self.conn.write_now(command)

    def send_through(self, command: bytes, tracker: Tracker) -> None:
        self.pending.append((command, tracker, 1))
        self.conn.write_through(command)

    # ConnHandler
    def on_response(self, conn: Connection, data: bytes) -> None:
        if not self.pending:
            log.warning("(%s) response %r with nothing pending", self.address, data[:60])
            return
        self.pending.popleft()[1].done()

    def on_ok(self, conn: Connection, count: int) -> None:
        # A run of OKs answers the oldest ``count`` requests; consecutive ones of the same
        # caller (a pipeline) are settled together.
        pending = self.pending
        if count > len(pending):
            log.warning("(%s) %d responses with %d pending", self.address, count, len(pending))
            count = len(pending)
        popleft = pending.popleft
        tracker: Tracker | None = None
        run = 0
        for _ in range(count):
            request_tracker = popleft()[1]
            if request_tracker is not tracker:
                if tracker is not None:
                    tracker.done_many(run)
                tracker = request_tracker
                run = 0
            run += 1
        if tracker is not None:
            tracker.done_many(run)

    def on_error(self, conn: Connection, error: ServerError) -> None:
        if not self.pending:
            log.error("(%s) error with nothing pending - %s", self.address, error)
            return
        request = self.pending.popleft()
        if error.fatal:
            self.failed = True
        if error.code in RETRYABLE:
            # nsqd cannot take publishes (exiting, disk failure): rest it, retry elsewhere.
            self.producer._rest(self.address, f"{error.code} {error.description}")
            self.producer._retry(request, PublishError(error.code, error.description))
        else:
            request[1].done(PublishError(error.code, error.description))

    def on_close(self, conn: Connection) -> None:
        self.producer._link_closed(self)
        pending, self.pending = self.pending, deque()
        cause = ConnectionClosed(f"connection to {self.address} closed"
                                 + (f": {conn.error}" if conn.error else ""))
        for request in pending:
            self.producer._retry(request, cause)

    def on_messages(self, conn: Connection, messages: list[Message]) -> None:
        log.error("(%s) messages on a producer connection, closing it", self.address)
        conn.abort()

    def on_answered(self, conn: Connection, signal: Signal) -> None:  # pragma: no cover
        pass

    def on_finished(self, conn: Connection) -> None:  # pragma: no cover
        pass
