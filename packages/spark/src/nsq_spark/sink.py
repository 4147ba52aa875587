"""The sink: ``df.write.format("nsq")`` and ``df.writeStream.format("nsq")`` publish rows.

::

    (df.selectExpr("CAST(id AS STRING) AS body")
       .write.format("nsq").option("nsqd", "127.0.0.1:4150").option("topic", "events").save())

Save modes are Kafka's: the default (``ErrorIfExists``) and ``append`` publish, ``overwrite``
and ``ignore`` are refused (:mod:`.savemode` says how the default is accepted).

What is published: the ``body`` column, else ``value`` (Kafka's name), binary or string (sent
as its UTF-8 bytes). The topic is the ``topic`` option, else each row's ``topic`` column (a
string); the option wins when both are there, as Kafka's ``topic`` option overrides the
column. Other columns are ignored. The schema is checked when Spark builds the writer, on the
driver, so a wrong DataFrame fails before any task runs (:class:`SchemaError`).

How (``write``, on an executor, once per partition and micro-batch):

* Both writers are Spark's *Arrow* writers: each task gets the partition as Arrow record
  batches, not ``Row`` objects, and nothing in here loops over rows in Python. The bodies of
  a record batch come out of Arrow as one list of ``bytes``; with a ``topic`` column the batch
  is first sorted by topic (stable, vectorised) so each topic is a slice.
* Each topic's rows go in MPUBs of ``batchSize`` messages (default 500), fewer when they
  would pass :data:`MAX_MPUB_BYTES`, over ONE :class:`nsq_client.Producer` connection, with
  up to :data:`MAX_PENDING` MPUBs unanswered. Spark's next record batch is fetched in a
  worker thread, so Trio keeps reading nsqd's answers (and heartbeats) meanwhile and the
  Arrow decoding overlaps the sending.
* Which nsqd: the ``nsqd`` addresses, else every nsqd nsqlookupd's ``/nodes`` lists (any
  nsqd takes any topic; asked once per worker process every :data:`NODES_TTL` seconds), else
  the ``nsqdHttp`` ones. Partition ``p`` starts at address ``p mod n`` (tasks spread over the
  nsqd) and fails over to the next when it cannot connect or its connection is lost.
* ``write`` returns only after nsqd answered OK to every MPUB. Any error (a refusal such as
  ``E_BAD_MESSAGE`` for a body over ``--max-msg-size``, no nsqd reachable, a connection lost
  with MPUBs unanswered and nowhere to resend them) raises, Spark retries the task, and the
  retry publishes the whole partition again: at-least-once, a retried partition's rows that
  got through before the failure are published twice.

A null or empty body is an error naming the row and its topic. Kafka can carry a null value
(a tombstone), NSQ cannot carry an empty message (MPUB refuses it with ``E_BAD_MESSAGE``), and
dropping rows silently would break the at-least-once promise; filter them out first if that
is what you want. A null or invalid topic in a ``topic`` column is an error naming it.

The writers hold only the parsed options and the columns' positions, so they pickle as they
are; connections are made inside ``write``, where it runs.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import trio
from nsq_client import NSQError, Producer
from nsq_common import is_valid_topic_name
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from .discovery import all_nsqd
from .errors import NSQSparkError, PublishError, SchemaError
from .options import Options
from .savemode import refuse_overwrite

log = logging.getLogger("nsq_spark")

#: Most bytes in one MPUB: under nsqd's default ``--max-body-size`` (5 MiB) with room to spare.
MAX_MPUB_BYTES = 4 * 1024 * 1024
#: MPUBs sent and not yet answered, per task: enough to keep the connection busy while the
#: next ones are encoded, few enough that a failure has little to resend.
MAX_PENDING = 8
#: How long a worker process reuses the nsqd list that nsqlookupd's ``/nodes`` gave.
NODES_TTL = 30.0


@dataclass(frozen=True)
class Columns:
    """Where the data is in each record batch: column positions, and the fixed topic."""

    body: int
    topic: int | None  # position of the topic column; None: every row goes to ``fixed_topic``
    fixed_topic: str


def columns(schema: StructType, options: Options) -> Columns:
    """Check ``schema`` for the sink (see the module docstring).

    Raises:
        SchemaError: no ``body``/``value`` column of binary or string type, or no ``topic``
            string column when the ``topic`` option is not given.
    """
    by_name = {f.name.lower(): (i, f) for i, f in enumerate(schema.fields)}
    body = by_name.get("body") or by_name.get("value")
    if body is None:
        raise SchemaError("the nsq sink publishes a column named 'body' (or 'value'), of binary "
                          f"or string type; this DataFrame has {schema.fieldNames()}")
    if not isinstance(body[1].dataType, (BinaryType, StringType)):
        raise SchemaError(f"the nsq sink's column {body[1].name!r} must be binary or string, "
                          f"not {body[1].dataType.simpleString()}")
    if not options.topic_column:
        return Columns(body[0], None, options.topic)
    topic = by_name.get("topic")
    if topic is None:
        raise SchemaError('the nsq sink needs the option "topic", or a string column "topic" '
                          f"naming each row's topic; this DataFrame has {schema.fieldNames()}")
    if not isinstance(topic[1].dataType, StringType):
        raise SchemaError(f"the nsq sink's column {topic[1].name!r} must be a string, "
                          f"not {topic[1].dataType.simpleString()}")
    return Columns(body[0], topic[0], "")


@dataclass
class Published(WriterCommitMessage):
    """What one task published: rows per topic, and the nsqd it started with."""

    topics: dict[str, int] = field(default_factory=dict)
    nsqd: str = ""

    @property
    def rows(self) -> int:
        return sum(self.topics.values())


# -- from record batches to MPUBs ---------------------------------------------------------------

def _as_binary(array: pa.Array) -> pa.Array:
    """String columns as their UTF-8 bytes (a zero-copy cast)."""
    if pa.types.is_string(array.type):
        return array.cast(pa.binary())
    if pa.types.is_large_string(array.type):
        return array.cast(pa.large_binary())
    return array


def _check_bodies(bodies: pa.Array, lengths: np.ndarray, topics: pa.Array | None,
                  fixed_topic: str) -> None:
    """Raises SchemaError for the first null or empty body, naming its row and topic."""
    bad: int | None = None
    if bodies.null_count:
        bad = int(np.flatnonzero(bodies.is_null().to_numpy(zero_copy_only=False))[0])
    elif len(lengths) and lengths.min() == 0:
        bad = int(np.flatnonzero(lengths == 0)[0])
    if bad is None:
        return
    topic = fixed_topic if topics is None else topics[bad].as_py()
    what = "a null" if bodies[bad].as_py() is None else "an empty"
    raise SchemaError(f"row {bad} of a record batch for topic {topic!r} has {what} body: NSQ "
                      "cannot carry an empty message (filter such rows out before writing)")


def _split(bodies: pa.Array, lengths: np.ndarray, batch_size: int) -> Iterator[list[bytes]]:
    """The bodies as lists of at most ``batch_size`` and about :data:`MAX_MPUB_BYTES`."""
    n = len(bodies)
    items = bodies.to_pylist()
    if int(lengths.sum()) + 4 * n <= MAX_MPUB_BYTES:
        for start in range(0, n, batch_size):
            yield items[start:start + batch_size]
        return
    ends = np.cumsum(lengths + 4)  # MPUB bytes up to and including each message
    start = 0
    while start < n:
        before = int(ends[start - 1]) if start else 0
        end = min(start + batch_size,
                  int(np.searchsorted(ends, before + MAX_MPUB_BYTES, side="right")))
        end = max(end, start + 1)  # one message over the limit goes alone; nsqd will judge it
        yield items[start:end]
        start = end


def chunks(batch: pa.RecordBatch, where: Columns, batch_size: int
           ) -> Iterator[tuple[str, list[bytes]]]:
    """``(topic, bodies)`` MPUBs for one record batch.

    Raises:
        SchemaError: a null or empty body, a null or invalid topic.
    """
    bodies = _as_binary(batch.column(where.body))
    lengths = pc.binary_length(bodies).to_numpy(zero_copy_only=False)
    topics = None if where.topic is None else batch.column(where.topic)
    _check_bodies(bodies, lengths, topics, where.fixed_topic)
    if topics is None:
        for part in _split(bodies, lengths, batch_size):
            yield where.fixed_topic, part
        return
    if topics.null_count:
        raise SchemaError("a row has a null topic: the nsq sink's topic column names each "
                          "row's topic")
    encoded = topics.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    for name in names:
        if not is_valid_topic_name(name):
            raise SchemaError(f"invalid topic name {name!r} in the topic column")
    if len(names) == 1:
        for part in _split(bodies, lengths, batch_size):
            yield names[0], part
        return
    # Several topics: a stable sort by topic makes each one a slice, without a Python loop
    # over the rows.
    indices = encoded.indices
    order = pc.sort_indices(indices)
    bodies = bodies.take(order)
    lengths = lengths[order.to_numpy()]
    counts = np.bincount(indices.to_numpy(zero_copy_only=False), minlength=len(names))
    start = 0
    for name, count in zip(names, counts.tolist(), strict=True):
        if count:
            yield from ((name, part) for part in _split(bodies.slice(start, count),
                                                         lengths[start:start + count],
                                                         batch_size))
        start += count


# -- publishing ---------------------------------------------------------------------------------

_nodes_cache: dict[tuple[str, ...], tuple[float, list[str]]] = {}


def _nsqd_for_this_task(options: Options) -> list[str]:
    """Every nsqd, starting at this partition's (``partition id mod n``)."""
    addresses: list[str]
    if options.nsqd:
        addresses = list(options.nsqd)
    else:
        key = options.lookupd + options.nsqd_http
        cached = _nodes_cache.get(key)
        if cached is not None and time.monotonic() - cached[0] < NODES_TTL:
            addresses = cached[1]
        else:
            addresses = all_nsqd(options)
            _nodes_cache[key] = (time.monotonic(), addresses)
    from pyspark import TaskContext

    context = TaskContext.get()
    first = context.partitionId() % len(addresses) if context is not None else 0
    return addresses[first:] + addresses[:first]


