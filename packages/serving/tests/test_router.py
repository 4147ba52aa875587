"""Router in process (httpx over ASGI) and over a real listener: Go's httprouter rules under
NSQ's conventions and gin's, checked against the answers of Go's nsqd 1.3 (HEAD, OPTIONS, 405
with ``Allow``, trailing-slash and case redirects, unknown routes, ``:name`` segments)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from nsq_serving import (
    NSQ,
    V1_EMPTY,
    Conventions,
    HttpError,
    Router,
    plain_text,
    v1_error,
    v1_json,
)
from nsq_serving._router import _clean_path
from nsq_serving._tree import Conflict, Tree
from starlette.requests import Request
from starlette.responses import Response

V1 = "nsq; version=1.0"


def make_router(conventions: Conventions = NSQ, lines: list[str] | None = None) -> Router:
    async def ping(request: Request) -> Response:
        return plain_text("OK")

    async def pub(request: Request) -> Response:
        return V1_EMPTY

    async def config(request: Request) -> Response:
        return v1_json({"opt": request.path_params["opt"], "method": request.method})

    async def refuse(request: Request) -> Response:
        raise HttpError(400, "INVALID_ARG")

    async def bug(request: Request) -> Response:
        raise RuntimeError("bug")

    router = Router(conventions, access_log=None if lines is None else lines.append,
                    error_log=lambda line, exc: (lines or []).append(line))
    router.add("GET", "/ping", ping)
    router.add("POST", "/pub", pub)
    router.add("GET", "/config/:opt", config)
    router.add("PUT", "/config/:opt", config)
    router.add("POST", "/refuse", refuse)
    router.add("GET", "/bug", bug)
    return router


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_router())
    async with httpx.AsyncClient(transport=transport, base_url="http://nsqd") as client:
        yield client


async def test_head_is_a_method_without_routes_as_in_go_s_nsqd(client):
    response = await client.head("/ping")
    assert (response.status_code, response.headers["allow"]) == (405, "GET, OPTIONS")
    assert response.headers["x-nsq-content-type"] == V1


@pytest.mark.parametrize(("method", "path", "status", "allow", "body"), [
    ("POST", "/ping", 405, "GET, OPTIONS", b'{"message":"METHOD_NOT_ALLOWED"}'),
    ("PROPFIND", "/ping", 405, "GET, OPTIONS", b'{"message":"METHOD_NOT_ALLOWED"}'),
    ("DELETE", "/config/x", 405, "GET, OPTIONS, PUT", b'{"message":"METHOD_NOT_ALLOWED"}'),
    ("GET", "/nope", 404, None, b'{"message":"NOT_FOUND"}'),
    ("GET", "/", 404, None, b'{"message":"NOT_FOUND"}'),
    ("GET", "/config/", 404, None, b'{"message":"NOT_FOUND"}'),  # no empty :opt
    ("OPTIONS", "/pub", 200, "OPTIONS, POST", b""),
    ("OPTIONS", "/nope", 404, None, b'{"message":"NOT_FOUND"}'),
])
async def test_what_no_route_answers(client, method, path, status, allow, body):
    response = await client.request(method, path)
    assert (response.status_code, response.content) == (status, body)
    assert response.headers.get("allow") == allow
    if status != 200:
        assert response.headers["x-nsq-content-type"] == V1


@pytest.mark.parametrize(("method", "path", "status", "location"), [
    ("GET", "/ping/", 301, "/ping"),
    ("GET", "/PING?x=1", 301, "/ping?x=1"),
    ("GET", "/config/log_level/", 301, "/config/log_level"),
    ("GET", "/Config/log_level", 301, "/config/log_level"),
    ("POST", "/pub/?topic=a", 307, "/pub?topic=a"),
    ("PUT", "/CONFIG/x", 307, "/config/x"),
])
async def test_redirects_as_go_s_nsqd(client, method, path, status, location):
    response = await client.request(method, path)
    assert (response.status_code, response.headers["location"]) == (status, location)
    if method == "GET":
        assert response.text == f'<a href="{location}">Moved Permanently</a>.\n\n'
        assert response.headers["content-type"] == "text/html; charset=utf-8"
    else:
        assert response.content == b""


async def test_params_errors_and_bugs():
    lines: list[str] = []
    transport = httpx.ASGITransport(app=make_router(lines=lines))
    async with httpx.AsyncClient(transport=transport, base_url="http://nsqd") as client:
        assert (await client.put("/config/log_level")).json() == {"opt": "log_level",
                                                                    "method": "PUT"}
        response = await client.post("/refuse")
        assert (response.status_code, response.content) == (400, b'{"message":"INVALID_ARG"}')
        response = await client.get("/bug")
        assert (response.status_code, response.content) == (500, b'{"message":"INTERNAL_ERROR"}')
    assert "panic in HTTP handler - RuntimeError('bug')" in lines
    assert any(line.startswith("400 POST /refuse (127.0.0.1:123) ") for line in lines)


async def test_direct_endpoints_are_the_router_s():
    router = make_router()
    for path, methods in (("/ping", {"GET"}), ("/config/x", {"GET", "PUT"})):
        found = router.get(path)
        assert found is not None
        assert {m for m in ("GET", "PUT", "POST", "HEAD") if found.get(m)} == methods
    assert router.get("/nope") is None


async def test_gin_s_conventions():
    def error(exc: HttpError) -> Response:
        return v1_error(exc.status, exc.text)

    gin = Conventions(error=error, not_found=HttpError(404, "api not found"),
                      method_not_allowed=None, internal_error=HttpError(500, "internal error"),
                      options=False, fixed_path=False, empty_params=True)
    router = make_router(gin)
    for method, tail in (("GET", ""), ("GET", "/peek"), ("GET", "/size"), ("PUT", ""),
                         ("PUT", "/bulk"), ("PUT", "/job/:job_id")):  # (two after "q/" split)
        router.add(method, "/api/:namespace/:queue" + tail, queue_route)
    transport = httpx.ASGITransport(app=router)
    async with httpx.AsyncClient(transport=transport, base_url="http://lmstfy") as client:
        assert (await client.get("/api//q")).json() == {"opt": "", "method": "GET"}
        for method, path in (("POST", "/ping"), ("OPTIONS", "/pub"), ("GET", "/PING"),
                             ("GET", "/config/"),  # no empty last :name in gin's tree
                             ("GET", "/api/ns"), ("GET", "/api/ns/q/"), ("PUT", "/api/ns/q/")):
            response = await client.request(method, path)
            answer = (response.status_code, response.json())
            assert answer == (404, {"message": "api not found"}), path
        for method, path, status, location in (
                ("GET", "/ping/", 301, "/ping"), ("GET", "/api/ns/q/peek/", 301, "/api/ns/q/peek"),
                ("GET", "/api/ns/", 301, "/api/ns"), ("PUT", "/api/ns/?a=b", 307, "/api/ns?a=b"),
                ("GET", "/api/n%20s/q/peek/", 301, "/api/n%20s/q/peek")):
            response = await client.request(method, path)
            assert (response.status_code, response.headers["location"]) == (status, location)


async def queue_route(request: Request) -> Response:
    return v1_json({"opt": request.path_params["namespace"], "method": request.method})


def test_trailing_slash_as_httprouter_s_tree() -> None:
    """The tree's recommendation, not "the toggled path has a route": Go's httprouter v1.3.0
    and gin (lmstfy 1.0.10's) give these for lmstfy's GET routes."""
    tree = Tree()
    for tail in ("/peek", "/job/:job_id", "", "/deadletter", "/size", "/deadletter/size"):
        tree.add("/api/:namespace/:queue" + tail)
    for path, redirects in (("/api/ns", False), ("/api/ns/", True), ("/api/ns/q/", False),
                            ("/api/ns/q/peek/", True), ("/api/ns/q/deadletter/", True),
                            ("/api/ns/q/job/", False), ("/api/ns/q/job/x/", True),
                            ("/api", False), ("/api/", False), ("/api/ns/q/peekx", False),
                            ("/api/ns/q/deadletter/size/", True), ("/api/ns/q", False)):
        assert tree.redirects(path) is redirects, path
    with pytest.raises(Conflict):
        tree.add("/api/:namespace/fixed")


def test_clean_path_like_httprouter() -> None:
    assert _clean_path("/./debug/../ping") == "/ping"
    assert _clean_path("//lookup") == "/lookup"
    assert _clean_path("/a/b/../../..") == "/"
    assert _clean_path("/topics/") == "/topics/"
    assert _clean_path("") == "/"
