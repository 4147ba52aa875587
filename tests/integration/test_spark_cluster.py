"""The nsq source and sink on a real Spark standalone cluster on loopback: a master and two
workers started from pyspark's own ``bin/spark-class``, each executor a JVM of its own with its
own Python workers, so the partitions cross process boundaries as they do in production.

That the work really ran there is checked, not assumed: every row carries what a Python UDF,
evaluated in the same task as the source's ``read`` (or the sink's ``write``), saw of its process:
its pid and its working directory. A standalone worker starts each executor in
``<work-dir>/<app-id>/<executor-id>`` and the executor's Python workers inherit that directory,
so a row's directory names the worker and the executor that handled it.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import nsq_spark
import pytest
import trio
from nsq_client import Consumer
from nsq_testing import DEADLINE, Daemon, start_daemon, wait_until
from nsq_testing.spark_cluster import START_DEADLINE, SparkCluster, start_spark_cluster
from pyspark.sql import Column, DataFrame, SparkSession

pytestmark = pytest.mark.spark

COUNT = 5000
# Spark's progress and a drained channel on a loaded 2-core machine with six JVMs running.
SPARK_DEADLINE = DEADLINE * 6


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkCluster]:
    with start_spark_cluster(workers=2, cores=1, memory="1g") as running:
        yield running


@pytest.fixture(scope="module")
def spark(cluster: SparkCluster) -> Iterator[SparkSession]:
    """One session on the cluster for the module, once both executors have registered (so the
    first stage's tasks can go to either). SPARK_LOCAL_IP keeps the driver's JVM on loopback
    too, if this module is the one that starts it."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (SparkSession.builder.master(cluster.master_url).appName("nsq-spark-cluster-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.executor.cores", "1")
               .config("spark.cores.max", "2")
               .config("spark.executor.memory", "512m")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               # as nsq_spark.local_session: Python workers may be slow to connect back here
               .config("spark.python.authenticate.socketTimeout", "120s")
               .getOrCreate())
    try:
        nsq_spark.register(session)
        tracker = session.sparkContext._jsc.sc().statusTracker()  # type: ignore[union-attr]
        # getExecutorInfos lists the driver too.
        wait_until(lambda: len(tracker.getExecutorInfos()) >= 3, timeout=START_DEADLINE,
                   interval=0.5, what=lambda: f"2 executors registered\n{cluster.logs()}")
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    data = tmp_path_factory.mktemp("nsqd")
    # --max-rdy-count above the default 2500: one test asks for a batch bigger than that.
    with start_daemon("nsqd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                               "--https-address=127.0.0.1:0", "--max-rdy-count=10000",
                               f"--data-path={data}"]) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """No proxy from the environment: every request goes to the local nsqd."""
    with httpx.Client(trust_env=False, timeout=DEADLINE) as client:
        yield client


def where() -> Column:
    """A column saying where the row was computed: ``"<pid> <stage>:<partition> <working
    directory>"`` of the Python worker evaluating it. Built in a function, so cloudpickle sends
    the UDF by value (this test module cannot be imported on an executor)."""
    from pyspark.sql.functions import udf

    def process() -> str:
        import os

        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None
        return f"{os.getpid()} {task.stageId()}:{task.partitionId()} {os.getcwd()}"

    return udf(process, "string").asNondeterministic()()


def executors(cluster: SparkCluster, places: list[str]) -> dict[Path, set[int]]:
    """Executor directory -> the Python worker pids seen there. Every place must be inside a
    worker's work directory (an executor of this cluster), never in the driver's process."""
    found: dict[Path, set[int]] = {}
    for place in places:
        pid_text, _task, cwd = place.split(" ", 2)
        pid, path = int(pid_text), Path(cwd)
        assert pid != os.getpid(), "a row was computed in the driver's process"
        [worker] = [w for w in cluster.worker_dirs if path.is_relative_to(w)]
        # <work-dir>/<app-id>/<executor-id>
        assert path.parent.parent == worker and path.name.isdigit(), path
        found.setdefault(path, set()).add(pid)
    return found


def create_channel(http: httpx.Client, nsqd: Daemon, topic: str, channel: str) -> None:
    base = f"http://{nsqd.http_address}"
    http.post(f"{base}/topic/create", params={"topic": topic}).raise_for_status()
    http.post(f"{base}/channel/create", params={"topic": topic, "channel": channel}).raise_for_status()


