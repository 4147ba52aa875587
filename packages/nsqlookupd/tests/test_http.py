"""The HTTP API in process (httpx over ASGI): NSQ's bodies byte for byte, codes and headers."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import attrs
import httpx
import pytest
from nsq_testing.clock import FakeClock, S
from nsqlookupd.http_api import create_app
from nsqlookupd.logger import Logger
from nsqlookupd.registry import PeerInfo, RegistrationDB

V1 = "nsq; version=1.0"
JSON = "application/json; charset=utf-8"



@attrs.define
class API:
    db: RegistrationDB
    clock: FakeClock
    client: httpx.AsyncClient
    log: io.StringIO

    def add_peer(self, n: int = 1) -> PeerInfo:
        peer = PeerInfo(id=f"127.0.0.1:{5000 + n}", remote_address=f"127.0.0.1:{5000 + n}",
                        hostname=f"host{n}", broadcast_address=f"nsqd{n}", tcp_port=4150 + n,
                        http_port=4250 + n, version="1.3.0")
        self.db.identify(peer)
        return peer


@pytest.fixture
async def api() -> AsyncIterator[API]:
    clock = FakeClock()
    db = RegistrationDB(inactive_timeout=300 * S, tombstone_lifetime=45 * S, clock=clock)
    log = io.StringIO()
    app = create_app(db, Logger(stream=log))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://lookupd") as client:
        yield API(db, clock, client, log)


def assert_v1(response: httpx.Response, status: int, body: bytes) -> None:
    assert response.status_code == status
    assert response.content == body
    assert response.headers["x-nsq-content-type"] == V1
    if body:
        assert response.headers["content-type"] == JSON
    else:
        assert "content-type" not in response.headers


async def test_ping_is_plain_text(api: API) -> None:
    response = await api.client.get("/ping")
    assert response.status_code == 200
    assert response.content == b"OK"
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert "x-nsq-content-type" not in response.headers


async def test_info(api: API) -> None:
    assert_v1(await api.client.get("/info"), 200, b'{"version":"1.3.0"}')


async def test_empty_lists_are_arrays(api: API) -> None:
    assert_v1(await api.client.get("/topics"), 200, b'{"topics":[]}')
    assert_v1(await api.client.get("/channels?topic=t"), 200, b'{"channels":[]}')
    assert_v1(await api.client.get("/nodes"), 200, b'{"producers":[]}')
    assert_v1(await api.client.get("/debug"), 200, b"{}")


async def test_lookup(api: API) -> None:
    assert_v1(await api.client.get("/lookup?topic=t"), 404, b'{"message":"TOPIC_NOT_FOUND"}')
    assert_v1(await api.client.get("/lookup"), 400, b'{"message":"MISSING_ARG_TOPIC"}')
    peer = api.add_peer()
    api.db.register(peer, "t", "c")
    assert_v1(await api.client.get("/lookup?topic=t"), 200,
              b'{"channels":["c"],"producers":[{"remote_address":"127.0.0.1:5001",'
              b'"hostname":"host1","broadcast_address":"nsqd1","tcp_port":4151,'
              b'"http_port":4251,"version":"1.3.0"}]}')


async def test_topics_and_channels(api: API) -> None:
    peer = api.add_peer()
    api.db.register(peer, "t", "c1")
    api.db.register(peer, "t", "c2")
    api.db.register(peer, "u", None)
    assert_v1(await api.client.get("/topics"), 200, b'{"topics":["t","u"]}')
    assert_v1(await api.client.get("/channels?topic=t"), 200, b'{"channels":["c1","c2"]}')
    assert_v1(await api.client.get("/channels"), 400, b'{"message":"MISSING_ARG_TOPIC"}')


async def test_nodes(api: API) -> None:
    a, b = api.add_peer(1), api.add_peer(2)
    api.db.register(a, "t", "c")
    api.db.register(a, "u", None)
    api.db.tombstone_topic_producer("u", "nsqd1:4251")
    assert_v1(await api.client.get("/nodes"), 200,
              b'{"producers":[{"remote_address":"127.0.0.1:5001","hostname":"host1",'
              b'"broadcast_address":"nsqd1","tcp_port":4151,"http_port":4251,"version":"1.3.0",'
              b'"tombstones":[false,true],"topics":["t","u"]},'
              b'{"remote_address":"127.0.0.1:5002","hostname":"host2",'
              b'"broadcast_address":"nsqd2","tcp_port":4152,"http_port":4252,"version":"1.3.0",'
              b'"tombstones":[],"topics":[]}]}')
    del b


async def test_debug(api: API) -> None:
    peer = api.add_peer()
    api.db.register(peer, "t", None)
    now = api.clock.now
    assert_v1(await api.client.get("/debug"), 200, (
        '{"client::":[{"broadcast_address":"nsqd1","hostname":"host1","http_port":4251,'
        f'"id":"127.0.0.1:5001","last_update":{now},"tcp_port":4151,"tombstoned":false,'
        '"tombstoned_at":-6795364578871345152,"version":"1.3.0"}],'
        '"topic:t:":[{"broadcast_address":"nsqd1","hostname":"host1","http_port":4251,'
        f'"id":"127.0.0.1:5001","last_update":{now},"tcp_port":4151,"tombstoned":false,'
        '"tombstoned_at":-6795364578871345152,"version":"1.3.0"}]}').encode())


async def test_topic_create_and_delete(api: API) -> None:
    post = api.client.post
    assert_v1(await post("/topic/create"), 400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert_v1(await post("/topic/create?topic=bad!"), 400, b'{"message":"INVALID_ARG_TOPIC"}')
    assert_v1(await post("/topic/create?topic="), 400, b'{"message":"INVALID_ARG_TOPIC"}')
    assert_v1(await post("/topic/create?topic=t"), 200, b"")
    assert_v1(await post("/channel/create?topic=t&channel=c"), 200, b"")
    assert_v1(await api.client.get("/topics"), 200, b'{"topics":["t"]}')
    assert_v1(await api.client.get("/lookup?topic=t"), 200, b'{"channels":["c"],"producers":[]}')
    assert_v1(await post("/topic/delete"), 400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert_v1(await post("/topic/delete?topic=t"), 200, b"")
    assert_v1(await post("/topic/delete?topic=absent"), 200, b"")
    assert_v1(await api.client.get("/topics"), 200, b'{"topics":[]}')
    assert_v1(await api.client.get("/channels?topic=t"), 200, b'{"channels":[]}')
    assert "DB: removing channel(c) from topic(t)" in api.log.getvalue()


@pytest.mark.parametrize(("query", "text"), [
    ("", "MISSING_ARG_TOPIC"),
    ("?topic=t!", "INVALID_ARG_TOPIC"),
    ("?topic=t", "MISSING_ARG_CHANNEL"),
    ("?topic=t&channel=", "INVALID_ARG_CHANNEL"),
    ("?topic=t&channel=" + "c" * 65, "INVALID_ARG_CHANNEL"),
    ("?topic=%zz", "INVALID_REQUEST"),
    ("?topic=t;channel=c", "INVALID_REQUEST"),
])
@pytest.mark.parametrize("path", ["/channel/create", "/channel/delete"])
async def test_channel_argument_errors(api: API, path: str, query: str, text: str) -> None:
    assert_v1(await api.client.post(path + query), 400, f'{{"message":"{text}"}}'.encode())


async def test_channel_delete(api: API) -> None:
    post = api.client.post
    assert_v1(await post("/channel/delete?topic=t&channel=c"), 404,
              b'{"message":"CHANNEL_NOT_FOUND"}')
    await post("/channel/create?topic=t&channel=c#ephemeral".replace("#", "%23"))
    assert_v1(await api.client.get("/channels?topic=t"), 200, b'{"channels":["c#ephemeral"]}')
    assert_v1(await post("/channel/delete?topic=t&channel=c%23ephemeral"), 200, b"")
    assert_v1(await api.client.get("/channels?topic=t"), 200, b'{"channels":[]}')
    assert_v1(await api.client.get("/topics"), 200, b'{"topics":["t"]}')


async def test_tombstone(api: API) -> None:
    post = api.client.post
    assert_v1(await post("/topic/tombstone"), 400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert_v1(await post("/topic/tombstone?topic=t"), 400, b'{"message":"MISSING_ARG_NODE"}')
    a, b = api.add_peer(1), api.add_peer(2)
    api.db.register(a, "t", None)
    api.db.register(b, "t", None)
    assert_v1(await post("/topic/tombstone?topic=t&node=nsqd1:4251"), 200, b"")
    producers = (await api.client.get("/lookup?topic=t")).json()["producers"]
    assert [p["broadcast_address"] for p in producers] == ["nsqd2"]
    api.clock.now += 45 * S
    producers = (await api.client.get("/lookup?topic=t")).json()["producers"]
    assert [p["broadcast_address"] for p in producers] == ["nsqd1", "nsqd2"]


async def test_invalid_queries(api: API) -> None:
    for query in ("topic=%zz", "topic=%2", "topic=a;b", "a=1&topic=t&b=%"):
        assert_v1(await api.client.get(f"/lookup?{query}"), 400, b'{"message":"INVALID_REQUEST"}')
    # the first value of a repeated key wins; "+" is a space
    api.db.create_topic("t")
    assert_v1(await api.client.get("/lookup?topic=t&topic=u"), 200,
              b'{"channels":[],"producers":[]}')
    assert_v1(await api.client.post("/topic/create?topic=a+b"), 400,
              b'{"message":"INVALID_ARG_TOPIC"}')


async def test_not_found_and_method_not_allowed(api: API) -> None:
    assert_v1(await api.client.get("/nope"), 404, b'{"message":"NOT_FOUND"}')
    assert_v1(await api.client.get("/"), 404, b'{"message":"NOT_FOUND"}')
    response = await api.client.get("/topic/create?topic=t")
    assert_v1(response, 405, b'{"message":"METHOD_NOT_ALLOWED"}')
    assert response.headers["allow"] == "OPTIONS, POST"
    response = await api.client.post("/lookup?topic=t")
    assert_v1(response, 405, b'{"message":"METHOD_NOT_ALLOWED"}')
    assert response.headers["allow"] == "GET, OPTIONS"
    response = await api.client.head("/ping")  # no implicit HEAD, as in httprouter
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, OPTIONS"
    response = await api.client.put("/debug/pprof/symbol")
    assert response.headers["allow"] == "GET, OPTIONS, POST"
    assert "405 POST /lookup?topic=t (127.0.0.1:123)" in api.log.getvalue()


async def test_options(api: API) -> None:
    response = await api.client.options("/lookup")
    assert response.status_code == 200
    assert response.content == b""
    assert response.headers["allow"] == "GET, OPTIONS"
    assert (await api.client.options("/nope")).status_code == 404


@pytest.mark.parametrize(("method", "path", "status", "location"), [
    ("GET", "/lookup/?topic=t", 301, "/lookup?topic=t"),
    ("GET", "/LOOKUP?topic=t", 301, "/lookup?topic=t"),
    ("GET", "/Topics/", 301, "/topics"),
    ("POST", "/topic/create/?topic=t", 307, "/topic/create?topic=t"),
    ("POST", "/Topic/Create?topic=t", 307, "/topic/create?topic=t"),
])
async def test_redirects(api: API, method: str, path: str, status: int, location: str) -> None:
    response = await api.client.request(method, path)
    assert response.status_code == status
    assert response.headers["location"] == location
    if method == "GET":
        assert response.text == f'<a href="{location}">Moved Permanently</a>.\n\n'
    else:
        assert response.content == b""


async def test_post_redirect_only_for_post_routes(api: API) -> None:
    assert (await api.client.post("/lookup/")).status_code == 404
    assert (await api.client.get("/topic/create/")).status_code == 404


async def test_handler_crash_is_internal_error(api: API) -> None:
    class Broken(RegistrationDB):
        def topics(self) -> list[str]:
            raise RuntimeError("broken")

    app = create_app(Broken(), Logger(stream=api.log))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://lookupd") as client:
        assert_v1(await client.get("/topics"), 500, b'{"message":"INTERNAL_ERROR"}')
        assert (await client.get("/ping")).content == b"OK"
    assert "panic in HTTP handler - RuntimeError('broken')" in api.log.getvalue()


async def test_request_log_line(api: API) -> None:
    await api.client.get("/topics?x=1")
    assert " INFO: 200 GET /topics?x=1 (127.0.0.1:123) " in api.log.getvalue()


async def test_pprof_stubs(api: API) -> None:
    assert (await api.client.get("/debug/pprof")).status_code == 200
    assert (await api.client.get("/debug/pprof/cmdline")).status_code == 200
    assert (await api.client.get("/debug/pprof/heap")).status_code == 501

