"""MPUB over TCP as Go's nsqd handles it (protocol_v2.go MPUB, readMPUB), on a raw socket:

- the topic exists as soon as an MPUB names a valid topic it may publish to, even when the
  body is then refused (GetTopic comes before the body is read); a PUB's does not (its body
  is read first);
- the message count and each message's size are refused as soon as their 4 bytes are in: a
  client that declares a message over --max-msg-size is answered at once, without sending
  (or nsqd waiting for) the rest of its declared body.
"""

import struct

import httpx
import pytest
import trio
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient


def size(n: int) -> bytes:
    return struct.pack(">i", n)


def topics(daemon) -> set[str]:
    stats = httpx.get(f"http://{daemon.http_address}/stats?format=json", timeout=DEADLINE).json()
    return {t["topic_name"] for t in stats["topics"]}


async def refused(daemon, data: bytes) -> bytes:
    client = await WireClient.connect(daemon.tcp_address)
    try:
        await client.send(data)
        error = await client.error()
        assert await client.closed()
        return error
    finally:
        await client.aclose()


@pytest.mark.parametrize(("body", "text"), [
    (size(-5), b"E_BAD_BODY MPUB invalid body size -5"),
    (size(5242881), b"E_BAD_BODY MPUB body too big 5242881 > 5242880"),
    (size(4) + size(0), b"E_BAD_BODY MPUB invalid message count 0"),
    (size(8) + size(1) + size(0), b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    (size(12) + size(1) + size(2000000), b"E_BAD_MESSAGE MPUB message too big 2000000 > 1048576"),
    (size(9) + size(1) + size(2) + b"x", b"E_BAD_MESSAGE MPUB failed to read message body"),
])
async def test_a_refused_mpub_body_leaves_its_topic(shared_nsqd, body, text):
    name = f"mpub-refused-{abs(hash(text)) % 10**8}"
    assert await refused(shared_nsqd, b"MPUB %s\n" % name.encode() + body) == text
    assert name in topics(shared_nsqd)


async def test_a_refused_pub_body_or_bad_mpub_topic_makes_no_topic(shared_nsqd):
    assert (await refused(shared_nsqd, b"PUB pub-refused\n" + size(0))
            == b"E_BAD_MESSAGE PUB invalid message body size 0")
    assert (await refused(shared_nsqd, b"MPUB bad*mpub\n" + size(8))).startswith(b"E_BAD_TOPIC")
    assert not {"pub-refused", "bad*mpub"} & topics(shared_nsqd)


@pytest.mark.parametrize(("sent", "text"), [
    # count 2, a first message, then a second declared over --max-msg-size: the rest never sent
    (size(2) + size(3) + b"abc" + size(2000000),
     b"E_BAD_MESSAGE MPUB message too big 2000000 > 1048576"),
    (size(0), b"E_BAD_BODY MPUB invalid message count 0"),
    (size(3) + size(-1), b"E_BAD_MESSAGE MPUB invalid message(0) body size -1"),
])
async def test_refused_as_soon_as_the_size_is_in(shared_nsqd, sent, text):
    client = await WireClient.connect(shared_nsqd.tcp_address)
    try:
        # declares a 5 MB body and sends only its first bytes; the answer does not wait (for
        # what never comes: an nsqd that waited for the body would answer, if at all, only
        # when it drops the silent client, two 30 s heartbeat intervals on: after this deadline)
        await client.send(b"MPUB mpub-early\n" + size(5000000) + sent)
        assert await client.error(timeout=DEADLINE) == text
        assert await client.closed(timeout=DEADLINE)
    finally:
        await client.aclose()


async def test_an_mpub_arriving_in_pieces_is_published_whole(shared_nsqd):
    client = await WireClient.connect(shared_nsqd.tcp_address)
    consumer = await WireClient.connect(shared_nsqd.tcp_address)
    try:
        await consumer.subscribe("mpub-pieces", "c", rdy=10)
        bodies = [b"a" * 70000, b"b", b"c" * 3000]
        data = commands.mpub("mpub-pieces", bodies)
        for start in range(0, len(data), 9973):  # cuts fall inside sizes and bodies
            await client.send(data[start:start + 9973])
            await trio.sleep(0.001)
        assert await client.response() == b"OK"
        assert [m.body for m in await consumer.messages(3)] == bodies
    finally:
        await client.aclose()
        await consumer.aclose()
