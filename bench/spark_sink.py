"""How fast the nsq Spark sink publishes: rows/s from a cached DataFrame to a topic.

    python -m bench.spark_sink [--rows 200000] [--size 100] [--partitions 4] [--runs 3]
                               [--cores 2] [--batch-size 500]

Starts an nsqd (127.0.0.1, kernel-chosen ports, a temporary data directory, a memory queue
large enough for every run) and a ``local[--cores]`` Spark session with the source registered.
The DataFrame (``--rows`` bodies of ``--size`` bytes in ``--partitions`` partitions) is built
and cached before anything is timed, and one small untimed write starts Spark's Python workers.

Each run times ``df.write.format("nsq").save()`` from its call to its return (every MPUB
answered), checks through ``/stats`` that the topic gained exactly ``--rows`` messages, and
empties the topic; Spark's ``noop`` sink on the same DataFrame is timed between the runs
(what Spark itself costs without Python or NSQ, at that moment). Printed: each run's rows/s
and MB/s of bodies, and the median, for both, and the nsq sink's median as a ratio to noop's.
Wall times: a busy machine makes every figure worse, the ratio less so.
``python -m bench.spark_source --sink`` runs this after the source, in the same session.
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


def _report(name: str, seconds: list[float], rows: int, size: int) -> float:
    rates = [rows / s for s in seconds]
    runs = "  ".join(f"{r:,.0f}" for r in rates)
    median = statistics.median(rates)
    print(f"{name:<10} rows/s: median {median:>10,.0f}  ({median * size / 1e6:.1f} MB/s of bodies)"
          f"  runs: {runs}")
    return median


def measure(spark: Any, nsqd: Nsqd, *, rows: int, size: int, partitions: int, runs: int,
            batch_size: int, cores: int) -> None:
    """The sink's runs and noop's, alternated, printed (see the module docstring)."""
    df = _frame(spark, rows, size, partitions)

    def write(frame: Any) -> None:
        (frame.write.format("nsq").option("nsqd", nsqd.tcp_address).option("topic", TOPIC)
         .option("batchSize", str(batch_size)).mode("append").save())

    write(_frame(spark, 1000, size, partitions))  # start the Python workers
    nsqd.delete_topic(TOPIC)
    seconds, noop = [], []
    for _ in range(runs):
        noop.append(_timed(lambda: df.write.format("noop").mode("overwrite").save()))
        before = _published(nsqd)
        seconds.append(_timed(lambda: write(df)))
        gained = _published(nsqd) - before
        if gained != rows:
            raise SystemExit(f"the topic gained {gained} messages, not {rows}")
        nsqd.delete_topic(TOPIC)
    df.unpersist()
    print(f"sink: {rows:,} rows x {size} B, {partitions} partitions, local[{cores}],"
          f" {batch_size} rows per MPUB")
    ours = _report("nsq", seconds, rows, size)
    baseline = _report("noop", noop, rows, size)
    print(f"{'':<10} nsq = {ours / baseline:.4f} of noop")


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    import nsq_spark

    nsqd = Nsqd.start(mem_queue_size=args.rows * (args.runs + 1) + 1000)
    spark: Any = None
    try:
        spark = nsq_spark.local_session("bench-spark-sink", cores=args.cores)
        measure(spark, nsqd, rows=args.rows, size=args.size, partitions=args.partitions,
                runs=args.runs, batch_size=args.batch_size, cores=args.cores)
    finally:
        if spark is not None:
            spark.stop()
        nsqd.stop()


if __name__ == "__main__":
    main()
