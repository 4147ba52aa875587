"""Message TTL without sockets: the disk record, expiry at delivery, the topic default."""

import struct

from nsqd.message import QueuedMessage
from nsqd.metadata import ChannelMeta, TopicMeta, decode, encode
from nsqd.record import decode_record, decode_records, encode_record, encode_records, is_plain


def test_a_message_without_ttl_is_written_in_go_s_format():
    msg = QueuedMessage(b"0123456789abcdef", b"body", 1_700_000_000_000_000_000, attempts=3)
    record = encode_record(msg)
    assert record == struct.pack(">qH", msg.timestamp, 3) + msg.id + b"body"
    back = decode_record(record)
    assert (back.id, back.body, back.timestamp, back.attempts, back.expires) == (
        msg.id, b"body", msg.timestamp, 3, 0)


def test_a_message_with_ttl_keeps_it_on_disk():
    msg = QueuedMessage(b"0123456789abcdef", b"body", 10, attempts=2, expires=99)
    back = decode_record(encode_record(msg))
    assert (back.id, back.body, back.timestamp, back.attempts, back.expires) == (
        msg.id, b"body", 10, 2, 99)


def test_records_decoded_together_as_one_by_one():
    from nsqd.message import Job

    msgs = [QueuedMessage(b"0123456789abcdef", b"plain", 5, attempts=1),
            QueuedMessage(b"0123456789abcdeg", b"ttl", 6, attempts=2, expires=99),
            Job(b"0123456789abcdeh", b"job", 7, 3, expires=5, tries=4, delay=1, due=8,
                attributes=b'{"a":1}')]
    records = [encode_record(m) for m in msgs]
    assert encode_records(msgs) == records
    fields = ("id", "body", "timestamp", "attempts", "expires", "is_job")
    assert [tuple(getattr(m, f) for f in fields) for m in decode_records(records)] == [
        tuple(getattr(decode_record(r), f) for f in fields) for r in records]


def expiring(n: int, expires: int) -> list[QueuedMessage]:
    return [QueuedMessage(b"%016x" % i, b"m%d" % i, 0, expires=expires) for i in range(n)]


async def test_expired_messages_are_dropped_and_counted_not_delivered(world):
    topic = world.topic()
    ch = world.channel(topic)
    now = world.clock.wall_ns()
    await topic.put([*expiring(2, now + 10**9),
                     QueuedMessage(b"f" * 16, b"fresh", 0, expires=now + 10**12)])
    assert [m.body for m in ch.peek(5, now=0.0)] == [b"m0", b"m1", b"fresh"]
    world.clock.advance(2)  # the first two expire
    assert [m.body for m in ch.peek(5, now=2.0)] == [b"fresh"]
    assert ch.expired_count == 0  # peek counts nothing
    assert [m.body for m in ch.pull(5, 30.0, now=2.0)] == [b"fresh"]
    assert (ch.expired_count, ch.depth, ch.cursor.mark_delete) == (2, 0, 2)


async def test_a_topic_default_ttl_reaches_every_message(world):
    topic = world.topic()
    world.channel(topic)
    plain = QueuedMessage(b"0" * 16, b"a", 1_000)
    await topic.put([plain])
    assert plain.expires == 0 and is_plain(topic.log.read(0, 1)[0][1][0])  # nothing to check
    topic.message_ttl = 5
    msgs = [QueuedMessage(b"1" * 16, b"b", 1_000), QueuedMessage(b"2" * 16, b"c", 1_000, expires=7)]
    await topic.put(msgs)
    assert [m.expires for m in msgs] == [1_000 + 5 * 10**9, 7]  # its own TTL wins
    stored = [decode_record(r) for _, records, _ in topic.log.read(1, 2) for r in records]
    assert [m.expires for m in stored] == [1_000 + 5 * 10**9, 7]


def test_a_dpub_keeps_its_due_time_in_its_record():
    msg = QueuedMessage(b"0123456789abcdef", b"later", 10, expires=0, due=99)
    back = decode_record(encode_record(msg))
    assert (back.due, back.expires, back.body) == (99, 0, b"later")


def test_the_topic_ttl_is_kept_in_the_metadata_only_when_set():
    data = encode([TopicMeta("a", channels=(ChannelMeta("c"),)), TopicMeta("b", message_ttl=60)])
    assert b"message_ttl" in data and data.count(b"message_ttl") == 1
    topics, warnings = decode(data)
    assert [t.message_ttl for t in topics] == [0, 60] and warnings == []
    topics, warnings = decode(b'{"topics":[{"name":"x","message_ttl":"soon"}]}')
    assert topics[0].message_ttl == 0 and warnings
