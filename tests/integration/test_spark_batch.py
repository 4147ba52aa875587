"""Batch reads on a real local Spark session and a real nsqd: spark.read.format("nsq"), of a
channel (consumed) and of a topic's log by offset (repeatable), and the options refused when
a DataFrame is defined."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from typing import Any

import httpx
import nsq_spark
import pytest
import trio
from nsq_client import Producer
from nsq_testing import Daemon, wait_until

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = nsq_spark.local_session("test-spark-batch")
    try:
        yield session
    finally:
        session.stop()


def publish(nsqd: Daemon, topic: str, bodies: list[bytes]) -> None:
    async def main() -> None:
        async with Producer(nsqd.tcp_address) as producer:
            for start in range(0, len(bodies), 200):
                await producer.mpub(topic, bodies[start:start + 200])

    trio.run(main)


def create_channel(nsqd: Daemon, topic: str, channel: str) -> None:
    """Before the publish, so the channel gets every message."""
    for path, params in (("/topic/create", {"topic": topic}),
                         ("/channel/create", {"topic": topic, "channel": channel})):
        httpx.post(f"http://{nsqd.http_address}{path}", params=params).raise_for_status()


def channel_stats(nsqd: Daemon, topic: str, channel: str) -> dict[str, Any]:
    doc = httpx.get(f"http://{nsqd.http_address}/stats",
                    params={"format": "json", "topic": topic, "channel": channel}).json()
    [found] = [c for t in doc["topics"] if t["topic_name"] == topic
               for c in t["channels"] if c["channel_name"] == channel]
    return found


def settled(nsqd: Daemon, topic: str, channel: str, depth: int) -> dict[str, Any] | None:
    """The channel's stats once it holds ``depth`` messages and none in flight."""
    stats = channel_stats(nsqd, topic, channel)
    return stats if stats["depth"] == depth and stats["in_flight_count"] == 0 else None


def test_batch_read_returns_each_queued_message_once(spark, shared_nsqd):
    bodies = [f"msg-{i}".encode() for i in range(1000)]
    create_channel(shared_nsqd, "spark-read", "batch")
    publish(shared_nsqd, "spark-read", bodies)
    df = (spark.read.format("nsq").option("nsqd", shared_nsqd.tcp_address)
          .option("topic", "spark-read").option("channel", "batch").option("maxMessages", "1000")
          .option("maxInFlight", "400")  # 3 partitions of about 333 on the one nsqd
          .load())
    assert df.schema == nsq_spark.SCHEMA
    rows = df.collect()
    assert collections.Counter(r.body for r in rows) == collections.Counter(bodies)
    assert len({r.id for r in rows}) == 1000
    assert {(r.topic, r.channel, r.nsqd, r.attempts) for r in rows} == {
        ("spark-read", "batch", shared_nsqd.tcp_address, 1)}
    stats = wait_until(lambda: settled(shared_nsqd, "spark-read", "batch", 0),
                       what="channel depth 0, nothing in flight")
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)


def test_max_messages_leaves_the_rest_queued(spark, shared_nsqd):
    create_channel(shared_nsqd, "spark-limit", "batch")
    publish(shared_nsqd, "spark-limit", [b"m%d" % i for i in range(300)])
    rows = (spark.read.format("nsq").option("nsqd", shared_nsqd.tcp_address)
            .option("topic", "spark-limit").option("channel", "batch")
            .option("maxMessages", "120").option("idleTimeout", "500ms").load().collect())
    assert len(rows) == 120 and len({r.body for r in rows}) == 120
    wait_until(lambda: settled(shared_nsqd, "spark-limit", "batch", 180),
               what="180 messages left queued")


def test_topic_unknown_to_lookupd_reads_nothing(spark, run_daemon):
    lookupd = run_daemon("nsqlookupd")
    rows = (spark.read.format("nsq").option("lookupd", lookupd.http_address)
            .option("topic", "spark-nowhere").option("channel", "batch").load().collect())
    assert rows == []


