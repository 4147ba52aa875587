"""A streaming query run as its own driver process, for the tests that kill it.

    python _spark_query.py OPTION ADDRESS TOPIC CHECKPOINT OUT EXPECTED
        [--channel NAME] [--stall-at N] [--kill-at POINT --kill-batch N] [--msg-timeout 60s]

Reads TOPIC from the nsqd named by OPTION (``nsqd`` or ``nsqdHttp``) and ADDRESS, 500
messages per trigger, the checkpoint CHECKPOINT given to the writer only:

* by offset (the default, ``startingOffsets`` earliest), into an idempotent sink:
  ``foreachBatch`` overwrites ``OUT/batch=<id>`` with the batch's rows, so a batch run again
  replaces what its first run wrote;
* with ``--channel NAME``, that channel (the reader gets CHECKPOINT too, for its batch log),
  into a sink that is deliberately *not* idempotent: each run appends under
  ``OUT/batch=<id>/run=<pid>``, so a replayed batch shows up twice and the test can count
  the duplicates.

``--kill-at POINT --kill-batch N`` kills this driver (SIGKILL to its process group: the
Python driver and Spark's JVM, whose Python workers end with it) at a point of batch N:

* ``planned``: Spark has written the batch's offsets; nothing of it is read yet;
* ``reading``: an executor is reading the batch into the sink (a task in progress);
* ``written``: the sink has the batch; ``foreachBatch`` has not returned;
* ``before-commit``: ``foreachBatch`` returned; Spark's commit of the batch fails (a
  directory stands where its commit file goes, so Spark gives up exactly there) and the
  driver is killed in that state;
* ``after-commit``: Spark has committed the batch (its progress is reported).

``--stall-at N`` (channel reads) writes batch N, records its ids in ``OUT/stalled-<N>.json``
and never returns from that batch (the test kills the process there).

Without them, the query runs until the sink holds EXPECTED distinct messages and Spark has
committed that batch, then stops and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path

import nsq_spark


def die() -> None:
    """kill -9 of this driver: its process group (the test started it as a session)."""
    os.killpg(int(os.environ["NSQ_TEST_DRIVER_PGID"]), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("option", "address", "topic", "checkpoint", "out"):
        parser.add_argument(name)
    parser.add_argument("expected", type=int)
    parser.add_argument("--channel")
    parser.add_argument("--stall-at", type=int)
    parser.add_argument("--kill-at", choices=["planned", "reading", "written", "before-commit",
                                              "after-commit"])
    parser.add_argument("--kill-batch", type=int, default=-1)
    parser.add_argument("--msg-timeout", default="60s")
    args = parser.parse_args()
    os.environ["NSQ_TEST_DRIVER_PGID"] = str(os.getpgrp())  # for the executors' workers too
    out = Path(args.out)
    spark = nsq_spark.local_session("nsq-spark-kill-test")
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StreamingQueryListener

    seen: set[str] = set()
    if any(out.glob("batch=*")):
        seen.update(r.id for r in spark.read.parquet(str(out)).select("id").collect())
    done = threading.Event()
    last_batch: list[int] = []
    kill_batch = args.kill_batch

    @F.udf("string")
    def reading(offset: int, id: str) -> str:
        if offset == reading_at:  # mid-batch, on the executor
            die()
        return id

    reading_at = -1

    def write(batch, batch_id: int) -> None:
        nonlocal reading_at
        if batch_id == kill_batch and args.kill_at == "planned":
            die()
        columns = batch.select("id", "body", "nsqd", "offset")
        if batch_id == kill_batch and args.kill_at == "reading":
            offsets = [r.offset for r in columns.select("offset").collect()]
            reading_at = sorted(offsets)[len(offsets) // 2]
            columns = columns.withColumn("id", reading("offset", "id"))
        if args.channel is None:
            rows = columns.collect()
            columns.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))
        else:
            rows = columns.collect()
            if rows:
                columns.write.mode("append").parquet(
                    str(out / f"batch={batch_id}" / f"run={os.getpid()}"))
        seen.update(r.id for r in rows)
        if batch_id == kill_batch and args.kill_at == "written":
            die()
        if batch_id == kill_batch and args.kill_at == "before-commit":
            (Path(args.checkpoint) / "commits" / str(batch_id)).mkdir(parents=True)
        if batch_id == args.stall_at:
            (out / f"stalled-{batch_id}.json").write_text(json.dumps([r.id for r in rows]))
            while True:  # the workload hangs here until the test kills the whole process
                time.sleep(1)
        if len(seen) >= args.expected and not done.is_set():
            last_batch.append(batch_id)
            done.set()

    class KillAfterCommit(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:  # Spark reports a batch once committed
            if event.progress.batchId == kill_batch and args.kill_at == "after-commit":
                die()

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    spark.streams.addListener(KillAfterCommit())
    reader = (spark.readStream.format("nsq").option(args.option, args.address)
              .option("topic", args.topic).option("maxOffsetsPerTrigger", "500"))
    if args.channel is None:
        reader = reader.option("startingOffsets", "earliest")
    else:
        reader = (reader.option("channel", args.channel).option("msgTimeout", args.msg_timeout)
                  .option("checkpointLocation", args.checkpoint))
    query = (reader.load().writeStream.foreachBatch(write)
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    while not done.is_set() and query.isActive:
        done.wait(0.2)
    if args.kill_at == "before-commit" and not query.isActive:
        (out / "commit-failed").touch()
        while True:  # Spark could not commit: the test kills the driver in this state
            time.sleep(1)
    # Stop once Spark has committed the batch that completed the sink (its progress is
    # reported after the commit), as a job that is done would.
    while query.isActive and (query.lastProgress or {}).get("batchId", -1) < last_batch[0]:
        time.sleep(0.1)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
