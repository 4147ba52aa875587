"""TCP consumers held by the driver: a Trio thread behind a small blocking interface.

Spark calls a stream reader's planning methods from one plain thread of its driver-side
Python worker, which lives as long as the query. This module runs an
:class:`nsq_client.Consumer` on a Trio loop in a second thread of that process and lets
the planning thread ``take`` messages, ``finish`` them after Spark commits, and ``close``.

Every message taken stays *held*: it is neither finished nor requeued until ``finish``, and a
task of the loop TOUCHes all held messages every third of the message timeout, so a batch
that runs longer than nsqd's ``--msg-timeout`` is not delivered to anyone else meanwhile
(up to nsqd's ``--max-msg-timeout`` from its delivery, NSQ's own bound on a TOUCH).

The consumer's ``max_in_flight`` bounds what is held plus what is buffered: nsqd sends no
more than that before some are finished.

A lost connection is tried again every 2 s (the client library's ``lookupd_poll_interval``,
60 s by default, unless the options set it) and logged by the client library. While the
consumers hold no connection at all, and the nsqd are named (``nsqd``) or nsqlookupd names
some for the topic, the loop fails after the ``timeout`` option with
:class:`.UnreachableError` naming them, which the planning thread raises; a topic no nsqd has
yet is waited for.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import trio
from nsq_client import Consumer, Message

from .discovery import tcp_addresses_of, topic_nsqd
from .errors import ConsumerError, NSQSparkError, UnreachableError
from .options import MAX_RDY, Options

log = logging.getLogger("nsq_spark")


DRAIN_TIMEOUT = 5.0  # seconds closing waits for the answers to leave
RECONNECT_EVERY = 2.0  # seconds between tries of a lost nsqd (unless lookupdPollInterval says)
WATCH_EVERY = 0.5  # seconds between looks at whether any connection is up

T = TypeVar("T")


class TcpConsumers:
    """One Consumer of ``options.topic``/``options.channel`` on every nsqd, in a thread."""

    def __init__(self, options: Options, msg_timeout: float) -> None:
        self._options = options
        self._msg_timeout = msg_timeout
        self._buffer: deque[Message] = deque()
        self._held: set[Message] = set()
        self._arrived: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._error: BaseException | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="nsq-consumer",
                                        daemon=True)
        self._thread.start()
        started.wait()
        self._raise()

    # -- called from the planning thread -------------------------------------------------------
    def take(self, at_most: int, wait: float, accept: Callable[[Message], bool] | None = None
             ) -> list[Message]:
        """Up to ``at_most`` messages, waiting up to ``wait`` seconds for the first one.

        ``accept`` (run on the loop) can keep a message out of the result, e.g. a redelivery
        the caller answers itself; such a message stays held.
        """
        taken: list[Message] = self._call(self._take, at_most, wait, accept)
        return taken

    def finish(self, messages: Iterable[Message]) -> None:
        """FIN the messages (those of a committed batch) and stop holding them."""
        batch = list(messages)
        if batch:
            self._call_sync(self._finish, batch)

    def release(self, messages: Iterable[Message]) -> None:
        """Give messages back to nsqd at once (REQ without delay or backoff)."""
        batch = list(messages)
        if batch:
            self._call_sync(self._release, batch)

    def held(self) -> int:
        return self._call_sync(lambda: len(self._held) + len(self._buffer))

    def close(self) -> None:
        """Close the connections (nsqd gives every unfinished message to someone else) and
        end the thread."""
        if self._thread.is_alive() and self._token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()

    # -- the loop ---------------------------------------------------------------------------------
    def _run(self, started: threading.Event) -> None:
        try:
            trio.run(self._main, started)
        except BaseException as exc:  # reported to the planning thread on its next call
            self._error = exc
            log.error("nsq_spark: the consumers of %s/%s stopped: %r", self._options.topic,
                      self._options.channel, exc)
        finally:
            started.set()

    async def _main(self, started: threading.Event) -> None:
        options = self._options
        # nsqd lets one connection hold at most --max-rdy-count messages (2500 by default),
        # and a batch is held until Spark commits it: more in flight takes more connections.
        count = max(1, math.ceil(options.max_in_flight / MAX_RDY))
        config = options.client_config(
            max_in_flight=math.ceil(options.max_in_flight / count),
            max_attempts=0,  # Spark's query decides, never the client
            # Asked for explicitly, so the TOUCH interval fits whatever nsqd's default is.
            msg_timeout=self._msg_timeout,
            **({} if any(name == "lookupd_poll_interval" for name, _ in options.config)
               else {"lookupd_poll_interval": RECONNECT_EVERY}))
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        self._arrived = trio.Event()
        nsqd = list(options.nsqd)
        if not nsqd and not options.lookupd:
            nsqd = await trio.to_thread.run_sync(tcp_addresses_of, options)
        consumers = [Consumer(options.topic, options.channel or "", config=config,
                              lookupd_http_addresses=list(options.lookupd),
                              nsqd_tcp_addresses=nsqd, drain_timeout=DRAIN_TIMEOUT)
                     for _ in range(count)]
        async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
            for consumer in consumers:
                await stack.enter_async_context(consumer)
                nursery.start_soon(self._pump, consumer)
            nursery.start_soon(self._touch_loop)
            nursery.start_soon(self._watch, consumers, nsqd)
            started.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()
            # Give back what is held, so every message is answered and the graceful close
            # (CLS, then the connection closes once nothing is in flight) writes the FINs
            # queued before it; Go's nsqd would otherwise keep them until they time out.
            self._release([*self._held, *self._buffer])
            self._buffer.clear()

    async def _pump(self, consumer: Consumer) -> None:
        assert self._arrived is not None
        while True:
            message = await consumer.next_message()
            if message is None:
                return
            message.disable_auto_response()
            self._buffer.append(message)
            self._arrived.set()

    async def _watch(self, consumers: list[Consumer], nsqd: list[str]) -> None:
        """Fail with UnreachableError once no consumer has had a connection for the timeout
        while there are nsqd to connect to (see the module docstring)."""
        options = self._options
        down_since: float | None = None
        while True:
            await trio.sleep(WATCH_EVERY)
            if any(consumer.connections for consumer in consumers):
                down_since = None
                continue
            now = trio.current_time()
            if down_since is None:
                down_since = now
            if now - down_since < options.timeout:
                continue
            try:
                where = nsqd or await trio.to_thread.run_sync(topic_nsqd, options)
            except NSQSparkError as exc:  # no nsqlookupd answers
                self._error = exc
            else:
                if not where:  # nsqlookupd answers, and no nsqd has the topic yet: wait
                    down_since = None
                    continue
                self._error = UnreachableError(
                    f"nsqd {', '.join(where)}: no connection to consume {options.what} for "
                    f"{now - down_since:.0f} s (option timeout is {options.timeout:g} s)")
            # Reported by the planning thread's next call (and the one waiting now): the
            # loop itself goes on, so that closing stays orderly.
            log.error("nsq_spark: %s", self._error)
            if self._arrived is not None:
                self._arrived.set()
            return

    async def _touch_loop(self) -> None:
        interval = self._msg_timeout / 3
        while True:
            await trio.sleep(interval)
            for message in (*self._held, *self._buffer):
                if not message.has_responded:
                    message.touch()

    async def _take(self, at_most: int, wait: float,
                    accept: Callable[[Message], bool] | None) -> list[Message]:
        taken: list[Message] = []
        buffer = self._buffer
        with trio.move_on_after(wait):
            while not taken:  # messages ``accept`` keeps out do not end the wait
                while not buffer:
                    self._arrived = trio.Event()
                    await self._arrived.wait()
                    self._raise()
                while buffer and len(taken) < at_most:
                    message = buffer.popleft()
                    self._held.add(message)
                    if accept is None or accept(message):
                        taken.append(message)
                    elif message.has_responded:
                        self._held.discard(message)
        return taken

    def _finish(self, messages: list[Message]) -> None:
        held = self._held
        for message in messages:
            held.discard(message)
            if not message.has_responded:
                message.finish()

    def _release(self, messages: list[Message]) -> None:
        held = self._held
        for message in messages:
            held.discard(message)
            if not message.has_responded:
                message.requeue(0, backoff=False)

    # -- crossing threads ---------------------------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        self._raise()
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def _call_sync(self, fn: Callable[..., T], *args: Any) -> T:
        self._raise()
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def _raise(self) -> None:
        error = self._error
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if isinstance(error, NSQSparkError):
            raise error
        if self._error is not None:
            raise ConsumerError(f"the NSQ consumers stopped: {self._error!r}") from self._error
