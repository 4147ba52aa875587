"""Consuming: subscriptions to every nsqd that has the topic, one message queue for the user.

::

    nsqd A ──conn reader──┐                           ┌── async for msg in consumer
    nsqd B ──conn reader──┼──> one deque of Messages ─┤
    nsqd C ──conn reader──┘       (per chunk)         └── run(handler, concurrency=N) workers
              ^                                                  │
              └──── FIN / REQ / TOUCH queued on the message's connection; RDY and backoff
                    from ``_flow.FlowControl`` (over the pure RdyController and Backoff)

No task is started per message: each connection's reader appends a whole chunk of messages
to the deque, and the iterator or the ``concurrency`` workers take them one by one. Answers
are queued on the connection and leave in one send per batch.

Answering: a handler that returns gets its message FINished, one that raises gets it REQueued
(go-nsq's default delay, and a backoff signal). In the ``async for`` form, asking for the
next message FINishes the previous one if it was not answered; leaving the ``async with``
normally FINishes the last one, leaving by an exception REQueues it. Messages past
``max_attempts`` are given to ``on_give_up`` (if set) and FINished without reaching the
handler.

Closing (``stop()``, or leaving ``async with``): CLS on every connection (nsqd stops sending
and answers CLOSE_WAIT), messages still queued and not handed out are REQueued at once
without backoff so another consumer can take them, handed-out ones are awaited (up to
``drain_timeout``), and each connection closes once nothing is in flight on it.
"""

from __future__ import annotations

import inspect
import logging
import random
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs
import trio
from nsq_common import commands, is_valid_channel_name, is_valid_topic_name

from ._backoff import Signal
from ._config import Config
from ._conn import Connection, Connector
from ._discovery import LookupdPoller
from ._errors import ConnectError, ServerError
from ._flow import FlowControl
from ._handling import Handler, MessageIterator, handler_worker
from ._message import Message, connection_of

log = logging.getLogger("nsq_client")

GiveUp = Callable[[Message], Awaitable[Any] | Any]

_CLS = commands.cls()
# Taking a queued message does not yield to Trio; once every this many, it does.
CHECKPOINT_EVERY = 512


@attrs.frozen
class ConsumerStats:
    messages_received: int
    messages_finished: int
    messages_requeued: int
    connections: int


