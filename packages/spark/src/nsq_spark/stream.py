"""The streaming source: micro-batches of a channel, FINished only once Spark commits them.

An offset is ``{"offset": n, "topic": t, "channel": c}``: n messages have been planned into
batches by this query so far, and the batch from offset a to b holds the (b - a) messages planned by the
``latestOffset`` call that returned b. The messages of a batch are written to the batch log
(:mod:`.batchlog`) before its end is returned, then handed to executors in the partitions
themselves; they stay in flight (held and TOUCHed by :mod:`.tcp`) until Spark commits the
batch, and only then are they FINished. So:

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

import logging
import math
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .batchlog import Batch, BatchLog, Entry, Key
from .errors import BatchLogError
from .options import Options
from .rows import row
from .sparklog import committed_end

log = logging.getLogger("nsq_spark")

POLL_WAIT = 0.5  # seconds latestOffset waits for a first message before saying "nothing new"
PARTITION_SIZE = 2000  # messages per input partition (at least one partition per batch)
MAX_PARTITIONS = 64
KEEP_COMMITTED = 10  # batches whose ids are remembered after their commit
COMMIT_POLL = 0.25  # seconds between looks at Spark's commit log


class MessagesPartition(InputPartition):  # type: ignore[misc]
    """A slice of one batch's messages, carried to the executor in the partition itself."""

    def __init__(self, topic: str, channel: str, entries: list[Entry]) -> None:
        super().__init__(None)
        self.topic = topic
        self.channel = channel
        self.entries = entries

    def __repr__(self) -> str:
        return f"MessagesPartition({self.topic}/{self.channel}, {len(self.entries)} messages)"


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """See the module docstring. Built cheaply: Spark also builds one in its planner and pickles
    it to the executors for ``read``; only the driver's calls open connections."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._state: _DriverState | None = None
        self._available_now = False

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_state": None, "_available_now": self._available_now}

    # -- driver ----------------------------------------------------------------------------------
    @property
    def state(self) -> _DriverState:
        if self._state is None:
            self._state = _DriverState(self.options)
        return self._state

    def _offset(self, n: int) -> dict[str, Any]:
        return {"offset": n, "topic": self.options.topic, "channel": self.options.channel}

    def initialOffset(self) -> dict[str, Any]:
        return self._offset(0)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # A queue has no "latest offset" to stop at: the query takes what is queued and ends
        # once nothing arrives for idleTimeout.
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        at_most = limit.max_rows if isinstance(limit, ReadMaxRows) else math.inf
        return self._offset(self.state.plan(start["offset"], at_most, self._available_now))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        batch = self.state.batch(start["offset"], end["offset"])
        if batch is None:
            return []
        entries = batch.entries
        count = min(MAX_PARTITIONS, max(1, math.ceil(len(entries) / PARTITION_SIZE)))
        size = math.ceil(len(entries) / count) if entries else 0
        channel = self.options.channel or ""
        return [MessagesPartition(self.options.topic, channel, entries[i:i + size])
                for i in range(0, len(entries), size)] if entries else []

    def commit(self, end: dict[str, Any]) -> None:
        self.state.commit(end["offset"])

    def stop(self) -> None:
        if self._state is not None:
            self._state.close()
            self._state = None

    # -- executors ---------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, MessagesPartition)
        topic, channel = partition.topic, partition.channel
        for e in partition.entries:
            yield row(e.id, e.body, e.timestamp, e.attempts, e.nsqd, topic, channel)


class _DriverState:
    """What the driver keeps between Spark's calls: the consumers, the batches planned and not
    yet committed, their live deliveries, and the ids of recently committed batches."""

    def __init__(self, options: Options) -> None:
        from .tcp import TcpConsumers

        self.options = options
        self.log = BatchLog.under_checkpoint(options.checkpoint) if options.checkpoint else None
        if self.log is None:
            log.warning("nsq_spark: no checkpointLocation option for %s/%s: batches are kept in "
                        "memory only; after a driver restart the batch in progress is not "
                        "replayed (its messages are delivered again by nsqd instead)",
                        options.topic, options.channel)
        self.batches: dict[int, Batch] = {}  # end -> planned, not committed
        self.pending: dict[Key, int] = {}  # key -> end of its uncommitted batch
        self.deliveries: dict[int, list[Any]] = {}  # end -> messages to FIN when committed
        # The keys of the last KEEP_COMMITTED committed batches, to drop late redeliveries.
        self.committed_keys: set[Key] = set()
        self.committed_batches: deque[list[Key]] = deque()
        self.committed = 0
        if self.log is not None:
            # Spark's commit log may be ahead of ours: the driver died before telling us.
            self.committed = max(self.log.committed(), self._spark_committed() or 0)
            for batch in self.log.batches():
                self._remember(batch, committed=batch.end <= self.committed)
        # Half of what may be in flight, so the next batch fills while this one is processed.
        self.capacity = max(1, options.max_in_flight // 2)
        # Spark's calls come from one thread; the watcher is a second one.
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.consumers = TcpConsumers(options)
        if self.log is not None:
            threading.Thread(target=self._watch, name="nsq-commit-watch", daemon=True).start()

    def _spark_committed(self) -> int | None:
        assert self.options.checkpoint is not None
        return committed_end(self.options.checkpoint, self.options.topic, self.options.channel or "")

    def _watch(self) -> None:
        """FIN a batch as soon as Spark's commit log has it, instead of when Spark plans the
        next batch: messages are held for less time, and a query stopped right after a batch
        (whose reader Spark may end without calling ``stop``) leaves nothing committed in flight."""
        while not self.closed.wait(COMMIT_POLL):
            try:
                end = self._spark_committed()
                if end is not None and end > self.committed:
                    with self.lock:
                        if not self.closed.is_set():
                            self._commit(end)
            except Exception:  # the planning thread's next commit covers it
                log.exception("nsq_spark: reading Spark's commit log failed")

    def _remember(self, batch: Batch, *, committed: bool) -> None:
        if committed:
            self._committed_keys([e.key for e in batch.entries])
        else:
            self.batches[batch.end] = batch
            for e in batch.entries:
                self.pending[e.key] = batch.end

    def plan(self, start: int, at_most: float, available_now: bool) -> int:
        """Commit what ``start`` says is done, then plan the next batch from what has arrived."""
        with self.lock:
            return self._plan(start, at_most, available_now)

    def _plan(self, start: int, at_most: float, available_now: bool) -> int:
        self._commit(start)
        if self.log is not None:
            for dropped in self.log.discard_after(start):
                self._forget(dropped)
        for end in [e for e in self.batches if e > start]:
            self._forget(self.batches[end])
        room = int(min(at_most, self.capacity))
        wait = self.options.idle_timeout if available_now else POLL_WAIT
        taken: list[Any] = []
        while len(taken) < room:
            got = self.consumers.take(room - len(taken), wait, self._accept)
            if not got:
                break
            taken.extend(got)
            if not available_now:
                break
        if not taken:
            return start
        end = start + len(taken)
        entries = [Entry(m.nsqd_address, m.id.decode(), m.attempts, m.timestamp, m.body)
                   for m in taken]
        batch = Batch(start, end, entries)
        if self.log is not None:
            self.log.write(batch)
        self._remember(batch, committed=False)
        self.deliveries[end] = taken
        return end

    def _accept(self, message: Any) -> bool:
        """Runs on the consumer loop for each message taken: False keeps a redelivery of an
        already planned message out of the new batch."""
        key = (message.nsqd_address, message.id.decode())
        if key in self.committed_keys:
            message.finish()
            return False
        end = self.pending.get(key)
        if end is not None:
            self.deliveries.setdefault(end, []).append(message)
            return False
        return True

    def batch(self, start: int, end: int) -> Batch | None:
        """The batch from ``start`` to ``end``: planned in this process, or replayed from the log."""
        with self.lock:
            return self._batch(start, end)

    def _batch(self, start: int, end: int) -> Batch | None:
        if end <= start:
            return None
        batch = self.batches.get(end)
        if batch is None and self.log is not None:
            batch = self.log.read(end)
            if batch is not None:
                self._remember(batch, committed=False)
        if batch is None:
            log.warning("nsq_spark: batch %d..%d of %s/%s is not in the batch log: it is empty "
                        "here, and nsqd delivers its messages again", start, end,
                        self.options.topic, self.options.channel)
            return None
        if batch.start != start:
            raise BatchLogError(f"batch log mismatch: batch ending at {end} starts at "
                               f"{batch.start}, Spark asked for {start}")
        return batch

    def commit(self, end: int) -> None:
        with self.lock:
            self._commit(end)

    def _commit(self, end: int) -> None:
        if end <= self.committed and not any(e <= end for e in self.batches):
            return
        done = sorted(e for e in self.batches if e <= end)
        messages: list[Any] = []
        for e in done:
            batch = self.batches.pop(e)
            keys = [entry.key for entry in batch.entries]
            for key in keys:
                self.pending.pop(key, None)
            self._committed_keys(keys)
            messages.extend(self.deliveries.pop(e, ()))
        self.consumers.finish(messages)
        self.committed = max(self.committed, end)
        if self.log is not None:
            self.log.commit(self.committed)

    def _committed_keys(self, keys: list[Key]) -> None:
        self.committed_batches.append(keys)
        self.committed_keys.update(keys)
        if len(self.committed_batches) > KEEP_COMMITTED:
            self.committed_keys.difference_update(self.committed_batches.popleft())

    def _forget(self, batch: Batch) -> None:
        """A batch Spark will never ask for: its messages are left to nsqd to deliver again."""
        self.batches.pop(batch.end, None)
        for entry in batch.entries:
            if self.pending.get(entry.key) == batch.end:
                del self.pending[entry.key]
        self.consumers.release(self.deliveries.pop(batch.end, ()))

    def close(self) -> None:
        """FIN what Spark committed without telling us yet, then close (nsqd gives every
        message still held to the channel again)."""
        try:
            with self.lock:
                self.closed.set()
                if self.options.checkpoint is not None:
                    end = self._spark_committed()
                    if end is not None:
                        self._commit(end)
        finally:
            self.consumers.close()
