"""How fast the nsq Spark source delivers: messages/s from a topic into a sink, both ways of
reading (the driver's TCP consumers, and executors pulling over HTTP).

    python -m bench.spark_source [--messages 100000] [--size 100] [--per-trigger 2500]
                                 [--runs 3] [--cores 2] [--modes tcp,http]

Starts an nsqd (127.0.0.1, kernel-chosen ports, a temporary data directory, a memory queue
large enough for every run) and a ``local[--cores]`` Spark session with the source
registered. Each run publishes ``--messages`` bodies of ``--size`` bytes to a fresh topic
(untimed, through ``/mpub``), then times a streaming query from its start to its end:
``readStream.format("nsq")`` with ``maxMessagesPerTrigger`` ``--per-trigger``, a checkpoint
and ``Trigger.AvailableNow``, into Spark's ``noop`` sink, so what is timed is the source
and Spark's streaming machinery. It checks through ``/stats`` that the channel ended with
depth 0 and nothing in flight. Printed per mode, each run and the median: messages/s over the
whole query (its start and the idle wait that ends AvailableNow included), and over the time
its batches took by Spark's own progress reports (``triggerExecution``), then the median
over all runs' batches of the milliseconds two phases of a batch took: ``latestOffset`` (the
driver plans and logs the batch) and ``addBatch`` (the executors read it into the sink).
Wall times: a busy machine makes every figure worse.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from typing import Any

import httpx

from .server import Nsqd

CHANNEL = "bench"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_source", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per body")
    parser.add_argument("--per-trigger", type=int, default=2500, help="maxMessagesPerTrigger")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2, help="Spark's local[N]")
    parser.add_argument("--modes", default="tcp,http")
    return parser.parse_args(argv)


def _publish(nsqd: Nsqd, topic: str, count: int, size: int) -> None:
    base = f"http://{nsqd.http_address}"
    with httpx.Client(timeout=60) as client:
        client.post(f"{base}/topic/create", params={"topic": topic}).raise_for_status()
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


def _run(spark: Any, nsqd: Nsqd, mode: str, topic: str, per_trigger: int
         ) -> tuple[float, float, list[dict[str, int]]]:
    """Seconds from the query's start to its end, the seconds its batches took by Spark's
    own progress reports (``triggerExecution``: planning, reading and the sink, no start-up),
    and each batch's ``durationMs``."""
    where = ("nsqd", nsqd.tcp_address) if mode == "tcp" else ("nsqdHttp", nsqd.http_address)
    checkpoint = tempfile.mkdtemp(prefix="bench-spark-source-")
    try:
        start = time.perf_counter()
        query = (spark.readStream.format("nsq").option(*where).option("topic", topic)
                 .option("channel", CHANNEL).option("maxMessagesPerTrigger", str(per_trigger))
                 .option("checkpointLocation", checkpoint).option("idleTimeout", "500ms").load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        seconds = time.perf_counter() - start
        durations = [p["durationMs"] for p in query.recentProgress if p["numInputRows"]]
        in_batches = sum(d.get("triggerExecution", 0) for d in durations) / 1000
        deadline = time.monotonic() + 60
        while not _drained(nsqd, topic):  # the last batch's FIN follows the query's end
            if time.monotonic() > deadline:
                raise SystemExit(f"{mode}: the channel did not drain")
            time.sleep(0.1)
        return seconds, in_batches, durations
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    import nsq_spark

    nsqd = Nsqd.start(mem_queue_size=args.messages + 1000)
    spark: Any = None
    try:
        spark = nsq_spark.local_session("bench-spark-source", cores=args.cores)
        print(f"{args.messages:,} messages x {args.size} B, maxMessagesPerTrigger "
              f"{args.per_trigger}, local[{args.cores}], Trigger.AvailableNow into noop")
        for mode in args.modes.split(","):
            _publish(nsqd, f"warm-{mode}", 1000, args.size)  # start the Python workers
            _run(spark, nsqd, mode, f"warm-{mode}", args.per_trigger)
            whole, batches, phases = [], [], []
            for run in range(args.runs):
                topic = f"bench-{mode}-{run}"
                _publish(nsqd, topic, args.messages, args.size)
                seconds, in_batches, durations = _run(spark, nsqd, mode, topic,
                                                      args.per_trigger)
                whole.append(args.messages / seconds)
                batches.append(args.messages / in_batches)
                phases += durations
                nsqd.delete_topic(topic)
            for name, rates in (("query", whole), ("batches", batches)):
                runs = "  ".join(f"{r:,.0f}" for r in rates)
                print(f"{mode:<5} {name:<8} msg/s: median {statistics.median(rates):>9,.0f}"
                      f"  runs: {runs}")
            medians = "  ".join(f"{phase} {statistics.median(d.get(phase, 0) for d in phases):,.0f}"
                                for phase in ("latestOffset", "addBatch"))
            print(f"{mode:<5} per batch, median ms: {medians}  ({len(phases)} batches)")
    finally:
        if spark is not None:
            spark.stop()
        nsqd.stop()


if __name__ == "__main__":
    main()