class Consumer:
    """Subscribe to ``topic``/``channel`` on every nsqd found; use with ``async with``.

    Args:
        topic, channel: names (``#ephemeral`` allowed).
        lookupd_http_addresses: nsqlookupd HTTP addresses to discover nsqd through.
        nsqd_tcp_addresses: nsqd TCP addresses to connect to directly (reconnected every
            ``lookupd_poll_interval`` after a loss).
        config: options; keyword ``options`` override fields of it, e.g.
            ``Consumer(t, c, nsqd_tcp_addresses=[a], max_in_flight=100)``.
        on_give_up: called with a message past ``max_attempts`` before it is FINished (go-nsq's
            ``LogFailedMessage``); may be async.
        drain_timeout: how long closing waits for handed-out messages to be answered.
        connector: opens the byte stream to ``(host, port)``; default TCP.
        rng: randomness for jitter, RDY rotation and backoff probes.

    Raises:
        ValueError: a bad name, or no address at all.
    """

    def __init__(self, topic: str, channel: str, *, lookupd_http_addresses: Sequence[str] = (),
                 nsqd_tcp_addresses: Sequence[str] = (), config: Config | None = None,
                 on_give_up: GiveUp | None = None, drain_timeout: float = 30.0,
                 connector: Connector | None = None, rng: random.Random | None = None,
                 **options: Any) -> None:
        if not is_valid_topic_name(topic):
            raise ValueError(f"invalid topic name {topic!r}")
        if not is_valid_channel_name(channel):
            raise ValueError(f"invalid channel name {channel!r}")
        if isinstance(lookupd_http_addresses, str):
            lookupd_http_addresses = [lookupd_http_addresses]
        if isinstance(nsqd_tcp_addresses, str):
            nsqd_tcp_addresses = [nsqd_tcp_addresses]
        if not lookupd_http_addresses and not nsqd_tcp_addresses:
            raise ValueError("lookupd_http_addresses or nsqd_tcp_addresses required")
        config = config or Config()
        self.config = attrs.evolve(config, **options) if options else config
        self.topic = topic
        self.channel = channel
        self.on_give_up = on_give_up
        self.drain_timeout = drain_timeout
        self._nsqd_addresses = list(dict.fromkeys(nsqd_tcp_addresses))
        self._connector = connector
        self._rng = rng or random.Random()
        self._poller = (LookupdPoller(lookupd_http_addresses, topic, self.config, self._rng)
                        if lookupd_http_addresses else None)
        self._flow = FlowControl(self.config, self._rng, topic, channel)
        # The flow's machines, read on the per-chunk and per-FIN paths without a hop.
        self._rdy = self._flow.rdy
        self._backoff = self._flow.backoff
        self._max_attempts = self.config.max_attempts
        self._conns: dict[str, Connection] = {}
        self._connecting: set[str] = set()
        self._queue: deque[Message] = deque()
        self._lot = trio.lowlevel.ParkingLot()
        # Each task's latest ``async for`` iterator. Its last message is answered when that task
        # asks for the next one (from this or a new iterator), or when the consumer closes.
        self._iterators: dict[trio.lowlevel.Task, MessageIterator] = {}
        self._handed_since_checkpoint = 0
        self._handed_out = 0  # taken by the user, not yet answered (for the drain)
        self._stack: AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._bg: trio.Nursery | None = None
        self._stopping = False
        self._stopped = trio.Event()
        self._conns_gone = trio.Event()
        self._answered_event = trio.Event()
        self._received = 0
        self._finished = 0
        self._requeued = 0

    # -- public state --------------------------------------------------------------------------
    @property
    def stats(self) -> ConsumerStats:
        return ConsumerStats(self._received, self._finished, self._requeued, len(self._conns))

    @property
    def connections(self) -> list[str]:
        """Addresses of the nsqd this consumer is subscribed to right now."""
        return list(self._conns)

    @property
    def max_in_flight(self) -> int:
        return self._rdy.max_in_flight

    @property
    def backoff_level(self) -> int:
        """go-nsq's backoff counter: 0 when not backing off."""
        return self._backoff.counter

    @property
    def is_starved(self) -> bool:
        """go-nsq's IsStarved: on some connection, the messages handed out and not yet
        answered hold >= 85% of its RDY (nsqd will send no more until some are answered)."""
        return self._flow.is_starved(list(self._conns.values()))

    def change_max_in_flight(self, value: int) -> None:
        """New total window; connections get new shares now (0 pauses the consumer)."""
        self._flow.set_max_in_flight(value)

    # -- lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> Consumer:
        stack = AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        self._stack, self._nursery = stack, nursery
        self._flow.start(nursery)
        try:
            await nursery.start(self._run_background)
            assert self._bg is not None
            if self._nsqd_addresses:
                failed = await self._connect_many(self._nsqd_addresses, reconnect=True)
                for address in failed:
                    self._bg.start_soon(self._reconnect_loop, address)
            if self._poller is not None:
                await self._bg.start(self._poller.run, self._found)
        except BaseException:
            nursery.cancel_scope.cancel()
            await stack.aclose()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> None:
        if self._stack is None:
            return
        try:
            if exc is None or not isinstance(exc, trio.Cancelled):
                self._settle_current(failed=exc is not None)
                with trio.CancelScope(shield=exc is not None):
                    await self._graceful_stop()
        finally:
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
            stack, self._stack = self._stack, None
            await stack.aclose()

    def stop(self) -> None:
        """Begin a graceful close: iteration and ``run`` end once the queue is given back."""
        if self._stopping:
            return
        self._begin_stop()
        if self._nursery is not None:
            self._nursery.start_soon(self._finish_stop)

    async def wait_stopped(self) -> None:
        """Until a stop finished (every connection closed)."""
        await self._stopped.wait()

    def _begin_stop(self) -> None:
        self._stopping = True
        self._flow.stop()
        if self._bg is not None:
            self._bg.cancel_scope.cancel()
        for conn in list(self._conns.values()):
            conn.write(_CLS)
        queue, self._queue = self._queue, deque()
        for message in queue:
            origin = connection_of(message)
            origin.queued -= 1
            if not message.has_responded and not origin.closed:
                message.requeue(0, backoff=False)
        self._lot.unpark_all()

    async def _graceful_stop(self) -> None:
        if self._stopping:
            await self._stopped.wait()  # stop() is already seeing it through
            return
        self._begin_stop()
        await self._finish_stop()

    async def _finish_stop(self) -> None:
        with trio.move_on_after(self.drain_timeout) as scope:
            if self._conns:
                await self._conns_gone.wait()
        if scope.cancelled_caught:
            log.warning("[%s/%s] drain timed out, %d connections still busy",
                        self.topic, self.channel, len(self._conns))
            for conn in list(self._conns.values()):
                conn.abort()
        self._stopped.set()

    # -- background tasks ------------------------------------------------------------------------
    # Discovery, reconnects and RDY redistribution run in their own nursery, cancelled as a
    # whole when the consumer stops; connections run in the main one, so they can drain.
    async def _run_background(self, *, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            self._bg = nursery
            nursery.start_soon(self._flow.redistribute_loop)
            task_status.started()

    async def _found(self, addresses: list[str]) -> None:
        if self._stopping:
            return
        new = [a for a in dict.fromkeys(addresses)
               if a not in self._conns and a not in self._connecting]
        if new:
            await self._connect_many(new, reconnect=False)

    async def _connect_many(self, addresses: list[str], *, reconnect: bool) -> list[str]:
        """Connect and subscribe to all at once, then give RDY once; returns the failures."""
        ready: list[Connection] = []
        failed: list[str] = []
        self._connecting.update(addresses)

        async def connect(address: str) -> None:
            conn = Connection(address, self.config, self, self._connector)
            try:
                await conn.connect()
                await conn.subscribe(self.topic, self.channel)
            except ConnectError as exc:
                log.error("[%s/%s] (%s) error connecting to nsqd - %s",
                          self.topic, self.channel, address, exc)
                failed.append(address)
                return
            if conn.max_rdy_count < self._rdy.max_in_flight:
                log.warning("(%s) max RDY count %d < consumer max in flight %d, truncation "
                            "possible", address, conn.max_rdy_count, self._rdy.max_in_flight)
            ready.append(conn)

        try:
            async with trio.open_nursery() as nursery:
                for address in addresses:
                    nursery.start_soon(connect, address)
        finally:
            self._connecting.difference_update(addresses)
        if self._stopping:
            for conn in ready:
                conn.abort()
            return failed
        now = trio.current_time()
        assert self._nursery is not None
        for conn in ready:
            self._conns[conn.address] = conn
            self._flow.joined(conn, now)
            await self._nursery.start(self._run_connection, conn, reconnect)
        self._flow.rebalance(now)
        return failed

    async def _run_connection(self, conn: Connection, reconnect: bool, *,
                              task_status: trio.TaskStatus[None]) -> None:
        await conn.run(task_status=task_status)
        if reconnect and not self._stopping and self._bg is not None:
            self._bg.start_soon(self._reconnect_loop, conn.address)

    async def _reconnect_loop(self, address: str) -> None:
        """Direct nsqd addresses: retry every lookupd_poll_interval until connected (go-nsq)."""
        while not self._stopping:
            log.info("(%s) re-connecting in %.3gs", address, self.config.lookupd_poll_interval)
            await trio.sleep(self.config.lookupd_poll_interval)
            if self._stopping or address in self._conns:
                return
            if not await self._connect_many([address], reconnect=True):
                return

    # -- ConnHandler (called from the connections' reader tasks) --------------------------------
    def on_messages(self, conn: Connection, messages: list[Message]) -> None:
        self._received += len(messages)
        if self._stopping:
            for message in messages:
                message.requeue(0, backoff=False)
            return
        self._rdy.message(conn, trio.current_time())
        conn.queued += len(messages)
        self._queue.extend(messages)
        if self._lot:
            self._lot.unpark_all()

    def on_response(self, conn: Connection, data: bytes) -> None:
        if data == b"CLOSE_WAIT":
            conn.closing = True
            if conn.in_flight <= 0:
                conn.close()
        else:
            log.warning("(%s) unexpected response %r", conn.address, data[:100])

    def on_ok(self, conn: Connection, count: int) -> None:
        for _ in range(count):
            self.on_response(conn, b"OK")

    def on_error(self, conn: Connection, error: ServerError) -> None:
        log.error("(%s) protocol error - %s", conn.address, error)

    def on_finished(self, conn: Connection) -> None:
        self._finished += 1
        backoff = self._backoff
        if backoff.counter == 0 and backoff.paused_until is None:
            return  # not backing off: nothing to do (the common case)
        self._flow.signal(Signal.RESUME)

    def on_answered(self, conn: Connection, signal: Signal) -> None:
        if signal is Signal.RESUME:
            self.on_finished(conn)
            return
        self._requeued += 1
        self._flow.signal(signal)

    def on_close(self, conn: Connection) -> None:
        if self._conns.get(conn.address) is conn:
            del self._conns[conn.address]
        self._flow.closed(conn)
        log.info("[%s/%s] (%s) connection closed, %d left", self.topic, self.channel,
                 conn.address, len(self._conns))
        if not self._conns:
            self._conns_gone.set()
        if self._poller is not None and not self._stopping:
            self._poller.recheck()

    # -- handing messages out ----------------------------------------------------------------------
    def take_nowait(self) -> Message | None:
        """The next queued message if it can be handed out now, without yielding; None when
        ``next_message`` must be awaited (nothing queued, a checkpoint is due, or the first
        message needs care: its connection is gone or it is past ``max_attempts``).

        ``next_message``'s fast path, for ``async for``: it runs once per message.
        """
        queue = self._queue
        if queue and self._handed_since_checkpoint < CHECKPOINT_EVERY:
            message = queue[0]
            conn = connection_of(message)
            limit = self._max_attempts
            if not conn.closed and (message.attempts <= limit or not limit):
                queue.popleft()
                conn.queued -= 1
                self._handed_since_checkpoint += 1
                return message
        return None

    async def next_message(self) -> Message | None:
        """The next message, waiting for one; None once the consumer is stopping.

        Messages past ``max_attempts`` never come out of here: they go to ``on_give_up``
        and are FINished.
        """
        while True:
            if self._handed_since_checkpoint >= CHECKPOINT_EVERY:
                # Taking from the queue does not yield; yield now and then (before taking a
                # message, so a cancellation here loses nothing), so the writers send the
                # answers of a batch while the batch is still being handled.
                self._handed_since_checkpoint = 0
                await trio.lowlevel.checkpoint()
            queue = self._queue
            if queue:
                message = queue.popleft()
                conn = connection_of(message)
                conn.queued -= 1
                if conn.closed:
                    continue  # its connection is gone; nsqd will deliver it again
                if self._max_attempts and message.attempts > self._max_attempts:
                    try:
                        await self._give_up(message)
                    except BaseException:
                        if not message.has_responded:
                            queue.appendleft(message)
                        raise
                    continue
                self._handed_since_checkpoint += 1
                return message
            if self._stopping:
                return None
            self._handed_since_checkpoint = 0
            await self._lot.park()

    async def _give_up(self, message: Message) -> None:
        log.warning("[%s/%s] msg %s attempted %d times, giving up", self.topic, self.channel,
                    message.id.decode(errors="replace"), message.attempts)
        if self.on_give_up is not None:
            result = self.on_give_up(message)
            if inspect.isawaitable(result):
                await result
        if not message.has_responded:
            message.finish()

    def __aiter__(self) -> AsyncIterator[Message]:
        self._check_entered()
        task = trio.lowlevel.current_task()
        previous = self._iterators.get(task)
        if previous is not None:
            previous.settle(failed=False)  # a new loop in the same task: the last one is done
        iterator = self._iterators[task] = MessageIterator(self)
        return iterator

    def _settle_current(self, failed: bool) -> None:
        """The ``async with`` ends: FIN what iteration handed out last, or REQ it if the body
        raised."""
        iterators, self._iterators = self._iterators, {}
        for iterator in iterators.values():
            iterator.settle(failed)

    def _check_entered(self) -> None:
        if self._nursery is None:
            raise RuntimeError("use the Consumer in 'async with' first")

    async def run(self, handler: Handler, *, concurrency: int = 1) -> None:
        """Hand every message to ``handler`` with ``concurrency`` workers until stopped.

        A handler that returns FINishes the message, one that raises REQueues it (go-nsq's
        default delay; counts toward backoff), unless it answered the message itself or
        called ``disable_auto_response()``. ``handler`` may be a plain or an async function.
        """
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self._check_entered()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(handler_worker, self, handler)

@asynccontextmanager
async def open_consumer(topic: str, channel: str, **kwargs: Any) -> AsyncIterator[Consumer]:
    """``async with open_consumer(t, c, ...) as c`` - the same as ``async with Consumer(...)``."""
    async with Consumer(topic, channel, **kwargs) as consumer:
        yield consumer

