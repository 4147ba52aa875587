"""The leader's answer to a fetch (nsqd.replication.server) on a real topic and log in
memory: its batches' records, each with its u32 length as a batch frames it, stay within the
fetch's ``max bytes``, and it carries at least one record whenever one is there."""

from __future__ import annotations

import trio
from nsqd.clock import SystemClock
from nsqd.record import new_records
from nsqd.replication import wire
from nsqd.replication.cursors import Shipped
from nsqd.replication.replica import Replica
from nsqd.replication.server import ReplicationServer
from nsqd.replication.wire import Fetch, FetchTopic, Forward
from nsqd.topic import Topic
from nsqd.topiclog import TopicLog

ME, FOLLOWER = "127.0.0.1:1", "127.0.0.1:2"


async def not_forwarded(ask: Forward) -> bytes:
    raise AssertionError("no publish is forwarded here")


async def leading(bodies: list[bytes]) -> tuple[ReplicationServer, Replica]:
    clock = SystemClock()
    topic = Topic("t", TopicLog("t", None, mem_queue_size=1 << 20, clock=clock), clock=clock)
    replica = Replica(topic, node=ME, min_insync=1, lag_max=10.0)
    topic.replicate(replica)
    replica.lead(1, (ME, FOLLOWER), 2)
    await topic.log.append(new_records(bodies, 0, 1), plain=True)
    return ReplicationServer(lambda name: replica if name == "t" else None, trio.current_time,
                             not_forwarded), replica


async def fetched(server: ReplicationServer, offset: int, max_bytes: int
                  ) -> tuple[int, list[bytes]]:
    """The answer's next offset and records."""
    data = await server.fetch(FOLLOWER, Fetch(0, max_bytes, (FetchTopic("t", 1, offset, 0),)),
                              Shipped())
    (answer,) = data.topics
    assert answer.error == wire.NONE
    return answer.next_offset, [r for _, records in wire.decode_batches(answer.batches)
                                for r in records]


async def test_a_fetch_answer_stays_within_max_bytes_counting_each_records_length() -> None:
    server, replica = await leading([b"x" * 10] * 4)
    runs = await replica.log.read_at(0, 4)
    size = len(runs[0][1][0]) + 4  # one record as a batch holds it
    # two records and all but one byte of a third's size: two go, the third waits
    next_offset, records = await fetched(server, 0, 2 * size + size - 1)
    assert next_offset == 2 and len(records) == 2
    # exactly two records' size, less one byte: only one
    next_offset, records = await fetched(server, 0, 2 * size - 1)
    assert next_offset == 1 and len(records) == 1
    # the next fetch goes on from there; the whole budget takes the rest
    next_offset, records = await fetched(server, 1, 3 * size)
    assert next_offset == 4 and len(records) == 3


async def test_a_fetch_answer_carries_one_record_whatever_its_max_bytes() -> None:
    server, _ = await leading([b"y" * 1000, b"z"])
    for max_bytes in (0, 1, 500):
        next_offset, records = await fetched(server, 0, max_bytes)
        assert next_offset == 1 and len(records) == 1
