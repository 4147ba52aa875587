"""The channel stream (option ``channel``): micro-batches of a channel, FINished only once Spark
commits them. (Without a channel the topic is read by offset: :mod:`.offset_source`.)

An offset is ``{"offset": n, "topic": t, "channel": c}``: n messages have been planned into
batches by this query so far, and the batch from offset a to b holds the (b - a) messages planned by the
``latestOffset`` call that returned b. The messages of a batch are written to the batch log
(:mod:`.batchlog`) before its end is returned, then handed to executors in the partitions
themselves (or pulled by the executors over HTTP, see :mod:`.pull`); they stay in flight
(held and TOUCHed) until Spark commits the batch, and only then are they FINished. So:

* a message is never lost: until its batch is committed nsqd has it in flight, and
  gives it to the channel again if the driver dies;
* a driver that dies mid-batch is restarted from its checkpoint, Spark asks for the same
  batch again, and gets the same messages from the log; nsqd's redeliveries of them are
  recognised by (nsqd, id) and held for that batch instead of forming a new one;
* a redelivery of a message whose batch was already committed (the driver died between
  Spark's commit and our FIN) is FINished and dropped.

Spark calls ``commit`` lazily (when it plans the next batch) and not always ``stop``, so
every ``latestOffset`` first commits what ``start`` says is done, and ``stop`` commits what
Spark's own commit log says is done (:mod:`.sparklog`); committing twice is a no-op.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .driver import Driver, MessagesPartition, open_driver
from .options import Options
from .pull import PullPartition, read_part
from .rows import messages_batch


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. Built cheaply: Spark also builds one in its planner and pickles
    it to the executors for ``read``; only the driver's calls open connections."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._driver: Driver | None = None
        self._available_now = False

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_driver": None, "_available_now": self._available_now}

    # -- driver ----------------------------------------------------------------------------------
    @property
    def driver(self) -> Driver:
        if self._driver is None:
            self._driver = open_driver(self.options)
        return self._driver

    def _offset(self, n: int) -> dict[str, Any]:
        return {"offset": n, "topic": self.options.topic, "channel": self.options.channel}

    def initialOffset(self) -> dict[str, Any]:
        return self._offset(0)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # A queue has no "latest offset" to stop at: the query takes what is queued and ends
        # once nothing arrives for idleTimeout.
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        at_most = limit.max_rows if isinstance(limit, ReadMaxRows) else math.inf
        return self._offset(self.driver.plan(start["offset"], at_most, self._available_now))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self.driver.partitions(start["offset"], end["offset"])

    def commit(self, end: dict[str, Any]) -> None:
        self.driver.commit(end["offset"])

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None

    # -- executors ---------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, PullPartition):
            return read_part(self.options, partition)
        assert isinstance(partition, MessagesPartition)
        return iter([messages_batch(partition.messages, partition.topic, partition.channel)])