def publish(http: httpx.Client, nsqd: Daemon, topic: str, channel: str) -> list[bytes]:
    create_channel(http, nsqd, topic, channel)
    base = f"http://{nsqd.http_address}"
    bodies = [f"{topic}-{i}".encode() for i in range(COUNT)]
    for i in range(0, COUNT, 1000):
        http.post(f"{base}/mpub", params={"topic": topic},
                  content=b"\n".join(bodies[i:i + 1000])).raise_for_status()
    return bodies


def channel_stats(http: httpx.Client, nsqd: Daemon, topic: str, channel: str) -> dict[str, Any]:
    doc = http.get(f"http://{nsqd.http_address}/stats", params={"format": "json", "topic": topic}).json()
    [found] = [c for t in doc["topics"] if t["topic_name"] == topic
               for c in t["channels"] if c["channel_name"] == channel]
    return dict(found)


def drained(http: httpx.Client, nsqd: Daemon, topic: str, channel: str
            ) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        stats = channel_stats(http, nsqd, topic, channel)
        return stats if stats["depth"] == 0 and stats["in_flight_count"] == 0 else None

    return check


def stream_to_parquet(spark: SparkSession, nsqd: Daemon, topic: str, tmp_path: Path,
                      via: tuple[str, str] | None = None, **options: str) -> tuple[DataFrame, Any]:
    """Run ``topic``/``spark`` through the nsq source into Parquet with Trigger.AvailableNow, to
    its end; the rows written and the finished query. ``via`` names the nsqd (default: its
    TCP address, so the driver holds the consumers)."""
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    reader = (spark.readStream.format("nsq").option(*(via or ("nsqd", nsqd.tcp_address)))
              .option("topic", topic).option("channel", "spark")
              .option("checkpointLocation", str(checkpoint)))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().select("id", "body", "topic", "channel", "nsqd", where().alias("place"))
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    finished = query.awaitTermination(SPARK_DEADLINE)
    if not finished:
        query.stop()
    assert finished, f"the query did not end: {query.lastProgress}"
    assert query.exception() is None
    return spark.read.parquet(str(out)), query


def test_stream_on_the_cluster_reads_every_message_once(spark, cluster, nsqd, http, tmp_path):
    bodies = publish(http, nsqd, "cluster_stream", "spark")
    rows, query = stream_to_parquet(spark, nsqd, "cluster_stream", tmp_path, maxMessagesPerTrigger="1000")
    got = rows.collect()
    assert len(got) == COUNT
    assert len({r.id for r in got}) == COUNT
    assert sorted(bytes(r.body) for r in got) == sorted(bodies)
    assert {(r.topic, r.channel, r.nsqd) for r in got} == {("cluster_stream", "spark", nsqd.tcp_address)}
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == COUNT and len(sizes) >= 5 and max(sizes) <= 1000
    # Each batch is one partition (1000 < PARTITION_SIZE), so which executor took which is
    # the scheduler's choice; that they ran on the cluster's executors is what holds.
    assert executors(cluster, [r.place for r in got])
    stats = wait_until(drained(http, nsqd, "cluster_stream", "spark"), timeout=SPARK_DEADLINE,
                       what="channel depth 0, in_flight 0")
    assert stats["message_count"] == COUNT
    assert stats["timeout_count"] == 0 and stats["requeue_count"] == 0


def test_one_batch_is_read_on_both_executors(spark, cluster, nsqd, http, tmp_path):
    """A batch of thousands of messages has several partitions (the source's own split, seen
    here through each row's task); with two idle one-core executors the scheduler gives the
    first two tasks of a stage one each, so both executors take part."""
    bodies = publish(http, nsqd, "cluster_spread", "spark")
    # The source plans at most maxInFlight / 2 messages per batch: room for all 5,000.
    rows, query = stream_to_parquet(spark, nsqd, "cluster_spread", tmp_path,
                                    maxMessagesPerTrigger=str(COUNT), maxInFlight=str(2 * COUNT),
                                    idleTimeout="3s")
    got = rows.collect()
    assert sorted(bytes(r.body) for r in got) == sorted(bodies)
    assert len({r.id for r in got}) == COUNT
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    partitions: dict[str, set[str]] = collections.defaultdict(set)  # stage -> its partitions
    for r in got:
        stage, partition = r.place.split(" ")[1].split(":")
        partitions[stage].add(partition)
    assert max(map(len, partitions.values())) >= 2, f"no batch of several partitions: {sizes}"
    found = executors(cluster, [r.place for r in got])
    assert len(found) >= 2, f"read by one executor only: {found}"
    all_pids = [pid for pids in found.values() for pid in pids]
    assert len(all_pids) == len(set(all_pids))  # no process in two executors
    wait_until(drained(http, nsqd, "cluster_spread", "spark"), timeout=SPARK_DEADLINE,
               what="channel depth 0, in_flight 0")


