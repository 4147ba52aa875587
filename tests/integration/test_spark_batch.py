"""Batch reads on a real local Spark session and a real nsqd: spark.read.format("nsq")."""

from __future__ import annotations

import collections
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
