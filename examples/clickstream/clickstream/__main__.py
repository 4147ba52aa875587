"""``python -m clickstream {generate,job,batch,demo,package}``: the pipeline's command line.

``demo`` is ``make pipeline``: against the cluster ``make run`` starts, it publishes live page
views, archives the topic with ``nsq_to_file`` (for the batch path) and runs the streaming
job every 10 seconds, printing the windows and alerts it writes, until Ctrl-C.

Under ``spark-submit`` the session is the one spark-submit configured (its master, its
executors); run directly, a ``local[2]`` session on loopback.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from . import batch, events, generator, job, package


def session(name: str) -> SparkSession:
    """spark-submit's session, else a local one. Under spark-submit nsq_spark is imported only
    once the session exists: importing it sets ``PYSPARK_PYTHON`` to this interpreter when
    unset, and a SparkContext created after that would send the driver's interpreter path
    to executors on other machines."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit
        spark = SparkSession.builder.appName(name).getOrCreate()
        import nsq_spark

        nsq_spark.register(spark)
    else:
        import nsq_spark

        _jvm_in_its_own_session()
        spark = nsq_spark.local_session(name)  # type: ignore[assignment]
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _jvm_in_its_own_session() -> None:
    """Start the local session's JVM in a process session of its own, so that the terminal's
    Ctrl-C (SIGINT to the whole foreground process group) reaches this driver only. PySpark
    starts the JVM ignoring SIGINT, but the Python workers the JVM forks restore Python's
    handler: each would die of a KeyboardInterrupt in the middle of its task and the query
    fail with Java stack traces, instead of our handler stopping it between batches. The JVM
    still ends with this process (it exits when its stdin, a pipe from here, closes)."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is None:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # as nsq_spark.local_session
        SparkContext._ensure_initialized(
            gateway=launch_gateway(popen_kwargs={"start_new_session": True}))


def _job_config(args: argparse.Namespace, **overrides: object) -> job.JobConfig:
    fields: dict[str, object] = {
        "out": args.out, "checkpoint": args.checkpoint or f"{args.out.rstrip('/')}/_checkpoint",
        "lookupd": args.lookupd, "nsqd_http": args.nsqd_http, "nsqd": args.nsqd,
        "channel": args.channel, "starting_offsets": args.starting_offsets,
        "factor": args.factor, "baseline_minutes": args.baseline_minutes,
        "min_views": args.min_views, "watermark": args.watermark,
        "trigger": None if args.available_now else args.trigger,
        "max_per_trigger": args.max_per_trigger, "echo": args.echo,
    }
    fields.update(overrides)
    return job.JobConfig(**fields)  # type: ignore[arg-type]


def cmd_generate(args: argparse.Namespace) -> None:
    if args.live:
        print(f"publishing about {args.rate}/s to {events.TOPIC} on {args.nsqd_http}; Ctrl-C stops")
        try:
            generator.live(args.nsqd_http, rate=args.rate, seed=args.seed)
        except KeyboardInterrupt:
            pass
        return
    generated = events.generate(args.count, seed=args.seed, minutes=args.minutes)
    generator.publish(args.nsqd_http, generated)
    print(f"published {len(generated)} events to {events.TOPIC} on {args.nsqd_http}")


def cmd_job(args: argparse.Namespace) -> None:
    """Run the query until it ends (AvailableNow) or Ctrl-C. PySpark's own SIGINT handler
    cancels the running Spark jobs under the query and then raises inside a py4j call; ours
    lets the batch in progress finish and stops the query between batches instead, so it ends
    with one line, its last batch committed and the next one not started."""
    spark = session("clickstream")
    config = _job_config(args)
    query = job.start(spark, config)
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    try:
        while query.isActive and not interrupted.is_set():
            query.awaitTermination(0.5)
        if interrupted.is_set():
            # From here on only errors: the batch in progress may warn that it fell behind
            # its trigger, and stopping warns of each job group it had nothing to cancel.
            spark.sparkContext.setLogLevel("ERROR")
            _finish_batch_in_progress(query)
    finally:
        query.stop()
        spark.stop()
        signal.signal(signal.SIGINT, previous)
    if interrupted.is_set():
        batch_id = _last_batch(query)
        when = f"after batch {batch_id}" if batch_id >= 0 else "before its first batch"
        print(f"stopped {when} (Ctrl-C); the next run resumes from {config.checkpoint}",
              flush=True)


def _last_batch(query: StreamingQuery) -> int:
    progress = query.lastProgress
    return int(progress["batchId"]) if progress else -1


def _finish_batch_in_progress(query: StreamingQuery) -> None:
    """Wait until the batch running now (if one is) has committed. A query that falls behind
    its trigger starts the next batch at once, which ``stop`` then interrupts: the next run
    does that batch again, from the same offsets (the job's output is idempotent by batch
    id)."""
    done = _last_batch(query)
    while (query.isActive and query.status["isTriggerActive"]
           and _last_batch(query) == done):
        query.awaitTermination(0.2)


def cmd_batch(args: argparse.Namespace) -> None:
    spark = session("clickstream-batch")
    windows = batch.aggregate_archive(spark, args.input, out=args.out)
    windows.orderBy("window_start", "page").show(args.show, truncate=False)
    spark.stop()


def cmd_demo(args: argparse.Namespace) -> None:
    out = Path(args.out)
    archive = out / "archive"
    archive.mkdir(parents=True, exist_ok=True)
    # The topic keeps what every channel has read for an hour: the job reads it by offset
    # (it is no channel), and nsq_to_file's channel alone would otherwise let nsqd drop each
    # message once archived. A --channel job needs its channel before the first event (a
    # channel gets only what is published after it exists).
    http = f"http://{args.nsqd_http}"
    httpx.post(f"{http}/topic/create", params={"topic": events.TOPIC, "retention": "1h"},
               timeout=30.0).raise_for_status()
    if args.channel:
        httpx.post(f"{http}/channel/create", params={"topic": events.TOPIC,
                                                     "channel": args.channel},
                   timeout=30.0).raise_for_status()
    # nsq_to_file logs to a file and runs in a session of its own: the terminal's Ctrl-C is
    # for this process, which stops it once the query has stopped.
    with (out / "nsq_to_file.log").open("ab") as archiver_log:
        archiver = subprocess.Popen([sys.executable, "-m", "nsq_client.tools.nsq_to_file",
                                     "--topic", events.TOPIC, "--channel", "archive",
                                     "--lookupd-http-address", args.lookupd, "--gzip",
                                     "--output-dir", str(archive), "--sync-interval", "5s"],
                                    stdin=subprocess.DEVNULL, stdout=archiver_log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    stop = threading.Event()
    publisher = threading.Thread(target=generator.live, args=(args.nsqd_http,),
                                 kwargs={"rate": args.rate, "stop": stop}, daemon=True)
    publisher.start()
    print(f"live page views -> {events.TOPIC}; windows -> {out}/views; alerts -> "
          f"{events.ALERTS_TOPIC}; archive -> {archive} (log: {out}/nsq_to_file.log); "
          "nsqadmin: http://127.0.0.1:4171")
    try:
        cmd_job(args)
    finally:
        stop.set()
        archiver.terminate()
        archiver.wait(30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m clickstream", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="publish page views to the pageviews topic")
    gen.add_argument("--nsqd-http", default="127.0.0.1:4151", help="nsqd HTTP host:port")
    gen.add_argument("--count", type=int, default=2000)
    gen.add_argument("--minutes", type=int, default=5)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--live", action="store_true", help="publish dated-now events until Ctrl-C")
    gen.add_argument("--rate", type=float, default=20.0, help="--live: events per second")
    gen.set_defaults(func=cmd_generate)

    for name, helptext in (("job", "run the streaming job"),
                           ("demo", "live generator + nsq_to_file + the job (make pipeline)")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--lookupd", default="127.0.0.1:4161",
                       help="nsqlookupd HTTP addresses, comma-separated ('' to use --nsqd-http)")
        p.add_argument("--nsqd-http", default="127.0.0.1:4151",
                       help="nsqd HTTP addresses: read from these when --lookupd is ''")
        p.add_argument("--nsqd", default="127.0.0.1:4150",
                       help="nsqd TCP addresses: alerts are published here")
        p.add_argument("--channel", default="",
                       help="read this channel instead of the topic by offset")
        p.add_argument("--starting-offsets", default="earliest",
                       help="where a new query starts: earliest, latest, or Kafka's JSON")
        p.add_argument("--out", default="data/clickstream", help="output directory or URI")
        p.add_argument("--checkpoint", default="", help="default: <out>/_checkpoint")
        p.add_argument("--factor", type=float, default=events.FACTOR,
                       help="alert on more than this many times a page's usual views a minute")
        p.add_argument("--baseline-minutes", type=int, default=events.BASELINE_MINUTES)
        p.add_argument("--min-views", type=int, default=events.MIN_VIEWS)
        p.add_argument("--watermark", default="30 seconds")
        p.add_argument("--trigger", default="10 seconds", help="processing-time interval")
        p.add_argument("--available-now", action="store_true",
                       help="read what the topic holds now, then stop")
        p.add_argument("--max-per-trigger", type=int, default=None)
        p.add_argument("--echo", action="store_true", default=name == "demo",
                       help="print each batch's windows and alerts")
        if name == "demo":
            p.add_argument("--rate", type=float, default=20.0)
        p.set_defaults(func=cmd_demo if name == "demo" else cmd_job)

    bat = sub.add_parser("batch", help="aggregate nsq_to_file's archive of the topic")
    bat.add_argument("--input", default="data/clickstream/archive", help="nsq_to_file's --output-dir")
    bat.add_argument("--out", default=None, help="write the windows here as Parquet")
    bat.add_argument("--show", type=int, default=50)
    bat.set_defaults(func=cmd_batch)

    pkg = sub.add_parser("package", help="the zip for spark-submit --py-files")
    pkg.add_argument("--out", default="build/clickstream-pyfiles.zip")
    pkg.set_defaults(func=lambda args: print(package.build(args.out)))

    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
