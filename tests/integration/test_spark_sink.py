"""The nsq sink on a real local Spark session and a real nsqd: df.write / writeStream.format("nsq")."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nsq_spark
import pytest
import trio
from nsq_client import Consumer
from nsq_testing import DEADLINE, Daemon, wait_until

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = nsq_spark.local_session("test-spark-sink")
    try:
        yield session
    finally:
        session.stop()


def consume(nsqd: Daemon, topic: str, count: int, channel: str = "check") -> list[bytes]:
    """``count`` message bodies from ``topic`` (FINished), then the channel must be empty."""

    async def main() -> list[bytes]:
        bodies: list[bytes] = []
        async with Consumer(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address],
                            max_in_flight=2500) as consumer:
            with trio.fail_after(DEADLINE):
                async for message in consumer:
                    bodies.append(message.body)
                    if len(bodies) == count:
                        break
        return bodies

    bodies = trio.run(main)
    assert topic_stats(nsqd, topic)["message_count"] == count  # and no more than that
    return bodies


def topic_stats(nsqd: Daemon, topic: str) -> dict[str, Any]:
    doc = httpx.get(f"http://{nsqd.http_address}/stats",
                    params={"format": "json", "topic": topic}).json()
    [found] = [t for t in doc["topics"] if t["topic_name"] == topic]
    return found


def test_sink_publishes_10000_rows_from_4_partitions(spark, shared_nsqd):
    df = spark.range(10000).repartition(4).selectExpr("CAST(id AS STRING) AS body")
    assert df.rdd.getNumPartitions() == 4
    (df.write.format("nsq").option("nsqd", shared_nsqd.tcp_address)
       .option("topic", "spark-sink").option("batchSize", "300").mode("append").save())
    bodies = consume(shared_nsqd, "spark-sink", 10000)
    assert collections.Counter(bodies) == collections.Counter(str(i).encode() for i in range(10000))


def test_topic_column_routes_rows(spark, shared_nsqd):
    df = spark.range(1000).repartition(3).selectExpr(
        "CAST(CAST(id AS STRING) AS BINARY) AS body",
        "IF(id % 2 = 0, 'spark-even', 'spark-odd') AS topic")
    df.write.format("nsq").option("nsqd", shared_nsqd.tcp_address).mode("append").save()
    even = consume(shared_nsqd, "spark-even", 500)
    odd = consume(shared_nsqd, "spark-odd", 500)
    evens = sorted(int(b) for b in even)
    odds = sorted(int(b) for b in odd)
    assert evens == list(range(0, 1000, 2))
    assert odds == list(range(1, 1000, 2))


def test_string_value_column(spark, shared_nsqd):
    df = spark.createDataFrame([("héllo", 1), ("world", 2)], "value string, other int")
    df.write.format("nsq").option("nsqd", shared_nsqd.tcp_address).option(
        "topic", "spark-value").mode("append").save()
    assert sorted(consume(shared_nsqd, "spark-value", 2)) == sorted(["héllo".encode(), b"world"])


def test_missing_body_column_is_a_clear_error(spark, shared_nsqd):
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS payload")
    with pytest.raises(Exception, match="column named 'body'"):
        df.write.format("nsq").option("nsqd", shared_nsqd.tcp_address).option(
            "topic", "spark-nobody").mode("append").save()


def test_bad_topic_in_a_row_is_named(spark, shared_nsqd):
    df = spark.createDataFrame([("x", "good-topic"), ("y", "bad topic!")], "body string, topic string")
    with pytest.raises(Exception, match="invalid topic name 'bad topic!'"):
        df.write.format("nsq").option("nsqd", shared_nsqd.tcp_address).mode("append").save()


def test_empty_body_is_a_clear_error(spark, shared_nsqd):
    df = spark.createDataFrame([("x",), ("",)], "body string")
    with pytest.raises(Exception, match="empty body"):
        df.write.format("nsq").option("nsqd", shared_nsqd.tcp_address).option(
            "topic", "spark-empty").mode("append").save()


def test_write_stream_publishes_every_file_row(spark, shared_nsqd, tmp_path: Path):
    source = tmp_path / "in"
    source.mkdir()
    lines = [f"line-{i}" for i in range(600)]
    for n in range(3):
        (source / f"part-{n}.txt").write_text("\n".join(lines[n * 200:(n + 1) * 200]) + "\n")
    stream = spark.readStream.format("text").load(str(source))  # one string column, "value"
    query = (stream.writeStream.format("nsq").option("nsqd", shared_nsqd.tcp_address)
             .option("topic", "spark-stream")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(DEADLINE * 4)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(consume(shared_nsqd, "spark-stream", 600)) == sorted(s.encode() for s in lines)


def test_sink_through_lookupd_nodes(spark, run_daemon):
    lookupd = run_daemon("nsqlookupd")
    nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}")

    def registered() -> bool:
        nodes = httpx.get(f"http://{lookupd.http_address}/nodes").json()
        return bool(nodes["producers"])

    wait_until(registered, ignore=(httpx.HTTPError,), what="nsqd registered with nsqlookupd")
    df = spark.range(100).selectExpr("CAST(id AS STRING) AS body")
    df.write.format("nsq").option("lookupd", lookupd.http_address).option(
        "topic", "spark-lookupd").mode("append").save()
    assert sorted(consume(nsqd, "spark-lookupd", 100)) == sorted(str(i).encode() for i in range(100))


def test_default_save_mode_publishes_as_kafka_s_sink(spark, shared_nsqd):
    """Spark's default save mode (ErrorIfExists) and ``error`` publish, as Kafka's sink does;
    the example in docs/spark.md has no ``.mode(...)``."""
    df = spark.range(50).selectExpr("CAST(id AS STRING) AS body")
    (df.write.format("nsq").option("nsqd", shared_nsqd.tcp_address)
       .option("topic", "spark-default-mode").save())
    df.write.mode("error").save(format="nsq", nsqd=shared_nsqd.tcp_address,
                                topic="spark-default-mode")
    bodies = consume(shared_nsqd, "spark-default-mode", 100)
    assert collections.Counter(bodies) == collections.Counter(
        str(i).encode() for i in range(50) for _ in range(2))


def test_overwrite_and_ignore_are_refused_as_kafka_s_sink_does(spark, shared_nsqd):
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS body")
    writer = df.write.format("nsq").option("nsqd", shared_nsqd.tcp_address).option(
        "topic", "spark-overwrite")
    with pytest.raises(Exception, match="save mode Overwrite is not allowed for nsq"):
        writer.mode("overwrite").save()
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        writer.mode("ignore").save()
    assert not [t for t in httpx.get(f"http://{shared_nsqd.http_address}/stats",
                                     params={"format": "json"}).json()["topics"]
                if t["topic_name"] == "spark-overwrite"]


def test_other_formats_keep_spark_s_default_save_mode(spark, tmp_path: Path):
    df = spark.range(3)
    df.write.format("parquet").save(str(tmp_path / "p"))
    with pytest.raises(Exception, match="PATH_ALREADY_EXISTS"):
        df.write.format("parquet").save(str(tmp_path / "p"))
