"""serve_http over real loopback sockets: HTTP/1.1 framing, both paths to the app, limits,
closing, lifespan and TLS. Each test runs the server in its own Trio run, with raw sockets as
the client so that every byte on the wire is checked."""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trustme
from nsq_serving import direct_endpoints, serve_http
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

DEADLINE = 30


class Boom(Exception):
    pass


def make_app(*, middleware: bool = False, events: list[str] | None = None) -> Starlette:
    """Routes like NSQ's: plain text, a body read with a declared-length limit, an error."""

    async def ping(request: Request) -> Response:
        return PlainTextResponse("OK")

    async def echo(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and int(length) > 100:
            return JSONResponse({"message": "MSG_TOO_BIG"}, 413)
        body = await request.body()
        return JSONResponse({"body": body.decode(), "query": request.url.query,
                             "path": request.url.path, "scheme": request.url.scheme})

    async def boom(request: Request) -> Response:
        raise Boom("no")

    async def stream(request: Request) -> Response:
        async def parts() -> AsyncIterator[bytes]:
            yield b"one,"
            yield b"two"
        return StreamingResponse(parts(), media_type="text/plain")

    async def handle_boom(request: Request, exc: Exception) -> Response:
        return JSONResponse({"message": "INTERNAL_ERROR"}, 500)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if events is not None:
            events.append("startup")
        try:
            yield
        finally:
            if events is not None:
                await trio.sleep(0)  # shutdown code can still wait
                events.append("shutdown")

    class PassThrough:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await self.app(scope, receive, send)

    return Starlette(
        routes=[Route("/ping", ping, methods=["GET"]), Route("/echo", echo, methods=["POST"]),
                Route("/boom", boom), Route("/stream", stream)],
        middleware=[Middleware(PassThrough)] if middleware else [],
        exception_handlers={Boom: handle_boom}, lifespan=lifespan)


@asynccontextmanager
async def running(app: Any, **kwargs: Any) -> AsyncIterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    address = sock.getsockname()
    tls = kwargs.pop("tls", None)
    async with trio.open_nursery() as nursery:
        if tls is not None:
            await nursery.start(lambda task_status: serve_http(
                app, tls_sockets=[sock], ssl_context=tls, task_status=task_status, **kwargs))
        else:
            await nursery.start(lambda task_status: serve_http(
                app, [sock], task_status=task_status, **kwargs))
        yield address
        nursery.cancel_scope.cancel()
    sock.close()


class Client:
    """A raw HTTP/1.1 client: sends bytes, reads whole answers."""

    def __init__(self, stream: trio.abc.Stream, deadline: float = DEADLINE) -> None:
        self.stream = stream
        self.buffer = b""
        self.deadline = deadline  # seconds on Trio's clock (a mock clock's in some tests)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def _more(self) -> bool:
        data = await self.stream.receive_some(65536)
        self.buffer += data
        return bool(data)

    async def answer(self, *, head: bool = False) -> tuple[int, dict[str, str], bytes]:
        with trio.fail_after(self.deadline):
            while b"\r\n\r\n" not in self.buffer:
                assert await self._more(), f"closed before an answer: {self.buffer!r}"
            raw_head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
            lines = raw_head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ")[1])
            headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
            if head:
                return status, headers, b""
            if headers.get("transfer-encoding") == "chunked":
                body = b""
                while True:
                    while b"\r\n" not in self.buffer:
                        assert await self._more()
                    size_line, _, self.buffer = self.buffer.partition(b"\r\n")
                    size = int(size_line, 16)
                    while len(self.buffer) < size + 2:
                        assert await self._more()
                    body += self.buffer[:size]
                    self.buffer = self.buffer[size + 2:]
                    if size == 0:
                        return status, headers, body
            length = int(headers.get("content-length", "0"))
            while len(self.buffer) < length:
                assert await self._more()
            body, self.buffer = self.buffer[:length], self.buffer[length:]
            return status, headers, body

    async def closed(self) -> bool:
        """True when the server closes the connection (after what it already sent)."""
        with trio.fail_after(self.deadline):
            try:
                while await self._more():
                    pass
            except trio.BrokenResourceError:
                pass
        return True


@asynccontextmanager
async def connect(address: tuple[str, int], deadline: float = DEADLINE
                  ) -> AsyncIterator[Client]:
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        yield Client(stream, deadline)


def post(path: str, body: bytes, *extra: bytes) -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s"
            % (path.encode(), len(body), b"".join(h + b"\r\n" for h in extra), body))


GET_PING = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_plain_routes_are_called_directly_and_the_rest_through_the_app():
    assert set(direct_endpoints(make_app())) == {"/ping", "/echo", "/boom", "/stream"}
    assert direct_endpoints(make_app(middleware=True)) == {}