def test_a_read_stopped_early_gives_its_messages_back(shared_nsqd):
    """No Spark: the reader's generator closed after its first chunk (a failed task) REQueues
    everything it took, at once, so the channel holds all of it again."""
    from nsq_spark import options as parsing
    from nsq_spark.batch import CHUNK, BatchReader, NsqdShare

    create_channel(shared_nsqd, "spark-early", "batch")
    publish(shared_nsqd, "spark-early", [b"e%d" % i for i in range(CHUNK + 100)])
    reader = BatchReader(parsing.parse({"nsqd": shared_nsqd.tcp_address, "topic": "spark-early",
                                        "channel": "batch", "maxMessages": str(CHUNK + 100)}))
    [share] = reader.partitions()
    assert share == NsqdShare(shared_nsqd.tcp_address, CHUNK + 100)
    batches = reader.read(share)
    assert next(batches).num_rows == CHUNK
    batches.close()
    stats = wait_until(lambda: settled(shared_nsqd, "spark-early", "batch", CHUNK + 100),
                       what="every message back in the channel")
    assert stats["requeue_count"] == CHUNK + 100


# -- reads by offset -------------------------------------------------------------------------------

def publish_log(nsqd: Daemon, topic: str, bodies: list[bytes]) -> None:
    """To a topic with no channel: nsqd keeps every message (for the first channel to come)."""
    r = httpx.post(f"http://{nsqd.http_address}/mpub", params={"topic": topic},
                   content=b"\n".join(bodies))
    assert r.status_code == 200, r.text


def offsets(topic: str, nsqd: Daemon, n: int) -> str:
    return json.dumps({topic: {nsqd.http_address: n}})


def test_a_read_between_offsets_gives_the_same_rows_each_time(spark, shared_nsqd):
    topic = "spark-offsets"
    bodies = [b"o%d" % i for i in range(1000)]
    publish_log(shared_nsqd, topic, bodies)
    df = (spark.read.format("nsq").option("nsqdHttp", shared_nsqd.http_address)
          .option("topic", topic).option("startingOffsets", offsets(topic, shared_nsqd, 100))
          .option("endingOffsets", offsets(topic, shared_nsqd, 700))
          .option("maxRecordsPerPartition", "250").load())
    first = sorted((r.offset, bytes(r.body)) for r in df.collect())
    assert first == [(i, bodies[i]) for i in range(100, 700)]
    publish_log(shared_nsqd, topic, [b"later"])
    assert sorted((r.offset, bytes(r.body)) for r in df.collect()) == first  # nothing consumed
    again = (spark.read.format("nsq").option("nsqdHttp", shared_nsqd.http_address)
             .option("topic", topic).load())  # earliest to latest
    assert again.count() == 1001
    assert again.select("nsqd", "topic", "channel").distinct().collect() == [
        (shared_nsqd.http_address, topic, None)]


def test_topics_and_a_pattern(spark, shared_nsqd):
    for topic in ("pat_a", "pat_b", "other"):
        publish_log(shared_nsqd, topic, [f"{topic}-{i}".encode() for i in range(10)])

    def topics(**option: str) -> collections.Counter:
        reader = spark.read.format("nsq").option("nsqdHttp", shared_nsqd.http_address)
        for key, value in option.items():
            reader = reader.option(key, value)
        return collections.Counter(r.topic for r in reader.load().collect())

    assert topics(topics="pat_a, other") == {"pat_a": 10, "other": 10}
    assert topics(topicPattern="pat_.*") == {"pat_a": 10, "pat_b": 10}


