"""Handing messages to user code, and answering for it when it does not.

Two forms over the same queue (``Consumer.next_message``):

* ``async for message in consumer`` (``MessageIterator``): asking for the next message
  FINishes the previous one unless it was answered; a task that starts a new loop FINishes
  what its last loop left; the consumer's ``async with`` settles the rest when it ends (FIN,
  or REQ if it ends by an exception).
* ``consumer.run(handler, concurrency=N)``: N workers (``handler_worker``), a fixed pool, no
  task per message. A handler that returns FINishes its message, one that raises REQueues it
  with go-nsq's default delay and a backoff signal.

Either way a message whose ``disable_auto_response()`` was called, or that was answered
already, is left alone.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ._message import Message, connection_of, finish_unanswered, requeue_unanswered

log = logging.getLogger("nsq_client")

Handler = Callable[[Message], Awaitable[Any] | Any]


class MessageSource(Protocol):
    """Where the messages come from (a ``Consumer``)."""

    @property
    def topic(self) -> str: ...

    @property
    def channel(self) -> str: ...

    def take_nowait(self) -> Message | None:
        """A queued message when one can be handed out without yielding, else None."""

    async def next_message(self) -> Message | None:
        """The next message, waiting for one; None once the consumer stops."""


async def handler_worker(consumer: MessageSource, handler: Handler) -> None:
    """One of ``Consumer.run``'s workers: take, handle, answer, until the consumer stops."""
    while True:
        message = await consumer.next_message()
        if message is None:
            return
        try:
            result = handler(message)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            log.error("[%s/%s] handler returned error (%r) for msg %s", consumer.topic,
                      consumer.channel, exc, message.id.decode(errors="replace"))
            requeue_unanswered(message)
            continue
        finish_unanswered(message)


class MessageIterator:
    """``async for`` over a consumer: asking for the next message answers (FIN) the previous
    one, unless it was answered already."""

    def __init__(self, consumer: MessageSource) -> None:
        self._consumer = consumer
        self._current: Message | None = None

    def __aiter__(self) -> MessageIterator:
        return self

    async def __anext__(self) -> Message:
        current = self._current
        if current is not None:
            finish_unanswered(current)
        message = self._consumer.take_nowait()
        if message is None:
            self._current = None
            message = await self._consumer.next_message()
            if message is None:
                raise StopAsyncIteration
        self._current = message
        return message

    def settle(self, failed: bool) -> None:
        """FIN the last message (REQ it when ``failed``) unless it was answered."""
        current, self._current = self._current, None
        if current is None or connection_of(current).closed:
            return
        if failed:
            requeue_unanswered(current, backoff=False)
        else:
            finish_unanswered(current)