def publish(batches: Iterable[pa.RecordBatch], options: Options, where: Columns) -> Published:
    """Publish every row of ``batches`` and wait for nsqd's OKs; the counts it published.

    An empty partition connects to nothing.
    """
    rest = iter(batches)
    first = next((b for b in rest if b.num_rows), None)
    if first is None:
        return Published()
    addresses = _nsqd_for_this_task(options)
    topics: dict[str, int] = {}
    try:
        trio.run(_publish, itertools.chain([first], rest), options, where, addresses, topics)
    except BaseExceptionGroup as group:  # one failure, shown as itself to Spark's user
        error = _single(group)
    except (NSQError, OSError) as exc:
        error = exc
    else:
        return Published(topics, addresses[0])
    if isinstance(error, NSQSparkError):
        raise error
    raise PublishError(f"publishing to nsqd {', '.join(addresses)} failed: {error}") from error


def _single(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


async def _publish(batches: Iterator[pa.RecordBatch], options: Options, where: Columns,
                   addresses: list[str], topics: dict[str, int]) -> None:
    config = options.client_config()
    async with Producer(addresses, strategy="failover", config=config) as producer, \
            producer.pipeline(MAX_PENDING) as pipeline:
        batch: pa.RecordBatch | None = next(batches)
        while batch is not None:
            for topic, bodies in chunks(batch, where, options.batch_size):
                await pipeline.mpub(topic, bodies)
                topics[topic] = topics.get(topic, 0) + len(bodies)
            # Spark decodes the next record batch while Trio reads nsqd's answers.
            batch = await trio.to_thread.run_sync(next, batches, None)


# -- the writers ---------------------------------------------------------------------------------

def _summary(messages: list[WriterCommitMessage | None]) -> tuple[int, int, dict[str, int]]:
    """Rows published, tasks that reported, rows per topic."""
    topics: dict[str, int] = {}
    tasks = 0
    for message in messages:
        if isinstance(message, Published):
            tasks += 1
            for topic, count in message.topics.items():
                topics[topic] = topics.get(topic, 0) + count
    return sum(topics.values()), tasks, topics


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("nsq")``: one :func:`publish` per partition."""

    def __init__(self, options: Options, schema: StructType, overwrite: bool = False) -> None:
        if overwrite:  # a topic has nothing to overwrite: Kafka's sink refuses it too
            raise refuse_overwrite()
        self._options = options
        self._where = columns(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return publish(iterator, self._options, self._where)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, tasks, topics = _summary(messages)
        log.info("published %d rows from %d partitions to nsqd (%s): %s", rows, tasks,
                 self._options.sources, topics)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, tasks, topics = _summary(messages)
        log.warning("write to nsqd (%s) aborted; %d rows from %d partitions were published "
                    "and stay published: %s", self._options.sources, rows, tasks, topics)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("nsq")``: one :func:`publish` per partition of a micro-batch.

    A micro-batch that fails is run again by Spark (from its checkpoint when the query
    restarts), so its rows may be published twice, never lost.
    """

    def __init__(self, options: Options, schema: StructType) -> None:
        self._options = options
        self._where = columns(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return publish(iterator, self._options, self._where)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, tasks, topics = _summary(messages)
        log.info("micro-batch %d: published %d rows from %d partitions to nsqd (%s): %s",
                 batchId, rows, tasks, self._options.sources, topics)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, tasks, topics = _summary(messages)
        log.warning("micro-batch %d aborted; %d rows from %d partitions were published and "
                    "stay published: %s", batchId, rows, tasks, topics)
