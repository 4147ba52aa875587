"""Publishing: PUB, MPUB and DPUB over one or more nsqd, pipelined.

Requests on one connection are matched to answers in order (nsqd answers each publish with
exactly one OK or error frame), so any number of publishes can be on the wire at once: the
command goes into the connection's write queue and a small record into its FIFO of pending
requests; the reader pops that FIFO for each answer. Concurrent ``pub`` calls from many tasks
therefore share one round trip, and ``Producer.pipeline()`` lets a single task keep up to
``max_pending`` publishes in flight without waiting for each.

With several nsqd addresses the producer is a pool:

* ``strategy="round_robin"`` (default) spreads publishes over every reachable nsqd;
  ``"failover"`` sticks to one until it fails, then moves to the next.
* An address that cannot be dialled is skipped for 1 s, then 2 s, 4 s ... up to 30 s; a
  publish tries the others first and reconnects when it is due again.
* When a connection dies with publishes unanswered, they are sent again on another
  connection (NSQ is at-least-once: a publish nsqd took just before dying may appear twice).
  So are publishes nsqd refused with E_PUB_FAILED / E_MPUB_FAILED / E_DPUB_FAILED (it is
  shutting down, or its disk failed). Other error frames fail the publish with
  ``PublishError`` carrying NSQ's code.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs
import trio
from nsq_common import commands

from ._config import Config
from ._conn import Connection, Connector
from ._errors import ConnectError, ConnectionClosed, NSQError
from ._pipeline import Pipeline
from ._publishing import Link, Request, Tracker

log = logging.getLogger("nsq_client")

_DOWN_MIN, _DOWN_MAX = 1.0, 30.0


@attrs.define(eq=False)
class _Address:
    name: str
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    down_until: float = 0.0
    failures: int = 0
    last_error: str = ""


class Producer:
    """Publishes to nsqd; use as ``async with Producer("127.0.0.1:4150") as p:``.

    Args:
        nsqd_tcp_addresses: one ``host:port`` or a list of them (a pool).
        strategy: ``"round_robin"`` or ``"failover"`` (see the module docstring).
        config: options; keyword ``options`` override single fields of it
            (``Producer(addr, write_timeout=5)``).
        connector: opens the byte stream to ``(host, port)``; default TCP.

    Each publish waits for nsqd's OK and raises ``PublishError`` (with ``.code``) on an
    error frame, ``ConnectError`` when no nsqd can be reached, ``ConnectionClosed`` when the
    connection died with the publish unanswered and no other nsqd took it.
    """

    def __init__(self, nsqd_tcp_addresses: str | Sequence[str], *, strategy: str = "round_robin",
                 config: Config | None = None, connector: Connector | None = None,
                 **options: Any) -> None:
        if isinstance(nsqd_tcp_addresses, str):
            nsqd_tcp_addresses = [nsqd_tcp_addresses]
        if not nsqd_tcp_addresses:
            raise ValueError("at least one nsqd address is required")
        if strategy not in ("round_robin", "failover"):
            raise ValueError(f"unknown strategy {strategy!r}")
        config = config or Config()
        self.config = attrs.evolve(config, **options) if options else config
        self.strategy = strategy
        self._round_robin = strategy == "round_robin"
        self._addresses = [_Address(a) for a in dict.fromkeys(nsqd_tcp_addresses)]
        # The connected link of each address, by index (None: not connected): the fast path.
        self._slots: list[Link | None] = [None] * len(self._addresses)
        self._connector = connector
        self._links: dict[str, Link] = {}
        self._next = 0
        self._nursery: trio.Nursery | None = None
        self._stack: AsyncExitStack | None = None
        self._closing = False
        self._orphans: deque[tuple[Request, NSQError]] = deque()
        self._orphan_event = trio.Event()

    @property
    def addresses(self) -> list[str]:
        return [a.name for a in self._addresses]

    def connection(self, address: str) -> Connection | None:
        """The open connection to the nsqd at ``address``, None when there is none."""
        link = self._links.get(address)
        return link.conn if link is not None else None

    def unanswered(self, address: str) -> int:
        """Publishes on the wire to the nsqd at ``address`` that it has not answered yet."""
        link = self._links.get(address)
        return len(link.pending) if link is not None else 0

    # -- lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> Producer:
        stack = AsyncExitStack()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        self._stack = stack
        self._nursery.start_soon(self._retry_loop)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection; publishes still unanswered fail with ``ConnectionClosed``."""
        if self._stack is None:
            return
        self._closing = True
        stack, self._stack = self._stack, None
        try:
            for link in list(self._links.values()):
                link.conn.close()
            with trio.move_on_after(self.config.write_timeout) as scope:
                scope.shield = True
                for link in list(self._links.values()):
                    await link.conn.wait_closed()
        finally:
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
            await stack.aclose()

    # -- publishing --------------------------------------------------------------------------------
    async def pub(self, topic: str, body: bytes) -> None:
        """PUB one message and wait for nsqd's OK."""
        await self._publish(commands.pub(topic, body))

    async def mpub(self, topic: str, bodies: Iterable[bytes]) -> None:
        """MPUB several messages in one command (all or none) and wait for the OK."""
        items = list(bodies)
        if not items:
            raise ValueError("mpub needs at least one message")
        await self._publish(commands.mpub(topic, items))

    async def dpub(self, topic: str, delay: float, body: bytes) -> None:
        """DPUB: publish, delivered after ``delay`` seconds."""
        await self._publish(commands.dpub(topic, int(delay * 1000), body))

    async def ping(self) -> None:
        """Connect if needed and send a NOP: raises ``ConnectError`` when no nsqd answers."""
        link = await self._link()
        link.conn.write(commands.nop())

    def pipeline(self, max_pending: int = 1000) -> Pipeline:
        """A single task's pipelined publisher; see ``Pipeline``."""
        return Pipeline(self, max_pending)

    async def _publish(self, command: bytes) -> None:
        tracker = Tracker()
        link = self._ready_link() or await self._link()
        tracker.pending += 1
        await link.send_now(command, tracker)
        if len(link.pending) == 1 and tracker.pending:
            # The only request on the wire: read its answer here rather than be woken by
            # the reader task (one scheduler pass less per round trip).
            await link.conn.read_here(tracker.settled)
        if tracker.pending:
            await tracker.wait(0)
        if tracker.error is not None:
            raise tracker.error

    # -- the pool ----------------------------------------------------------------------------
    def _ready_link(self) -> Link | None:
        """The fast path of ``_link``: the next address per the strategy, when connected."""
        index = self._next
        link = self._slots[index]
        if link is None or link.failed or link.conn.closed:
            return None
        if self._round_robin:
            index += 1
            self._next = index if index < len(self._slots) else 0
        return link

    async def _link(self) -> Link:
        """A usable connection, per the strategy; connects (or reconnects) as needed."""
        if self._stack is None or self._closing:
            raise NSQError("use the Producer in 'async with'")
        addresses = self._addresses
        n = len(addresses)
        start = self._next
        if self.strategy == "round_robin":
            self._next = (start + 1) % n
        chosen = addresses[start]
        link = self._links.get(chosen.name)
        if link is not None and link.usable:
            return link
        now = trio.current_time()
        errors: list[ConnectError] = []
        tried = set()
        if chosen.down_until <= now:
            tried.add(chosen.name)
            try:
                return await self._connect(chosen)
            except ConnectError as exc:
                errors.append(exc)
        order = [addresses[(start + i) % n] for i in range(1, n)]
        for address in order:  # fail over to a connected one
            link = self._links.get(address.name)
            if link is not None and link.usable:
                self._prefer(address)
                return link
        # Then to one we may dial now; and when every address is resting, to any of them.
        candidates = [a for a in order if a.down_until <= now] or [chosen, *order]
        for address in candidates:
            if address.name in tried:
                continue
            try:
                link = await self._connect(address)
            except ConnectError as exc:
                errors.append(exc)
                continue
            self._prefer(address)
            return link
        if len(errors) == 1:
            raise errors[0]
        raise ConnectError("no nsqd reachable: " + "; ".join(map(str, errors))) from (
            errors[-1] if errors else None)

    def _prefer(self, address: _Address) -> None:
        if self.strategy == "failover":
            self._next = self._addresses.index(address)

    async def _connect(self, address: _Address) -> Link:
        async with address.lock:
            link = self._links.get(address.name)
            if link is not None and link.usable:
                return link
            if self._closing:
                raise ConnectError("producer closed")
            link = Link(self, address.name, self.config, self._connector)
            try:
                await link.conn.connect()
            except ConnectError as exc:
                self._rest(address.name, str(exc))
                raise
            address.failures = 0
            address.down_until = 0.0
            assert self._nursery is not None
            await self._nursery.start(link.conn.run)
            self._links[address.name] = link
            self._slots[self._addresses.index(address)] = link
            return link

    def _rest(self, name: str, reason: str) -> None:
        """Skip an address for a while: 1 s, doubling up to 30 s while it keeps failing."""
        for address in self._addresses:
            if address.name == name:
                address.failures += 1
                address.last_error = reason
                delay = min(_DOWN_MIN * 2 ** (address.failures - 1), _DOWN_MAX)
                address.down_until = trio.current_time() + delay
                log.warning("(%s) unavailable, retry in %.0fs - %s", name, delay, reason)

    def _link_closed(self, link: Link) -> None:
        if self._links.get(link.address) is link:
            del self._links[link.address]
        self._slots = [None if slot is link else slot for slot in self._slots]

    def _retry(self, request: Request, cause: NSQError) -> None:
        """A request lost with its connection: send it again elsewhere, or fail it."""
        _, tracker, sends = request
        if self._closing or sends > len(self._addresses):
            tracker.done(cause)
            return
        self._orphans.append((request, cause))
        self._orphan_event.set()

    async def _retry_loop(self) -> None:
        while True:
            await self._orphan_event.wait()
            self._orphan_event = trio.Event()
            while self._orphans:
                request, cause = self._orphans.popleft()
                try:
                    link = await self._link()
                except NSQError as exc:  # no nsqd reachable, or the producer is closing
                    request[1].done(ConnectionClosed(f"{cause}; {exc}"))
                    continue
                link.send(*request)


@asynccontextmanager
async def open_producer(nsqd_tcp_addresses: str | Sequence[str],
                        **kwargs: Any) -> AsyncIterator[Producer]:
    """``async with open_producer(addr) as p`` - the same as ``async with Producer(addr)``."""
    async with Producer(nsqd_tcp_addresses, **kwargs) as producer:
        yield producer
