"""statsd lines of a known workload: names, kinds, order, counters as changes since the last
push, ephemeral topics and channels left out on request."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import trio
import trio.testing
from nsqd.broker import Broker
from nsqd.options import Options
from nsqd.statsd import StatsdState, collect
from nsqd.tcp import handle_stream


def pub(topic: bytes, body: bytes) -> bytes:
    return b"PUB %s\n" % topic + struct.pack(">i", len(body)) + body


async def published(nursery: trio.Nursery, broker: Broker, data: bytes, oks: int) -> None:
    client, server = trio.testing.memory_stream_pair()
    nursery.start_soon(handle_stream, broker, server, "127.0.0.1:5001")
    await client.send_all(b"  V2" + data)
    got = b""
    with trio.fail_after(10):
        while got.count(b"OK") < oks:
            got += await client.receive_some(65536)


@pytest.mark.parametrize("exclude", [False, True])
async def test_lines_of_a_push_and_the_next(nursery: trio.Nursery, tmp_path: Path,
                                            exclude: bool) -> None:
    broker = Broker(Options.defaults(data_path=str(tmp_path), statsd_mem_stats=False,
                                     statsd_exclude_ephemeral=exclude))
    await nursery.start(broker.run)
    topic = broker.get_topic("t")
    broker.get_channel(topic, "b")
    broker.get_channel(topic, "a#ephemeral")
    await published(nursery, broker, pub(b"t", b"hello") * 2, 2)
    state = StatsdState()
    channel = ["message_count:2|c", "depth:2|g", "backend_depth:0|g", "in_flight_count:0|g",
               "deferred_count:0|g", "requeue_count:0|c", "timeout_count:0|c", "clients:0|g"]
    expected = [f"p.topic.t.{line}" for line in (
        "message_count:2|c", "message_bytes:10|c", "depth:0|g", "backend_depth:0|g")]
    for name in ("b", "a#ephemeral")[:1 if exclude else 2]:
        expected += [f"p.topic.t.channel.{name}.{line}" for line in channel]
    assert collect(broker, state, "p.") == expected
    await published(nursery, broker, pub(b"t", b"again"), 1)
    again = collect(broker, state, "p.")
    assert again[:2] == ["p.topic.t.message_count:1|c", "p.topic.t.message_bytes:5|c"]
    assert again[4:6] == ["p.topic.t.channel.b.message_count:1|c", "p.topic.t.channel.b.depth:3|g"]


async def test_memory_figures(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = Broker(Options.defaults(data_path=str(tmp_path), statsd_mem_stats=True))
    await nursery.start(broker.run)
    lines = collect(broker, StatsdState(), "p.")
    assert [line.split(":")[0] for line in lines] == [f"p.mem.{key}" for key in (
        "heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
        "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes", "gc_runs")]
    assert lines[-1].endswith("|c") and all(line.endswith("|g") for line in lines[:-1])
