"""Reading a topic's log by offset: Spark's offsets, repeatable reads, no channel, no FIN.

::

    spark.readStream.format("nsq").option("lookupd", "127.0.0.1:4161")
         .option("topic", "clicks").option("startingOffsets", "earliest").load()

The offsets are Kafka's kind (:mod:`.positions`): per topic, per nsqd (by HTTP address), the
next offset to read; a replicated topic is one partition, ``*``, read from its leader or
another in-sync replica (:mod:`.replicas`), so its offsets outlive a failover. Spark keeps
them in its own offset log, in the writer's checkpoint, so the reader needs no option and
keeps no file: a micro-batch is the range between two offsets Spark recorded, and reading it
again after any crash reads the same messages, as long as nsqd still stores them (a
retention, or a channel that holds them).

The driver side (Spark's calls, in one Python worker of the driver) asks the nsqd for their
bounds (``/topic/read``) each trigger and plans ranges; the executors read the ranges
(:func:`.logread.read_range`). Nothing is held between calls but what Kafka's source holds:
the target of ``Trigger.AvailableNow``, the latest offsets seen (for the progress report) and
when the last batch began (for ``maxTriggerDelay``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from . import logread, replicas
from .errors import DataLossError, OptionError
from .logread import Bounds, LogRange
from .options import EARLIEST, LATEST, Options, Position
from .positions import Flat, Key, behind, flat, nest, prorate, ranges, resolved

log = logging.getLogger("nsq_spark")
clock = time.monotonic  # the clock of maxTriggerDelay (the rest of nsq_spark goes by it too)


def current(options: Options) -> dict[Key, Bounds]:
    """Every partition of the read as it is now, with its bounds.

    Raises:
        UnreachableError: an nsqlookupd or nsqd did not answer within the timeout option.
    """
    found: dict[Key, Bounds] = {}
    for key, readers in replicas.partitions(options).items():
        b = logread.bounds(options, _where(key, readers), key[0])
        if b is not None:
            found[key] = b
    return found


def _where(key: Key, readers: tuple[str, ...]) -> logread.Where:
    """Where a partition is read: its nsqd, or a replicated topic's replicas."""
    return readers if key[1] == replicas.REPLICATED else key[1]


def _on(key: Key) -> str:
    """The partition, for a message: "on nsqd <address>", or "on its replicas"."""
    return "on its replicas" if key[1] == replicas.REPLICATED else f"on nsqd {key[1]}"


def _named(position: Position, now: dict[Key, Bounds], options: Options, option: str) -> Flat:
    """The partitions a per-nsqd JSON option names, checked against the topics read."""
    assert position.offsets is not None
    given = flat(position.offsets)
    for topic, _ in given:
        if options.topic_pattern is None and topic not in options.topics:
            raise OptionError(f"option {option} names topic {topic!r}, which is not read "
                              f"(topics: {', '.join(options.topics)})")
    return given


def _at_time(options: Options, key: Key, now: dict[Key, Bounds], ms: int, *,
             starting: bool) -> int | None:
    found = logread.offset_at(options, _where(key, now[key].readers if key in now else ()),
                              key[0], ms)
    if found is not None or not starting:
        return found
    if options.no_match_latest:
        return LATEST
    raise OptionError(f"no message of topic {key[0]} {_on(key)} was published at or after "
                      f"{ms} (ms since the epoch); option startingOffsetsByTimestampStrategy="
                      "latest starts such an nsqd at its latest offset instead")


def starting_offsets(options: Options, position: Position, now: dict[Key, Bounds]) -> Flat:
    """Where a read starts, per partition; partitions it does not name start at EARLIEST
    (as those that appear later do)."""
    out: Flat = dict.fromkeys(now, EARLIEST)
    if position.kind == "latest":
        out = dict.fromkeys(now, LATEST)
    elif position.kind == "offsets":
        out.update(_named(position, now, options, "startingOffsets"))
    elif position.kind == "timestamp":
        assert position.timestamp is not None
        for key in now:
            out[key] = _starting_at(options, key, now, position.timestamp)
    elif position.kind == "timestamps":
        for key, ms in _named(position, now, options, "startingOffsetsByTimestamp").items():
            out[key] = _starting_at(options, key, now, ms)
    return out


