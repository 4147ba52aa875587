"""A streaming query run as its own driver process, for the tests that kill it.

    python _spark_query.py OPTION ADDRESS TOPIC CHECKPOINT OUT EXPECTED [--stall-at N]

Reads TOPIC/channel ``spark`` of the nsqd named by OPTION (``nsqd`` or ``nsqdHttp``) and
ADDRESS through the nsq source (checkpoint CHECKPOINT, 500 messages per
trigger) and appends every micro-batch's ids to Parquet under ``OUT/batch=<id>/run=<pid>``, a
sink that is deliberately *not* idempotent, so a replayed batch shows up twice and the test
can count the duplicates. With ``--stall-at N`` the query writes batch N, then records its ids
in ``OUT/stalled-<N>.json`` and never returns from that batch (the test kills the process
there: Spark has the batch's offsets but not its commit). Without it, the query runs until
the sink holds EXPECTED distinct ids and Spark has committed that batch, then stops and
exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import nsq_spark


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("option", "address", "topic", "checkpoint", "out"):
        parser.add_argument(name)
    parser.add_argument("expected", type=int)
    parser.add_argument("--stall-at", type=int)
    parser.add_argument("--msg-timeout", default="60s")
    args = parser.parse_args()
    out = Path(args.out)
    spark = nsq_spark.local_session("nsq-spark-kill-test")
    seen: set[str] = set()
    if any(out.glob("batch=*")):
        seen.update(r.id for r in spark.read.parquet(str(out)).select("id").collect())
    done = threading.Event()
    last_batch: list[int] = []

    def write(batch, batch_id: int) -> None:
        rows = batch.select("id", "body").collect()
        if rows:
            batch.select("id", "body").write.mode("append").parquet(
                str(out / f"batch={batch_id}" / f"run={os.getpid()}"))
        seen.update(r.id for r in rows)
        if batch_id == args.stall_at:
            (out / f"stalled-{batch_id}.json").write_text(json.dumps([r.id for r in rows]))
            while True:  # the workload hangs here until the test kills the whole process
                time.sleep(1)
        if len(seen) >= args.expected and not done.is_set():
            last_batch.append(batch_id)
            done.set()

    source = (spark.readStream.format("nsq").option(args.option, args.address)
              .option("topic", args.topic)
              .option("channel", "spark").option("maxMessagesPerTrigger", "500")
              .option("msgTimeout", args.msg_timeout)
              .option("checkpointLocation", args.checkpoint).load())
    query = (source.writeStream.foreachBatch(write).option("checkpointLocation", args.checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    while not done.is_set() and query.isActive:
        done.wait(0.2)
    # Stop once Spark has committed the batch that completed the sink (its progress is
    # reported after the commit), as a job that is done would.
    while query.isActive and (query.lastProgress or {}).get("batchId", -1) < last_batch[0]:
        time.sleep(0.1)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
