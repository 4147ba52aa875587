"""/stats as nsqd writes it: exact JSON bytes (field names, order, ``null`` vs ``[]``) for a
known workload, in process (a broker, clients over Trio memory streams)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from nsq_common import go_json
from nsqd.auth import AuthState
from nsqd.broker import Broker
from nsqd.options import Options
from nsqd.stats import memory_stats, stats, stats_text, topic_stats
from nsqd.tcp import handle_stream

WAIT = 10.0


class Peer:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def answer(self) -> tuple[int, bytes]:
        """The next frame that is not a heartbeat."""
        with trio.fail_after(WAIT):
            while True:
                if len(self.buffer) >= 8:
                    size, kind = struct.unpack_from(">ii", self.buffer)
                    if len(self.buffer) >= 4 + size:
                        data = bytes(self.buffer[8:4 + size])
                        del self.buffer[:4 + size]
                        if (kind, data) != (0, b"_heartbeat_"):
                            return kind, data
                        continue
                self.buffer += await self.stream.receive_some(65536)

    async def ok(self, command: bytes) -> None:
        await self.stream.send_all(command)
        assert await self.answer() == (0, b"OK")


@pytest.fixture
async def broker(nursery: trio.Nursery, tmp_path: Path) -> Broker:
    broker = Broker(Options.defaults(data_path=str(tmp_path)))
    await nursery.start(broker.run)
    return broker


async def connect(nursery: trio.Nursery, broker: Broker, remote: str) -> Peer:
    client, server = trio.testing.memory_stream_pair()
    nursery.start_soon(handle_stream, broker, server, remote)
    await client.send_all(b"  V2")
    return Peer(client)


def pub(topic: bytes, body: bytes) -> bytes:
    return b"PUB %s\n" % topic + struct.pack(">i", len(body)) + body


def identify(**fields: Any) -> bytes:
    body = json.dumps(fields).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


async def workload(nursery: trio.Nursery, broker: Broker) -> None:
    """Two topics (one without channels), a paused channel, a consumer with a message in
    flight, a publisher with counts on two topics (one of them authed)."""
    publisher = await connect(nursery, broker, "127.0.0.1:5001")
    await publisher.ok(pub(b"t", b"hello") + pub(b"t", b"world!"))
    assert await publisher.answer() == (0, b"OK")
    await publisher.ok(pub(b"u", b"x"))
    consumer = await connect(nursery, broker, "10.0.0.2:5002")
    await consumer.stream.send_all(identify(client_id="cid", hostname="hn", user_agent="ua/1"))
    assert (await consumer.answer())[0] == 0
    await consumer.ok(b"SUB t c\n")
    await consumer.stream.send_all(b"RDY 1\n")
    assert (await consumer.answer())[0] == 2
    broker.get_channel(broker.topics["t"], "paused").pause()
    pub_client = next(c for c in broker.clients.values() if c.pub_counts)
    pub_client.auth = AuthState("me", "https://id/me", (), 0.0)
    for client in broker.clients.values():
        client.connect_ts = 1700000000


def stable(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with the values that change from run to run fixed."""
    doc["start_time"] = 0
    if "memory" in doc:
        doc["memory"] = dict.fromkeys(doc["memory"], 0)
    return doc


CLIENT_C = (
    b'{"client_id":"cid","hostname":"hn","version":"V2","remote_address":"10.0.0.2:5002",'
    b'"state":3,"ready_count":1,"in_flight_count":1,"message_count":1,"finish_count":0,'
    b'"requeue_count":0,"connect_ts":1700000000,"sample_rate":0,"deflate":false,'
    b'"snappy":false,"user_agent":"ua/1","tls":false,"tls_cipher_suite":"","tls_version":"",'
    b'"tls_negotiated_protocol":"","tls_negotiated_protocol_is_mutual":false}')
