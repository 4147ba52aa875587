"""How fast the nsq Spark source delivers: messages/s from a topic into Spark's ``noop`` sink,
each way of reading, against what Spark gives on the same machine at the same moment.

    python -m bench.spark_source [--messages 100000] [--size 100] [--per-trigger 10000]
                                 [--runs 3] [--cores 2] [--modes offset,tcp,http] [--sink]

Starts an nsqd (127.0.0.1, kernel-chosen ports, a temporary data directory, a memory queue
large enough for every run) and a ``local[--cores]`` Spark session with the source
registered. Each run publishes ``--messages`` bodies of ``--size`` bytes to a fresh topic
(untimed, through ``/mpub``), then times a streaming query from its start to its end:
``readStream.format("nsq")`` with ``maxOffsetsPerTrigger`` ``--per-trigger`` and
``Trigger.AvailableNow`` into Spark's ``noop`` sink, so what is timed is the source and
Spark's streaming machinery. The modes:

* ``offset``: the topic's log by offset (no channel, ``startingOffsets`` earliest); the rows
  counted from Spark's progress;
* ``tcp``, ``http``: a channel, the driver holding TCP consumers, or the executors pulling
  over HTTP (a checkpoint on the reader too); checked through ``/stats`` to end drained.

The baselines, measured in the same session before each mode's runs (the machine is shared:
its speed changes from minute to minute, so every figure is also given as a ratio to them):

* ``noop``: Spark writing a cached DataFrame of the same rows to ``noop``: what Spark gives
  per row at that moment, with no Python and no NSQ;
* ``python``: a Python streaming data source making the same rows in memory (Arrow record
  batches, no I/O) read the same way as ``offset``: Spark's own cost of a Python source.

Printed per mode: each run's messages/s over the whole query (its start included; the idle
wait that ends AvailableNow too, for a channel), the median, and the median as a ratio to
the noop and python baselines; then the median of each batch's ``latestOffset`` (the driver
plans the batch) and ``addBatch`` (the executors read it into the sink) in ms. ``--sink``
then runs ``bench.spark_sink``'s measurement in the same session. Wall times: a busy machine
makes every figure worse, the ratios less so.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx

from .server import Nsqd

CHANNEL = "bench"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_source", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per body")
    parser.add_argument("--per-trigger", type=int, default=10_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2, help="Spark's local[N]")
    parser.add_argument("--modes", default="offset,tcp,http")
    parser.add_argument("--sink", action="store_true", help="then bench.spark_sink, same session")
    return parser.parse_args(argv)


def _publish(nsqd: Nsqd, topic: str, count: int, size: int, channel: bool) -> None:
    base = f"http://{nsqd.http_address}"
    with httpx.Client(timeout=60) as client:
        client.post(f"{base}/topic/create", params={"topic": topic}).raise_for_status()
        if channel:
            client.post(f"{base}/channel/create", params={"topic": topic, "channel": CHANNEL}
                        ).raise_for_status()
        body = b"\n".join(b"x" * size for _ in range(1000))
        for _ in range(count // 1000):
            client.post(f"{base}/mpub", params={"topic": topic}, content=body).raise_for_status()


def _drained(nsqd: Nsqd, topic: str) -> bool:
    stats = nsqd.stats(topic)
    if not stats:
        return False
    channel = next(c for c in stats["channels"] if c["channel_name"] == CHANNEL)
    return bool(channel["depth"] == 0 and channel["in_flight_count"] == 0)


def _reader(spark: Any, nsqd: Nsqd, mode: str, topic: str, per_trigger: int,
            checkpoint: str) -> Any:
    if mode == "python":
        return (spark.readStream.format("bench_rows").option("rows", topic)
                .option("per_trigger", str(per_trigger)).load())
    reader = (spark.readStream.format("nsq").option("topic", topic)
              .option("maxOffsetsPerTrigger", str(per_trigger)))
    if mode == "offset":
        return reader.option("nsqdHttp", nsqd.http_address).option(
            "startingOffsets", "earliest").load()
    where = ("nsqd", nsqd.tcp_address) if mode == "tcp" else ("nsqdHttp", nsqd.http_address)
    return (reader.option(*where).option("channel", CHANNEL)
            .option("checkpointLocation", checkpoint).option("idleTimeout", "500ms").load())


def _run(spark: Any, nsqd: Nsqd, mode: str, topic: str, per_trigger: int, expected: int
         ) -> tuple[float, list[dict[str, int]]]:
    """Seconds from the query's start to its end, and each batch's ``durationMs``."""
    checkpoint = tempfile.mkdtemp(prefix="bench-spark-source-")
    try:
        start = time.perf_counter()
        query = (_reader(spark, nsqd, mode, topic, per_trigger, checkpoint)
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        seconds = time.perf_counter() - start
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        rows = sum(p["numInputRows"] for p in progress)
        if rows != expected:
            raise SystemExit(f"{mode}: the query read {rows} rows, not {expected}")
        deadline = time.monotonic() + 60
        while mode in ("tcp", "http") and not _drained(nsqd, topic):  # FINs follow the end
            if time.monotonic() > deadline:
                raise SystemExit(f"{mode}: the channel did not drain")
            time.sleep(0.1)
        return seconds, [p["durationMs"] for p in progress]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def noop_rate(spark: Any, rows: int, size: int) -> float:
    """Rows/s of Spark writing a cached DataFrame of ``rows`` bodies to ``noop`` (best of 3)."""
    df = (spark.range(rows, numPartitions=4)
          .selectExpr(f"CAST(lpad(CAST(id AS STRING), {size}, 'x') AS BINARY) AS body").cache())
    df.count()
    try:
        best = min(_timed(lambda: df.write.format("noop").mode("overwrite").save())
                   for _ in range(3))
    finally:
        df.unpersist()
    return rows / best


def _timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _register_python_rows(spark: Any, size: int) -> None:
    """``format("bench_rows")``: a Python streaming source making ``rows`` rows of the nsq
    source's columns in memory, ``per_trigger`` a batch, Arrow record batches of 2,500."""
    import pyarrow as pa
    from nsq_spark import SCHEMA
    from nsq_spark.batchlog import Messages
    from nsq_spark.rows import messages_batch
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

    body = b"x" * size

    class Rows(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, total: int, per_trigger: int) -> None:
            self.total, self.per_trigger = total, per_trigger

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(self.per_trigger)

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
            cap = limit.max_rows if isinstance(limit, ReadMaxRows) else self.total
            return {"n": min(self.total, start["n"] + cap)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition((start["n"], end["n"]))] if end["n"] > start["n"] else []

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            first, last = partition.value
            for at in range(first, last, 2500):
                n = min(2500, last - at)
                ids = [b"%016x" % i for i in range(at, at + n)]
                yield messages_batch(Messages.build("bench:1", ids, [0] * n, [0] * n, [body] * n),
                                     "bench", None)

    class RowsSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_rows"

        def schema(self) -> Any:
            return SCHEMA

        def streamReader(self, schema: Any) -> Rows:
            return Rows(int(self.options["rows"]), int(self.options["per_trigger"]))

    spark.dataSource.register(RowsSource)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    import nsq_spark

    nsqd = Nsqd.start(mem_queue_size=args.messages + 1000)
    spark: Any = None
    try:
        spark = nsq_spark.local_session("bench-spark-source", cores=args.cores)
        _register_python_rows(spark, args.size)
        print(f"{args.messages:,} messages x {args.size} B, maxOffsetsPerTrigger "
              f"{args.per_trigger}, local[{args.cores}], Trigger.AvailableNow into noop")
        for mode in ["python", *args.modes.split(",")]:
            channel = mode in ("tcp", "http")
            warm = f"warm-{mode}"
            if mode != "python":
                _publish(nsqd, warm, 1000, args.size, channel)  # start the Python workers
            _run(spark, nsqd, mode, "1000" if mode == "python" else warm, args.per_trigger, 1000)
            noop = noop_rate(spark, args.messages, args.size)
            rates, phases = [], []
            for run in range(args.runs):
                topic = f"bench-{mode}-{run}"
                if mode == "python":
                    topic = str(args.messages)
                else:
                    _publish(nsqd, topic, args.messages, args.size, channel)
                seconds, durations = _run(spark, nsqd, mode, topic, args.per_trigger,
                                          args.messages)
                rates.append(args.messages / seconds)
                phases += durations
                if mode != "python":
                    nsqd.delete_topic(topic)
            median = statistics.median(rates)
            if mode == "python":
                python = median
            runs = "  ".join(f"{r:,.0f}" for r in rates)
            print(f"{mode:<7} msg/s: median {median:>9,.0f} = {median / noop:.4f} of noop "
                  f"({noop:,.0f} rows/s then), {median / python:.2f} of python;  runs: {runs}")
            medians = "  ".join(f"{phase} {statistics.median(d.get(phase, 0) for d in phases):,.0f}"
                                for phase in ("latestOffset", "addBatch"))
            print(f"{'':<7} per batch, median ms: {medians}  ({len(phases)} batches)")
        if args.sink:
            from . import spark_sink

            spark_sink.measure(spark, nsqd, rows=args.messages * 2, size=args.size,
                               partitions=4, runs=args.runs, batch_size=500, cores=args.cores)
    finally:
        if spark is not None:
            spark.stop()
        nsqd.stop()


if __name__ == "__main__":
    main()
