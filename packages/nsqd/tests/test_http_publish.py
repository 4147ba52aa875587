"""/pub and /mpub in process (httpx over ASGI into ``http_api.build_app``): what they publish
reaches a TCP consumer intact, from memory and from the disk queue past --mem-queue-size."""

from __future__ import annotations

import struct
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
from nsqd.broker import Broker
from nsqd.http_api import build_app
from nsqd.options import Options
from nsqd.tcp import handle_stream

WAIT = 10.0  # the most any one step may take on a busy machine
MESSAGE = 2


def frames(data: bytes) -> list[tuple[int, bytes]]:
    """The whole frames at the start of ``data``, heartbeats left out."""
    out, at = [], 0
    while at + 8 <= len(data):
        size, kind = struct.unpack_from(">ii", data, at)
        if at + 4 + size > len(data):
            break
        if (kind, data[at + 8:at + 4 + size]) != (0, b"_heartbeat_"):
            out.append((kind, data[at + 8:at + 4 + size]))
        at += 4 + size
    return out


async def consume(nursery: trio.Nursery, broker: Broker, n: int) -> list[bytes]:
    """The data of the first ``n`` messages a new consumer of t/c is sent (RDY n)."""
    client, server = trio.testing.memory_stream_pair()
    nursery.start_soon(handle_stream, broker, server, "127.0.0.1:5000")
    await client.send_all(b"  V2SUB t c\nRDY %d\n" % n)
    received = b""
    with trio.fail_after(WAIT):
        while len(got := frames(received)) < 1 + n:  # SUB's OK, then the messages
            received += await client.receive_some(65536)
    assert got[0] == (0, b"OK") and {kind for kind, _ in got[1:]} == {MESSAGE}
    return [data for _, data in got[1:]]


@pytest.fixture
async def broker(nursery: trio.Nursery, tmp_path: Path) -> Broker:
    broker = Broker(Options.defaults(data_path=str(tmp_path), mem_queue_size=2))
    await nursery.start(broker.run)
    return broker


BODIES = [b"pub one", b"pub \x00\xff two", b"line a", b"line b", b"bin\nary", b"x" * 3000]


async def test_published_over_http_past_memory_reach_a_consumer_intact(
        nursery: trio.Nursery, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_messages(*args: object, **kwargs: object) -> None:
        raise AssertionError("a plain HTTP publish waits as records (broker.new_records)")

    monkeypatch.setattr(broker, "new_messages", no_messages)
    channel = broker.get_channel(broker.get_topic("t"), "c")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(broker)),
                                 base_url="http://nsqd.test") as http:
        for body in BODIES[:2]:
            assert (await http.post("/pub?topic=t", content=body)).text == "OK"
        assert (await http.post("/mpub?topic=t", content=b"line a\nline b\n")).text == "OK"
        binary = struct.pack(">i", 2) + b"".join(
            struct.pack(">i", len(b)) + b for b in BODIES[4:])
        assert (await http.post("/mpub?topic=t&binary=true", content=binary)).text == "OK"
    assert (channel.depth, channel.backend_depth) == (6, 4)  # two in memory, four on disk
    assert broker.topics["t"].message_bytes == sum(map(len, BODIES))
    data = await consume(nursery, broker, len(BODIES))
    assert sorted(d[26:] for d in data) == sorted(BODIES)
    assert {struct.unpack_from(">H", d, 8)[0] for d in data} == {1}  # first attempt
    ids = [d[10:26] for d in data]
    assert len(set(ids)) == len(ids) and all(int(i, 16) >= 0 for i in ids)


async def test_deferred_and_expiring_ones_still_published_as_messages(
        nursery: trio.Nursery, broker: Broker) -> None:
    channel = broker.get_channel(broker.get_topic("t"), "c")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(broker)),
                                 base_url="http://nsqd.test") as http:
        assert (await http.post("/pub?topic=t&defer=3600000", content=b"later")).text == "OK"
        assert (await http.post("/pub?topic=t&ttl=3600", content=b"expires")).text == "OK"
        assert (await http.post("/mpub?topic=t&ttl=3600", content=b"e1\ne2")).text == "OK"
    assert len(channel.deferred) == 1
    data = await consume(nursery, broker, 3)
    assert sorted(d[26:] for d in data) == [b"e1", b"e2", b"expires"]