LATENCY = b'"e2e_processing_latency":{"count":0,"percentiles":null}'
TOPIC_T = (
    b'{"topic_name":"t","channels":['
    b'{"channel_name":"c","depth":1,"backend_depth":0,"in_flight_count":1,"deferred_count":0,'
    b'"message_count":2,"requeue_count":0,"timeout_count":0,"client_count":1,"clients":['
    + CLIENT_C + b'],"paused":false,' + LATENCY + b'},'
    b'{"channel_name":"paused","depth":0,"backend_depth":0,"in_flight_count":0,'
    b'"deferred_count":0,"message_count":0,"requeue_count":0,"timeout_count":0,'
    b'"client_count":0,"clients":[],"paused":true,' + LATENCY
    + b'}],'
    b'"depth":0,"backend_depth":0,"message_count":2,"message_bytes":11,"paused":false,'
    + LATENCY + b'}')
TOPIC_U = (b'{"topic_name":"u","channels":[],"depth":1,"backend_depth":0,"message_count":1,'
           b'"message_bytes":1,"paused":false,' + LATENCY + b'}')
PRODUCER = (
    b'{"client_id":"127.0.0.1","hostname":"127.0.0.1","version":"V2",'
    b'"remote_address":"127.0.0.1:5001","state":0,"ready_count":0,"in_flight_count":0,'
    b'"message_count":0,"finish_count":0,"requeue_count":0,"connect_ts":1700000000,'
    b'"sample_rate":0,"deflate":false,"snappy":false,"user_agent":"","authed":true,'
    b'"auth_identity":"me","auth_identity_url":"https://id/me",'
    b'"pub_counts":[{"topic":"t","count":2},{"topic":"u","count":1}],"tls":false,'
    b'"tls_cipher_suite":"","tls_version":"","tls_negotiated_protocol":"",'
    b'"tls_negotiated_protocol_is_mutual":false}')
MEMORY = (b'"memory":{"heap_objects":0,"heap_idle_bytes":0,"heap_in_use_bytes":0,'
          b'"heap_released_bytes":0,"gc_pause_usec_100":0,"gc_pause_usec_99":0,'
          b'"gc_pause_usec_95":0,"next_gc_bytes":0,"gc_total_runs":0}')
HEAD = b'{"version":"1.3.0","health":"OK","start_time":0,'


async def test_the_whole_document(nursery: trio.Nursery, broker: Broker) -> None:
    await workload(nursery, broker)
    assert go_json(stable(stats(broker))) == (
        HEAD + b'"topics":[' + TOPIC_T + b"," + TOPIC_U + b"]," + MEMORY
        + b',"producers":[' + PRODUCER + b"]}")


async def test_filters_and_what_they_leave_out(nursery: trio.Nursery, broker: Broker) -> None:
    await workload(nursery, broker)
    # a topic: its producers' counts are of that topic only
    doc = stable(stats(broker, topic="u", include_mem=False))
    assert go_json(doc) == HEAD + b'"topics":[' + TOPIC_U + b'],"producers":[' + PRODUCER.replace(
        b'{"topic":"t","count":2},', b"") + b"]}"
    # no such topic: null topics and producers; no such channel: [] topics
    assert go_json(stable(stats(broker, topic="nope", include_mem=False))) == (
        HEAD + b'"topics":null,"producers":null}')
    assert go_json(stable(stats(broker, channel="nope", include_mem=False))) == (
        HEAD + b'"topics":[],"producers":[' + PRODUCER + b"]}")
    # without clients: clients null, producers null
    doc = stable(stats(broker, topic="t", channel="paused", include_clients=False))
    assert go_json(doc) == (
        HEAD + b'"topics":[{"topic_name":"t","channels":[{"channel_name":"paused","depth":0,'
        b'"backend_depth":0,"in_flight_count":0,"deferred_count":0,"message_count":0,'
        b'"requeue_count":0,"timeout_count":0,"client_count":0,"clients":null,"paused":true,'
        + LATENCY + b'}],"depth":0,"backend_depth":0,'
        b'"message_count":2,"message_bytes":11,"paused":false,' + LATENCY
        + b'}],' + MEMORY + b',"producers":null}')