def test_offsets_no_longer_stored_are_data_loss(spark, run_daemon):
    """A topic without retention whose only channel read everything: nsqd keeps none of it,
    and a read of those offsets fails, saying why, unless failOnDataLoss is false."""
    nsqd = run_daemon("nsqd", "--mem-queue-size=10")
    topic = "spark-gone"
    create_channel(nsqd, topic, "reader")
    publish_log(nsqd, topic, [b"g%d" % i for i in range(100)])
    with httpx.Client(base_url=f"http://{nsqd.http_address}", timeout=30) as client:
        taken = client.post("/channel/consume", params={"topic": topic, "channel": "reader",
                                                        "n": "100"}).json()["messages"]
        assert client.post("/message/fin", params={"topic": topic, "channel": "reader"},
                           content="\n".join(m["id"] for m in taken)).status_code == 200

        def earliest() -> int | None:
            doc = client.get("/topic/read", params={"topic": topic, "offset": "1000",
                                                    "n": "1"}).json()
            return doc["earliest_offset"] if doc["earliest_offset"] > 0 else None

        removed_to = wait_until(earliest, what="nsqd removing what every channel read")

    def read(**extra: str) -> Any:
        reader = (spark.read.format("nsq").option("nsqdHttp", nsqd.http_address)
                  .option("topic", topic).option("startingOffsets", offsets(topic, nsqd, 0)))
        for key, value in extra.items():
            reader = reader.option(key, value)
        return reader.load()

    with pytest.raises(Exception, match=r"DataLossError: offsets 0 to \d+ of topic spark-gone"):
        read().collect()
    assert read(failOnDataLoss="false").count() == 100 - removed_to


BAD_READS = [
    ({"topic": "t"}, "one of the options"),
    ({"nsqdHttp": "127.0.0.1:1"}, 'reading needs option "topic"'),
    ({"nsqdHttp": "127.0.0.1:1", "topic": "bad topic!"}, "invalid topic name"),
    ({"nsqdHttp": "127.0.0.1:1", "subscribe": "t"}, "unknown option subscribe"),
    ({"nsqdHttp": "127.0.0.1:1", "topic": "t", "startingOffsets": "now"}, "must be JSON"),
    ({"nsqdHttp": "127.0.0.1:1", "topic": "t", "channel": "c", "startingOffsets": "earliest"},
     "reads a topic by offset"),
    ({"nsqd": "127.0.0.1:1", "topic": "t"}, "uses nsqd's HTTP API"),
    ({"nsqdHttp": "127.0.0.1:1", "topic": "t", "batchSize": "5"}, "option of the sink"),
    ({"nsqdHttp": "127.0.0.1:1", "topic": "t", "timeout": "never"}, "must be a duration"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["read", "readStream"])
def test_bad_options_fail_when_the_dataframe_is_defined(spark, stream):
    for options, message in BAD_READS:
        reader = spark.readStream if stream else spark.read
        with pytest.raises(Exception, match=message):
            reader.format("nsq").options(**options).load()
    with pytest.raises(Exception, match=r"unknown option kafka\.bootstrap\.servers"):
        (spark.range(1).selectExpr("CAST(id AS STRING) AS body").write.format("nsq")
         .option("nsqd", "127.0.0.1:1").option("kafka.bootstrap.servers", "x").mode("append")
         .save())
    with pytest.raises(Exception, match="can't be latest for batch reads"):
        (spark.read.format("nsq").option("nsqdHttp", "127.0.0.1:1").option("topic", "t")
         .option("startingOffsets", "latest").load().collect())


def test_a_range_is_read_from_an_nsqd_that_allows_fewer_per_request(run_daemon):
    """No Spark: an executor's read of a range, from an nsqd whose --max-rdy-count (100) is
    below the 2,500 a request asks for: it asks for fewer and reads the whole range."""
    from nsq_spark.logread import LogRange, read_range
    from nsq_spark.options import parse

    nsqd = run_daemon("nsqd", "--max-rdy-count=100")
    publish_log(nsqd, "small-reads", [b"s%d" % i for i in range(300)])
    options = parse({"nsqdHttp": nsqd.http_address, "topic": "small-reads"})
    batches = list(read_range(options, LogRange("small-reads", nsqd.http_address, 10, 290)))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(10, 290))
    assert max(b.num_rows for b in batches) <= 100
