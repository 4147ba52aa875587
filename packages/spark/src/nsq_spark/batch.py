"""Channel batch reads: ``spark.read.format("nsq")`` with a ``channel`` takes what the channel
holds now, as a DataFrame (without a channel the log is read by offset, repeatably:
:mod:`.offset_source`).

::

    df = (spark.read.format("nsq").option("lookupd", "127.0.0.1:4161")
          .option("topic", "clicks").option("channel", "archive")
          .option("maxMessages", 50000).option("idleTimeout", "2s").load())

Planning (driver): the nsqd that have the topic are ``nsqd`` (TCP addresses, taken as they
are), else those nsqlookupd's ``/lookup?topic=`` names, else those behind ``nsqdHttp``
(their ``/info`` gives the TCP port). ``maxMessages`` (default :data:`DEFAULT_MAX_MESSAGES`)
is split evenly over them, and each nsqd's share again into pieces of at most
``maxInFlight``, and at most 2500 (nsqd's default ``--max-rdy-count``): one
:class:`NsqdShare` partition per piece. The split is needed because a message is finished
only once the task has handed over its last row, so one connection can hold no more than its
RDY count; several partitions on one nsqd are several consumers of the channel, and nsqd
spreads the messages over them.

Reading (executor, :meth:`BatchReader.read`): a :class:`nsq_client.Consumer` of the channel
on that nsqd (``max_in_flight`` = the piece, ``max_attempts`` 0 so the client never gives a
message up on its own) runs on a Trio loop in a thread of the Python worker; the generator
takes messages from it until the piece is full or nothing arrived for ``idleTimeout`` (default
1 s: the only wait, it is how "what is queued now" ends), and yields them as Arrow record
batches (no per-row tuple for Spark to convert).

Delivery is at-least-once. Messages are FINished only when the generator ends, after its last
row went to Spark. A task that fails, or whose iterator is closed early, gives its messages
back with REQ (no delay) before closing; one whose worker dies sends nothing, and nsqd
delivers those messages again once their ``msgTimeout`` passes (nsqd's ``--msg-timeout``,
60 s by default). Either way a retried task or a later read sees them again. A task must
therefore hand its rows over within ``msgTimeout``, or nsqd gives them to another partition
too: keep ``maxInFlight`` pieces small enough for that.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import trio
from nsq_client import Consumer, Message
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .discovery import topic_nsqd
from .errors import UnreachableError
from .options import MAX_RDY, Options
from .rows import record_batch

log = logging.getLogger("nsq_spark")

#: Messages a batch read takes when ``maxMessages`` is not given: enough for a look at a
#: channel or a modest backlog, small enough that a forgotten option does not pull a whole
#: production backlog into one DataFrame.
DEFAULT_MAX_MESSAGES = 10_000

#: Messages per Arrow record batch handed to Spark.
CHUNK = 500



# -- planning --------------------------------------------------------------------------------------

@dataclass
class NsqdShare(InputPartition):
    """One partition: take up to ``limit`` messages from the nsqd at ``address`` (TCP)."""

    address: str
    limit: int


def plan(addresses: list[str], total: int, cap: int) -> list[NsqdShare]:
    """``total`` split evenly over ``addresses``, each share in even pieces of at most ``cap``.

    Pieces are listed round-robin over the nsqd, so the tasks Spark runs first spread over
    every nsqd rather than queue on the first.
    """
    per_nsqd: list[list[NsqdShare]] = []
    n = len(addresses)
    for i, address in enumerate(addresses):
        share = total // n + (1 if i < total % n else 0)
        pieces = -(-share // cap)
        per_nsqd.append([NsqdShare(address, share // pieces + (1 if j < share % pieces else 0))
                         for j in range(pieces)])
    out: list[NsqdShare] = []
    for j in range(max(map(len, per_nsqd), default=0)):
        out.extend(pieces[j] for pieces in per_nsqd if j < len(pieces))
    return out


class BatchReader(DataSourceReader):
    """``spark.read.format("nsq")``; holds only its options (see the module docstring)."""

    def __init__(self, options: Options) -> None:
        self._options = options

    def partitions(self) -> list[InputPartition]:
        options = self._options
        limit = options.max_messages or DEFAULT_MAX_MESSAGES
        shares = plan(topic_nsqd(options), limit, min(options.max_in_flight, MAX_RDY))
        log.info("reading up to %d messages of %s/%s from %s in %d partitions", limit,
                 options.topic, options.channel, options.sources, len(shares))
        return list(shares)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, NsqdShare):  # Spark's placeholder when no nsqd has the topic
            return iter(())
        return read_share(self._options, partition)


# -- reading ---------------------------------------------------------------------------------------

def read_share(options: Options, share: NsqdShare) -> Iterator[pa.RecordBatch]:
    """Take ``share`` and yield it; FIN it all at the end, or REQ it all if we are stopped
    before (an error, or Spark closing the iterator)."""
    taker = _Taker(options, share)
    handed_over = False
    try:
        for messages in taker.chunks():
            yield _messages_batch(messages, share.address, options)
            for message in messages:
                message.body = b""  # Spark has it; hold only what FIN needs
        handed_over = True
    finally:
        taker.close(finish=handed_over)


def _messages_batch(messages: list[Message], nsqd: str, options: Options) -> pa.RecordBatch:
    return record_batch([m.id for m in messages], [m.body for m in messages],
                        [m.timestamp for m in messages], [m.attempts for m in messages], nsqd,
                        options.topic, options.channel or "")


_Item = list[Message] | BaseException | None


class _Taker:
    """A Consumer on a Trio loop in its own thread, taking one share of messages.

    The thread puts chunks of messages on a queue for the generator (``chunks``), then
    ``None``; it waits for ``close`` to say whether to FIN or REQ what it holds, sends CLS
    first (so nsqd sends nothing more once answers free its RDY), answers, and closes.
    """

    def __init__(self, options: Options, share: NsqdShare) -> None:
        self._options = options
        self._share = share
        self._items: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._closing = threading.Event()
        self._finish = False
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True,
                                        name=f"nsq-read-{share.address}")
        self._thread.start()

    def chunks(self) -> Iterator[list[Message]]:
        """The messages as they arrive.

        Raises:
            UnreachableError: the nsqd could not be reached; or what the loop raised.
        """
        while True:
            item = self._items.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self, *, finish: bool) -> None:
        """FIN (``finish``) or REQ every message taken, then close and join the thread.
        Never raises: the rows are Spark's by now, and a lost FIN only means a redelivery."""
        self._finish = finish
        self._closing.set()
        self._thread.join()

    async def _main(self) -> None:
        options, share = self._options, self._share
        config = options.client_config(max_in_flight=share.limit, max_attempts=0,
                                       msg_timeout=options.msg_timeout or 0.0)
        try:
            async with Consumer(options.topic, options.channel or "", config=config,
                                nsqd_tcp_addresses=[share.address]) as consumer:
                if not consumer.connections:
                    raise UnreachableError(f"nsqd {share.address}: could not subscribe to "
                                           f"{options.topic}/{options.channel}")
                held = await self._take(consumer)
                self._items.put(None)
                await trio.to_thread.run_sync(self._closing.wait)
                await self._answer(consumer, held)
        except BaseException as exc:
            if not self._closing.is_set():
                self._items.put(exc)
                await trio.to_thread.run_sync(self._closing.wait)
            else:
                log.warning("closing the read of %s/%s on %s: %r", options.topic,
                            options.channel, share.address, exc)

    async def _take(self, consumer: Consumer) -> list[Message]:
        """Messages until the share is full or none came for ``idle_timeout``; handed over
        in chunks of :data:`CHUNK` as they come."""
        held: list[Message] = []
        chunk: list[Message] = []
        limit, idle = self._share.limit, self._options.idle_timeout
        with trio.CancelScope() as waiting:
            while len(held) < limit and not self._closing.is_set():
                waiting.deadline = trio.current_time() + idle
                message = await consumer.next_message()
                if message is None:
                    break
                held.append(message)
                chunk.append(message)
                if len(chunk) >= CHUNK:
                    self._items.put(chunk)
                    chunk = []
        if chunk:
            self._items.put(chunk)
        return held

    async def _answer(self, consumer: Consumer, held: list[Message]) -> None:
        consumer.stop()  # CLS: nsqd sends no more, then the connection closes once all answered
        for message in held:
            if not message.has_responded:
                if self._finish:
                    message.finish()
                else:
                    message.requeue(0, backoff=False)
        await consumer.wait_stopped()
        log.info("%s %d messages of %s/%s on %s", "finished" if self._finish else "requeued",
                 len(held), self._options.topic, self._options.channel, self._share.address)
