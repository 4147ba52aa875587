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
from typing import TYPE_CHECKING, Any

from ._message import Message

if TYPE_CHECKING:
    from ._consumer import Consumer

log = logging.getLogger("nsq_client")

Handler = Callable[[Message], Awaitable[Any] | Any]

# Taking a queued message does not yield to Trio; once every this many, it does.
CHECKPOINT_EVERY = 512


async def handler_worker(consumer: Consumer, handler: Handler) -> None:
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
            if message._auto and not message._responded:
                message.requeue()
            continue
        if message._auto and not message._responded:
            message.finish()


class MessageIterator:
    """``async for`` over a consumer: asking for the next message answers (FIN) the previous
    one, unless it was answered already."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self._current: Message | None = None

    def __aiter__(self) -> MessageIterator:
        return self

    async def __anext__(self) -> Message:
        current = self._current
        if current is not None and current._auto and not current._responded:
            current._responded = True  # Message.finish(), inlined
            current._conn.finish_message(current)
        consumer = self._consumer
        queue = consumer._queue
        # Fast path of next_message(), inlined: this runs once per message.
        if queue and consumer._handed_since_checkpoint < CHECKPOINT_EVERY:
            message = queue[0]
            conn = message._conn
            limit = consumer._max_attempts
            if not conn.closed and (message.attempts <= limit or not limit):
                queue.popleft()
                conn.queued -= 1
                consumer._handed_since_checkpoint += 1
                self._current = message
                return message
        self._current = None
        next_message = await consumer.next_message()
        if next_message is None:
            raise StopAsyncIteration
        self._current = next_message
        return next_message

    def settle(self, failed: bool) -> None:
        """FIN the last message (REQ it when ``failed``) unless it was answered."""
        current, self._current = self._current, None
        if current is None or not current._auto or current._responded or current._conn.closed:
            return
        if failed:
            current.requeue(backoff=False)
        else:
            current.finish()