@pytest.mark.parametrize("middleware", [False, True], ids=["direct", "asgi"])
async def test_keep_alive_and_pipelining_answer_in_order(middleware):
    async with running(make_app(middleware=middleware)) as address, connect(address) as client:
        await client.send(GET_PING + post("/echo?a=1", b"hello") + GET_PING)
        answers = [await client.answer() for _ in range(3)]
        assert [a[0] for a in answers] == [200, 200, 200]
        assert answers[0][2] == b"OK" and answers[2][2] == b"OK"
        assert answers[1][2] == b'{"body":"hello","query":"a=1","path":"/echo","scheme":"http"}'
        assert answers[0][1]["content-type"] == "text/plain; charset=utf-8"
        assert answers[0][1]["content-length"] == "2"
        assert re.fullmatch(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", answers[0][1]["date"])
        assert "connection" not in answers[0][1]
        await client.send(GET_PING)  # still open
        assert (await client.answer())[2] == b"OK"


async def test_both_paths_give_the_same_bytes():
    seen = []
    for middleware in (False, True):
        async with running(make_app(middleware=middleware)) as address, connect(address) as c:
            await c.send(GET_PING + post("/echo", b"x") + b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n"
                         + b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            seen.append([await c.answer() for _ in range(4)])
            await c.send(b"GET /missing HTTP/1.1\r\nHost: x\r\n\r\nPOST /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            seen[-1] += [await c.answer() for _ in range(2)]
    for answers in seen:
        for _, headers, _ in answers:
            headers.pop("date")
    assert seen[0] == seen[1]
    direct = seen[0]
    assert direct[2][:1] == (500,) and direct[2][2] == b'{"message":"INTERNAL_ERROR"}'
    assert direct[3][2] == b"one,two" and direct[3][1]["transfer-encoding"] == "chunked"
    assert direct[4][0] == 404 and direct[5][0] == 405


async def test_chunked_request_body():
    async with running(make_app()) as address, connect(address) as client:
        await client.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n" + GET_PING)
        assert (await client.answer())[2].startswith(b'{"body":"abcdefg"')
        assert (await client.answer())[2] == b"OK"


async def test_expect_continue_is_answered_when_the_app_reads_the_body():
    async with running(make_app()) as address, connect(address) as client:
        await client.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                          b"Expect: 100-continue\r\n\r\n")
        status, _, _ = await client.answer()
        assert status == 100
        await client.send(b"hello")
        status, _, body = await client.answer()
        assert status == 200 and body.startswith(b'{"body":"hello"')


async def test_a_body_refused_by_its_length_is_never_read_and_the_connection_closes():
    async with running(make_app()) as address, connect(address) as client:
        await client.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"
                          b"Expect: 100-continue\r\n\r\n")
        status, headers, body = await client.answer()  # no 100 Continue before it
        assert (status, body) == (413, b'{"message":"MSG_TOO_BIG"}')
        assert headers["connection"] == "close"
        assert await client.closed()


async def test_head_has_the_headers_of_get_and_no_body():
    async with running(make_app()) as address, connect(address) as client:
        await client.send(b"HEAD /ping HTTP/1.1\r\nHost: x\r\n\r\n" + GET_PING)
        status, headers, _ = await client.answer(head=True)
        assert (status, headers["content-length"]) == (200, "2")
        status, get_headers, body = await client.answer()
        assert (status, body) == (200, b"OK")
        assert {**get_headers, "date": ""} == {**headers, "date": ""}


async def test_an_http11_request_without_host_gets_go_s_400():
    async with running(make_app()) as address, connect(address) as client:
        await client.send(b"GET /ping HTTP/1.1\r\n\r\n")
        status, _, body = await client.answer()
        assert (status, body) == (400, b"400 Bad Request: missing required Host header")
        assert await client.closed()


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",
    b"GET /ping HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
], ids=["request-line", "header", "length", "two-lengths"])
async def test_a_request_that_cannot_be_parsed_gets_400_and_the_server_goes_on(request_bytes):
    async with running(make_app()) as address:
        async with connect(address) as client:
            await client.send(request_bytes)
            status, headers, body = await client.answer()
            assert (status, body) == (400, b"400 Bad Request")
            assert headers["connection"] == "close"
            assert await client.closed()
        async with connect(address) as client:
            await client.send(GET_PING)
            assert (await client.answer())[0] == 200


async def test_a_pipelined_request_after_a_broken_one_is_not_answered_but_those_before_are():
    async with running(make_app()) as address, connect(address) as client:
        await client.send(GET_PING + b"NOT HTTP AT ALL\r\n\r\n" + GET_PING)
        assert (await client.answer())[0] == 200
        assert (await client.answer())[0] == 400
        assert await client.closed()
        assert client.buffer == b""