def test_executors_pull_over_http_on_the_cluster(spark, cluster, nsqd, http, tmp_path):
    """Given nsqd's HTTP address, the executors consume themselves: the driver plans parts by
    depth, each executor pulls its part and logs it under the checkpoint, the driver FINishes."""
    bodies = publish(http, nsqd, "cluster_http", "spark")
    rows, _ = stream_to_parquet(spark, nsqd, "cluster_http", tmp_path,
                                    via=("nsqdHttp", nsqd.http_address),
                                    maxMessagesPerTrigger=str(COUNT), idleTimeout="3s")
    got = rows.collect()
    assert sorted(bytes(r.body) for r in got) == sorted(bodies)
    assert len({r.id for r in got}) == COUNT
    assert {r.nsqd for r in got} == {nsqd.tcp_address}
    parts = list((tmp_path / "checkpoint" / "sources" / "nsq").glob("*.part-*"))
    assert len(parts) >= 2, "the executors logged the parts they pulled"
    found = executors(cluster, [r.place for r in got])
    assert len(found) >= 2, f"pulled by one executor only: {found}"
    stats = wait_until(drained(http, nsqd, "cluster_http", "spark"), timeout=SPARK_DEADLINE,
                       what="channel depth 0, in_flight 0")
    assert stats["timeout_count"] == 0 and stats["requeue_count"] == 0


def test_a_read_by_offset_is_split_over_both_executors(spark, cluster, nsqd, http, tmp_path):
    """By offset: the driver plans ranges of the topic's log (minPartitions 2: the one nsqd's
    range in two), each executor reads its range over HTTP, the writer alone has a
    checkpoint, and nothing is consumed: the topic's channel still holds every message."""
    bodies = publish(http, nsqd, "cluster_offsets", "untouched")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    query = (spark.readStream.format("nsq").option("nsqdHttp", nsqd.http_address)
             .option("topic", "cluster_offsets").option("startingOffsets", "earliest")
             .option("minPartitions", "2").load()
             .select("offset", "body", "nsqd", where().alias("place"))
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    finished = query.awaitTermination(SPARK_DEADLINE)
    if not finished:
        query.stop()
    assert finished and query.exception() is None
    got = spark.read.parquet(str(out)).collect()
    assert sorted(r.offset for r in got) == list(range(COUNT))
    assert sorted(bytes(r.body) for r in got) == sorted(bodies)
    assert {r.nsqd for r in got} == {nsqd.http_address}
    assert len(executors(cluster, [r.place for r in got])) >= 2
    assert not (checkpoint / "sources" / "nsq").exists()
    assert channel_stats(http, nsqd, "cluster_offsets", "untouched")["depth"] == COUNT


def consume(nsqd: Daemon, topic: str, channel: str, count: int) -> list[bytes]:
    """``count`` message bodies of ``topic``/``channel``, each FINished."""

    async def main() -> list[bytes]:
        bodies: list[bytes] = []
        async with Consumer(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address],
                            max_in_flight=2500) as consumer:
            with trio.fail_after(SPARK_DEADLINE):
                async for message in consumer:
                    message.finish()
                    bodies.append(message.body)
                    if len(bodies) == count:
                        break
        return bodies

    return trio.run(main)


def test_sink_on_the_cluster_publishes_every_row_once(spark, cluster, nsqd, http):
    topic, channel = "cluster_sink", "check"
    create_channel(http, nsqd, topic, channel)
    # The UDF runs in the same task as the sink's write (no shuffle between them), so each
    # body names the executor that published it.
    df = (spark.range(0, COUNT, 1, numPartitions=4)
          .select(where().alias("place"), "id")
          .selectExpr("CAST(concat(CAST(id AS STRING), ' ', place) AS BINARY) AS body"))
    assert df.rdd.getNumPartitions() == 4
    df.write.format("nsq").option("nsqd", nsqd.tcp_address).option("topic", topic).mode("append").save()
    bodies = consume(nsqd, topic, channel, COUNT)
    numbers = [int(b.split(b" ", 1)[0]) for b in bodies]
    assert len({b.split(b" ")[2] for b in bodies}) == 4  # the 4 partitions' tasks published
    assert sorted(numbers) == list(range(COUNT))  # every row, once
    found = executors(cluster, [b.decode().split(" ", 1)[1] for b in bodies])
    assert len(found) >= 2, f"published by one executor only: {found}"
    stats = wait_until(drained(http, nsqd, topic, channel), timeout=SPARK_DEADLINE,
                       what="channel depth 0, in_flight 0")
    assert stats["message_count"] == COUNT  # and no more than that
