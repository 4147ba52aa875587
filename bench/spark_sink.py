"""How fast the nsq Spark sink publishes: rows/s from a cached DataFrame to a topic.

    python -m bench.spark_sink [--rows 200000] [--size 100] [--partitions 4] [--runs 3]
                               [--cores 2] [--batch-size 500]

Starts an nsqd (127.0.0.1, kernel-chosen ports, a temporary data directory, a memory queue
large enough for every run) and a ``local[--cores]`` Spark session with the source registered.
The DataFrame (``--rows`` bodies of ``--size`` bytes in ``--partitions`` partitions) is built
and cached before anything is timed, and one small untimed write starts Spark's Python workers.

Each run times ``df.write.format("nsq").save()`` from its call to its return (every MPUB
answered), checks through ``/stats`` that the topic gained exactly ``--rows`` messages, and
empties the topic. Printed: each run's rows/s and MB/s of bodies, and the median; then the same
for Spark's ``noop`` sink on the same DataFrame, which is what Spark itself costs without
Python or NSQ. Wall times: a busy machine makes every figure worse.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from .server import Nsqd

TOPIC = "spark-bench"


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_sink", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=_positive, default=200_000)
    parser.add_argument("--size", type=_positive, default=100, help="bytes per body")
    parser.add_argument("--partitions", type=_positive, default=4)
    parser.add_argument("--runs", type=_positive, default=3)
    parser.add_argument("--cores", type=_positive, default=2, help="Spark's local[N]")
    parser.add_argument("--batch-size", type=_positive, default=500, help="rows per MPUB")
    return parser.parse_args(argv)


def _frame(spark: Any, rows: int, size: int, partitions: int) -> Any:
    df = (spark.range(rows, numPartitions=partitions)
          .selectExpr(f"CAST(lpad(CAST(id AS STRING), {size}, 'x') AS BINARY) AS body")
          .cache())
    df.count()
    return df


def _published(nsqd: Nsqd) -> int:
    stats = nsqd.stats(TOPIC)
    return int(stats["message_count"]) if stats else 0


def _timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _report(name: str, seconds: list[float], rows: int, size: int) -> None:
    rates = [rows / s for s in seconds]
    runs = "  ".join(f"{r:,.0f}" for r in rates)
    median = statistics.median(rates)
    print(f"{name:<10} rows/s: median {median:>10,.0f}  ({median * size / 1e6:.1f} MB/s of bodies)"
          f"  runs: {runs}")


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    import nsq_spark

    nsqd = Nsqd.start(mem_queue_size=args.rows * (args.runs + 1) + 1000)
    spark: Any = None
    try:
        spark = nsq_spark.local_session("bench-spark-sink", cores=args.cores)
        df = _frame(spark, args.rows, args.size, args.partitions)

        def write(frame: Any) -> None:
            (frame.write.format("nsq").option("nsqd", nsqd.tcp_address).option("topic", TOPIC)
             .option("batchSize", str(args.batch_size)).mode("append").save())

        write(_frame(spark, 1000, args.size, args.partitions))  # start the Python workers
        seconds = []
        for _ in range(args.runs):
            before = _published(nsqd)
            seconds.append(_timed(lambda: write(df)))
            gained = _published(nsqd) - before
            if gained != args.rows:
                raise SystemExit(f"the topic gained {gained} messages, not {args.rows}")
            nsqd.delete_topic(TOPIC)
        noop = [_timed(lambda: df.write.format("noop").mode("overwrite").save())
                for _ in range(args.runs)]
        print(f"{args.rows:,} rows x {args.size} B, {args.partitions} partitions, local[{args.cores}],"
              f" {args.batch_size} rows per MPUB")
        _report("nsq", seconds, args.rows, args.size)
        _report("noop", noop, args.rows, args.size)
    finally:
        if spark is not None:
            spark.stop()
        nsqd.stop()


if __name__ == "__main__":
    main()