async def test_a_head_too_large_gets_431():
    async with running(make_app()) as address, connect(address) as client:
        await client.send(b"GET /ping HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
        assert (await client.answer())[0] == 431
        assert await client.closed()


@pytest.mark.parametrize(("request_bytes", "connection"), [
    (b"GET /ping HTTP/1.0\r\n\r\n", None),
    (b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", None),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "close"),
], ids=["http1.0", "http1.0-keep-alive", "connection-close"])
async def test_the_connection_closes_after_the_answer_when_asked(request_bytes, connection):
    async with running(make_app()) as address, connect(address) as client:
        await client.send(request_bytes)
        status, headers, body = await client.answer()
        assert (status, body) == (200, b"OK")
        assert headers.get("connection") == connection
        assert await client.closed()


async def test_a_client_gone_mid_body_leaves_the_server_serving():
    async with running(make_app()) as address:
        async with connect(address) as client:
            await client.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nonly-ten..")
        async with connect(address) as client:
            await client.send(GET_PING)
            assert (await client.answer())[2] == b"OK"


async def test_an_idle_connection_is_closed_after_the_keep_alive_timeout(autojump_clock):
    async with running(make_app(), keep_alive_timeout=75) as address, \
            connect(address, deadline=1000) as c:
        await c.send(GET_PING)
        assert (await c.answer())[2] == b"OK"
        start = trio.current_time()
        assert await c.closed()
        assert trio.current_time() - start >= 75


async def test_a_request_in_progress_is_not_cut_by_the_keep_alive_timeout(autojump_clock):
    async def slow(request: Request) -> Response:
        await trio.sleep(300)
        return PlainTextResponse("late")

    app = Starlette(routes=[Route("/slow", slow)])
    async with running(app, keep_alive_timeout=75) as address, \
            connect(address, deadline=1000) as client:
        await client.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await client.answer())[2] == b"late"


async def test_the_lifespan_starts_before_serving_and_ends_after():
    events: list[str] = []
    async with running(make_app(events=events)) as address:
        assert events == ["startup"]
        async with connect(address) as client:
            await client.send(GET_PING)
            assert (await client.answer())[2] == b"OK"
    assert events == ["startup", "shutdown"]


async def test_an_app_without_lifespan_support_is_served():
    async def bare(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with running(bare) as address, connect(address) as client:
        await client.send(GET_PING + GET_PING)
        assert (await client.answer())[0] == 204
        assert (await client.answer())[0] == 204


async def test_an_app_that_fails_before_answering_gets_500_and_the_server_goes_on():
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raise RuntimeError("bug")

    async with running(broken) as address:
        for _ in range(2):
            async with connect(address) as client:
                await client.send(GET_PING)
                assert (await client.answer())[0] == 500
                assert await client.closed()


async def test_https_on_the_same_path():
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    async with running(make_app(), tls=server_context) as address:
        tcp = await trio.open_tcp_stream(*address)
        async with trio.SSLStream(tcp, client_context, server_hostname="127.0.0.1") as stream:
            client = Client(stream)
            await client.send(post("/echo", b"secret") + GET_PING)
            assert b'"scheme":"https"' in (await client.answer())[2]
            assert (await client.answer())[2] == b"OK"


async def test_a_response_made_once_is_answered_alike_every_time():
    # nsqd's "OK" is one Response for every /pub: its head is written once and kept; the
    # answers that need another head (closing ones, HEAD's) are still right.
    ok = PlainTextResponse("OK", headers={"X-Once": "1"})

    async def once(request: Request) -> Response:
        return ok

    app = Starlette(routes=[Route("/once", once, methods=["GET", "HEAD"])])
    async with running(app) as address:
        async with connect(address) as client:
            await client.send(b"GET /once HTTP/1.1\r\nHost: x\r\n\r\n" * 2
                              + b"HEAD /once HTTP/1.1\r\nHost: x\r\n\r\n")
            answers = [await client.answer(head=i == 2) for i in range(3)]
            for _, headers, _ in answers:
                assert re.fullmatch(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT",
                                    headers.pop("date"))
            assert answers[0] == answers[1] == (200, {
                "content-length": "2", "content-type": "text/plain; charset=utf-8",
                "x-once": "1"}, b"OK")
            assert answers[2] == (200, answers[0][1], b"")
            assert client.buffer == b""  # HEAD's answer has no body
            await client.send(b"GET /once HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status, headers, body = await client.answer()
            assert (status, headers.get("connection"), body) == (200, "close", b"OK")
            assert await client.closed()
        async with connect(address) as client:
            await client.send(b"GET /once HTTP/1.0\r\n\r\n")
            status, headers, body = await client.answer()
            assert (status, body, "connection" in headers) == (200, b"OK", False)
            assert await client.closed()