async def test_the_pieces_metrics_and_statsd_read(nursery: trio.Nursery, broker: Broker) -> None:
    await workload(nursery, broker)
    doc = topic_stats(broker.topics["u"], None, include_clients=False)
    assert go_json(doc.to_json()) == TOPIC_U
    assert list(memory_stats().to_json()) == [
        "heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
        "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes",
        "gc_total_runs"]


async def test_the_text_form(nursery: trio.Nursery, broker: Broker) -> None:
    await workload(nursery, broker)
    doc = stats(broker, include_mem=False)
    doc["start_time"] = 1700000000
    text = stats_text(doc, 1700000090)
    assert text.split("\n", 1)[1] == (
        "start_time 2023-11-14T22:13:20Z\n"
        "uptime 1m30s\n"
        "\n"
        "Health: OK\n"
        "\n"
        "Topics:\n"
        "   [t              ] depth: 0     be-depth: 0     msgs: 2        e2e%: \n"
        "      [c                        ] depth: 1     be-depth: 0     inflt: 1    def: 0    "
        "re-q: 0     timeout: 0     msgs: 2        e2e%: \n"
        "        [V2 hn:5002 ua/1         ] state: 3 inflt: 1    rdy: 1    fin: 0        "
        "re-q: 0        msgs: 1        connected: 1m30s\n"
        "   *P [paused                   ] depth: 0     be-depth: 0     inflt: 0    def: 0    "
        "re-q: 0     timeout: 0     msgs: 0        e2e%: \n"
        "\n"
        "   [u              ] depth: 1     be-depth: 0     msgs: 1        e2e%: \n"
        "\n"
        "Producers:\n"
        "   [V2 127.0.0.1:5001       ] msgs: 0        topics: t=2,u=1 connected: 1m30s\n")
    assert stats_text(stats(broker, topic="nope", include_mem=False), 0).endswith(
        "\nHealth: OK\n\nTopics: None\n\nProducers: None\n")


async def test_the_job_features_keys_only_once_in_use(nursery: trio.Nursery,
                                                     broker: Broker) -> None:
    """After Go's keys, and only while in use: a topic's TTL; a channel's settings, and the
    counts their features make (the workload above uses none: its document is Go's)."""
    await workload(nursery, broker)
    topic = broker.topics["t"]
    topic.message_ttl = 60
    topic.channels["c"].configure(max_attempts=3)
    topic.channels["paused"].configure(dead_letter_expired=True)
    doc = stable(stats(broker, topic="t", include_clients=False, include_mem=False))
    go_topic, (c, paused) = doc["topics"][0], doc["topics"][0]["channels"]
    assert list(go_topic)[-2:] == ["e2e_processing_latency", "message_ttl"]
    assert go_topic["message_ttl"] == 60
    go_keys = ["channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count",
               "message_count", "requeue_count", "timeout_count", "client_count", "clients",
               "paused", "e2e_processing_latency"]
    # the topic has a TTL: both count expiries; an attempt limit: c counts its dead letters
    assert list(c) == [*go_keys, "expired_count", "dead_letter_count", "max_attempts"]
    assert (c["expired_count"], c["dead_letter_count"], c["max_attempts"]) == (0, 0, 3)
    assert list(paused) == [*go_keys, "expired_count", "dead_letter_count",
                            "dead_letter_expired"]
    assert paused["dead_letter_expired"] is True
    text = stats_text(doc, 0)
    assert "e2e%:  ttl: 1m0s\n" in text
    assert "e2e%:  expired: 0 dead: 0 max-attempts: 3\n" in text
    assert "e2e%:  expired: 0 dead: 0 dead-letter-expired: true\n" in text

    # settings gone: only counts that are not zero stay
    topic.message_ttl = 0
    topic.channels["c"].configure(max_attempts=0)
    topic.channels["paused"].configure(dead_letter_expired=False)
    topic.channels["c"].states.expired_count = 2  # as if two had expired
    doc = stats(broker, topic="t", include_clients=False, include_mem=False)
    c, paused = doc["topics"][0]["channels"]
    assert "message_ttl" not in doc["topics"][0]
    assert list(c) == [*go_keys, "expired_count"] and c["expired_count"] == 2
    assert list(paused) == go_keys