def _starting_at(options: Options, key: Key, now: dict[Key, Bounds], ms: int) -> int:
    found = _at_time(options, key, now, ms, starting=True)
    assert found is not None  # a start finds an offset, LATEST, or raises
    return found


def ending_offsets(options: Options, position: Position, now: dict[Key, Bounds]) -> Flat:
    """Where a batch read ends (exclusive), per partition: the latest unless said."""
    latest = {key: b.end for key, b in now.items()}
    if position.kind == "offsets":
        named = _named(position, now, options, "endingOffsets")
        return {key: latest.get(key, 0) if n == LATEST else n for key, n in named.items()}
    if position.kind in ("timestamp", "timestamps"):
        wanted = (dict.fromkeys(now, position.timestamp) if position.kind == "timestamp"
                  else _named(position, now, options, "endingOffsetsByTimestamp"))
        out = {}
        for key, ms in wanted.items():
            assert ms is not None
            found = _at_time(options, key, now, ms, starting=False)
            out[key] = latest.get(key, 0) if found is None else found
        return out
    return latest


def _data_loss(options: Options, text: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(f"{text}. Set option failOnDataLoss to false to go on without them")
    log.warning("nsq_spark: %s; going on (failOnDataLoss is false)", text)


def _earliest(start: Flat, end: Flat, now: dict[Key, Bounds]) -> Flat:
    """The earliest offset of each partition that a batch reads from its earliest."""
    return {key: now[key].earliest if key in now else end[key] for key in end
            if start.get(key, EARLIEST) == EARLIEST}


def _readers(now: dict[Key, Bounds]) -> dict[Key, tuple[str, ...]]:
    """Where each replicated topic's ranges are read."""
    return {key: b.readers for key, b in now.items() if b.readers}


class OffsetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("nsq")`` without a channel; see the module docstring.
    Spark also pickles it to the executors for :meth:`read`: only the options travel."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._target: Flat | None = None  # Trigger.AvailableNow: the offsets to stop at
        self._latest: Flat | None = None  # the latest offsets at the last trigger
        self._consumed: Flat | None = None  # where the batch planned then ends
        self._last_trigger: float | None = None  # monotonic time the last batch was planned
        self._now: dict[Key, Bounds] | None = None  # the partitions at the last trigger

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_target": None, "_latest": None, "_consumed": None,
                "_last_trigger": None, "_now": None}

    def initialOffset(self) -> dict[str, Any]:
        position = self.options.starting or Position("latest")  # Kafka's default for streams
        offsets = starting_offsets(self.options, position, current(self.options))
        log.info("nsq_spark: %s read from %s, starting at %s", self.options.what,
                 self.options.sources, nest(offsets))
        return nest(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger:
            return ReadMaxRows(self.options.max_per_trigger)
        if self.options.min_per_trigger:
            return ReadMinRows(self.options.min_per_trigger)
        return super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {key: b.end for key, b in current(self.options).items()}
        log.info("nsq_spark: Trigger.AvailableNow reads %s up to %s", self.options.what,
                 nest(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        options = self.options
        begin = flat(start)
        now = self._now = current(options)
        latest = {key: b.end for key, b in now.items()}
        for key, b in now.items():
            s = begin.get(key)
            if s is not None and s > b.end and key[1] == replicas.REPLICATED:
                # Not data loss: a replica whose high watermark is behind answered (the new
                # leader's after a failover, until its followers have fetched from it); no
                # replica ever cuts what is committed, and the query read only that.
                latest[key] = s
            elif s is not None and s > b.end:
                # nsqd lost the end of its log (killed with messages only in memory, whose
                # offsets it gives again), or the topic was deleted and made again: as Kafka,
                # go on from where the log ends now (this batch reads nothing of it).
                _data_loss(options, f"the log of topic {key[0]} {_on(key)} now ends at "
                           f"{b.end - 1}, before offset {s} where the query was: offsets "
                           f"{b.end} to {s - 1} were lost, or the topic was made again")
                begin[key] = b.end
        ends = latest
        if self._target is not None:  # AvailableNow: nothing past what was there at its start
            ends = {key: min(e, self._target[key]) for key, e in latest.items()
                    if key in self._target}
        sized = {key: resolved(begin.get(key), now.get(key)) for key in ends}
        if isinstance(limit, ReadMaxRows):
            ends = prorate(limit.max_rows, sized, ends)
        minimum = (limit.min_rows if isinstance(limit, ReadMinRows)
                   else options.min_per_trigger if isinstance(limit, ReadMaxRows) else None)
        if minimum and self._target is None and self._delay(minimum, sized, ends):
            return start
        # A partition not seen now keeps its offset; one at LATEST gets the end it has now
        # (its first batch is empty: replayed, it must read the same, and "now" will move).
        end = {**begin, **ends}
        self._latest, self._consumed = latest, end
        return nest(end)

    def _delay(self, minimum: int, start: Flat, end: Flat) -> bool:
        """minOffsetsPerTrigger: whether to wait for more (fewer are waiting, and less than
        maxTriggerDelay has passed since the last batch)."""
        now = clock()
        waiting = sum(max(0, e - start[key]) for key, e in end.items())
        if (waiting < minimum and self._last_trigger is not None
                and now - self._last_trigger < self.options.max_trigger_delay):
            return True  # no batch yet means none to wait after: the first is planned at once
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The latest offsets, and beside them (Spark's Python sources have no ``metrics``)
        Kafka's per-batch ``min/avg/maxOffsetsBehindLatest``: how far the batch just planned
        ends behind the latest, over the partitions."""
        if self._latest is None:
            return None
        report: dict[str, Any] = dict(nest(self._latest))
        lag = behind(self._latest, self._consumed or {})
        if lag is not None and not report.keys() & _METRICS:
            report.update(zip(_METRICS, (lag[0], round(lag[1], 1), lag[2]), strict=True))
        return report

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        s, e = flat(start), flat(end)
        # the bounds seen when this batch was planned; asked again after a restart, or when
        # the batch reads a partition from its earliest (its first batch: it may have moved)
        now = self._now
        if now is None or any(s.get(key, EARLIEST) == EARLIEST or (
                key[1] == replicas.REPLICATED and key not in now) for key in e):
            now = current(self.options)
        return ranges(s, e, _earliest(s, e, now), readers=_readers(now),
                      min_partitions=self.options.min_partitions,
                      max_records=self.options.max_records_per_partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # nothing to release: offsets are Spark's, and nsqd holds no delivery

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogRange)
        return logread.read_range(self.options, partition)


_METRICS = ("minOffsetsBehindLatest", "avgOffsetsBehindLatest", "maxOffsetsBehindLatest")


class OffsetBatchReader(DataSourceReader):
    """``spark.read.format("nsq")`` without a channel: the offsets from ``startingOffsets``
    (default earliest) to ``endingOffsets`` (default latest, when the read is planned); the
    same offsets read again give the same rows."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        now = current(options)
        start = starting_offsets(options, options.starting or Position("earliest"), now)
        end = ending_offsets(options, options.ending or Position("latest"), now)
        for key, e in end.items():
            s = start.get(key, EARLIEST)
            if s > e:
                raise OptionError(f"topic {key[0]} {_on(key)}: the read starts at {s}, "
                                  f"past where it ends ({e})")
        parts = ranges(start, end, {key: b.earliest for key, b in now.items()},
                       readers=_readers(now), min_partitions=options.min_partitions,
                       max_records=options.max_records_per_partition)
        log.info("nsq_spark: reading %s from %s: %d ranges", options.what, options.sources,
                 len(parts))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LogRange):  # Spark's placeholder when there is nothing
            return iter(())
        return logread.read_range(self.options, partition)
