"""serve_http against slow and malformed clients, over real loopback sockets: deadlines on
Trio's virtual clock (no real waiting), bounded heads, Go's answers for framing it refuses,
and a waiting handler that learns its client has gone."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import trio
import trio.testing
from nsq_serving import (
    HttpError,
    Router,
    client_gone,
    read_body,
    v1_text,
    while_connected,
)
from starlette.requests import Request
from starlette.responses import Response

_spec = importlib.util.spec_from_file_location(  # the raw client and app of test_server.py
    "serving_wire", Path(__file__).with_name("test_server.py"))
assert _spec is not None and _spec.loader is not None
_wire = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_wire)
GET_PING, connect, make_app, running = _wire.GET_PING, _wire.connect, _wire.make_app, _wire.running

TIMEOUT = 5.0  # the request timeout the tests configure (seconds of the virtual clock)


async def test_a_head_trickled_byte_by_byte_gets_408_within_the_timeout(autojump_clock):
    async with running(make_app(), request_timeout=TIMEOUT) as address, \
            connect(address, deadline=1000) as client:
        start = trio.current_time()
        head = b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        with trio.move_on_after(100):
            for byte in head:  # one byte every 0.4 s never completes the head
                try:
                    await client.send(bytes([byte]))
                except trio.BrokenResourceError:
                    break
                await trio.sleep(0.4)
        status, headers, body = await client.answer()
        assert (status, body) == (408, b"408 Request Timeout")
        assert headers["connection"] == "close"
        assert await client.closed()
        assert trio.current_time() - start <= TIMEOUT * 1.25 + 0.4


async def test_a_body_promised_and_never_sent_gets_408_and_frees_its_handler(autojump_clock):
    async with running(make_app(), request_timeout=TIMEOUT) as address, \
            connect(address, deadline=1000) as client:
        start = trio.current_time()
        await client.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nten bytes.")
        status, _, _ = await client.answer()
        assert status == 408
        assert await client.closed()
        assert trio.current_time() - start <= TIMEOUT * 1.25


async def test_an_idle_connection_is_not_timed_by_a_trickle_of_blank_lines(autojump_clock):
    async with running(make_app(), keep_alive_timeout=TIMEOUT) as address, \
            connect(address, deadline=1000) as client:
        start = trio.current_time()
        with trio.move_on_after(100):
            while True:
                try:
                    await client.send(b"\r\n")
                except trio.BrokenResourceError:
                    break
                await trio.sleep(0.4)
        assert await client.closed()
        assert trio.current_time() - start <= TIMEOUT * 1.25 + 0.4


async def test_a_handler_s_own_work_is_not_timed(autojump_clock):
    async def slow(request: Request) -> Response:
        await request.body()
        await trio.sleep(TIMEOUT * 10)
        return v1_text("late")

    router = Router()
    router.add("POST", "/slow", slow)
    async with running(router, request_timeout=TIMEOUT) as address, \
            connect(address, deadline=1000) as client:
        await client.send(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        assert (await client.answer())[2] == b"late"


async def test_a_thousand_slow_clients_do_not_stop_a_fast_one(autojump_clock):
    async with running(make_app(), request_timeout=TIMEOUT) as address:
        slow = []
        for _ in range(1000):
            stream = await trio.open_tcp_stream(*address)
            await stream.send_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Len")
            slow.append(stream)
        async with connect(address, deadline=1000) as client:
            for _ in range(3):
                await client.send(GET_PING)
                assert (await client.answer())[2] == b"OK"
        for stream in slow:  # each is dropped with a 408 in time
            with trio.fail_after(TIMEOUT * 2):
                data = b""
                while chunk := await stream.receive_some(4096):
                    data += chunk
            assert data.startswith(b"HTTP/1.1 408 ")
            await stream.aclose()


@pytest.mark.parametrize(("request_bytes", "status", "body"), [
    (b"GET /ping HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(101))
     + b"\r\n", 431, b"431 Request Header Fields Too Large"),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, b"400 Bad Request"),
    (b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc", 501,
     b"Unsupported transfer encoding"),
    (b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, b"400 Bad Request"),
], ids=["101-headers", "two-hosts", "gzip", "two-transfer-encodings"])
async def test_heads_go_s_net_http_refuses(request_bytes, status, body):
    async with running(make_app()) as address:
        async with connect(address) as client:
            await client.send(request_bytes)
            got, headers, text = await client.answer()
            assert (got, text) == (status, body)
            assert headers["connection"] == "close"
            assert await client.closed()
        async with connect(address) as client:  # and serves on
            await client.send(GET_PING)
            assert (await client.answer())[2] == b"OK"


async def test_a_hundred_headers_are_taken():
    async with running(make_app()) as address, connect(address) as client:
        await client.send(b"GET /ping HTTP/1.1\r\nHost: x\r\n"
                          + b"".join(b"X-%d: a\r\n" % i for i in range(99)) + b"\r\n")
        assert (await client.answer())[2] == b"OK"


async def test_connection_is_read_as_a_token_list():
    async def closing(request: Request) -> Response:
        return Response(b"bye", headers={"Connection": "keep-alive, Close"})

    router = Router()
    router.add("GET", "/closing", closing)
    async with running(router) as address:
        async with connect(address) as client:
            await client.send(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\n\r\n")
            assert (await client.answer())[0] == 404
            assert await client.closed()
        async with connect(address) as client:
            await client.send(b"GET /closing HTTP/1.1\r\nHost: x\r\n\r\n" + GET_PING)
            assert (await client.answer())[2] == b"bye"
            assert await client.closed()


@pytest.mark.parametrize(("target", "status"), [
    (b"CONNECT example.com:443", 404), (b"CONNECT /ping", 405), (b"OPTIONS *", 200),
    (b"PROPFIND /ping", 405), (b"GET http://x/ping?a=1", 200),
])
async def test_request_targets_and_methods_are_routed_as_go_s_nsqd(target, status):
    async def ping(request: Request) -> Response:
        return v1_text("OK")

    router = Router()
    router.add("GET", "/ping", ping)
    async with running(router) as address, connect(address) as client:
        await client.send(target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await client.answer())[0] == status


def _reader(limit: int = 100) -> Router:
    async def echo(request: Request) -> Response:
        body = await read_body(request, limit, too_large=HttpError(413, "TOO_BIG"),
                               unreadable=HttpError(400, "UNREADABLE"))
        return v1_text(body)

    router = Router(error_log=lambda line, exc: pytest.fail(f"a bug was logged: {line}"))
    router.add("POST", "/echo", echo)
    return router


@pytest.mark.parametrize("chunks", [b"zz\r\nabc\r\n0\r\n\r\n", b"-5\r\nabc\r\n0\r\n\r\n",
                                    b"ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"],
                         ids=["zz", "negative", "huge"])
async def test_a_malformed_chunked_body_is_the_app_s_unreadable_answer(chunks, caplog):
    async with running(_reader()) as address, connect(address) as client:
        await client.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                          + chunks)
        status, headers, body = await client.answer()
        assert (status, body) == (400, b'{"message":"UNREADABLE"}')
        assert headers["connection"] == "close"
        assert await client.closed()
    assert "Traceback" not in caplog.text


async def test_a_body_cut_short_by_the_client_is_unreadable():
    async with running(_reader()) as address, connect(address) as client:
        await client.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nten bytes.")
        await client.stream.send_eof()  # gone mid-body (the answer can still be read)
        status, _, body = await client.answer()
        assert (status, body) == (400, b'{"message":"UNREADABLE"}')


async def test_expect_continue_with_a_body_over_the_limit_is_refused_early():
    async with running(_reader()) as address, connect(address) as client:
        await client.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n"
                          b"Expect: 100-continue\r\n\r\n")
        status, _, body = await client.answer()
        assert (status, body) == (413, b'{"message":"TOO_BIG"}')


def _waiter(taken: list[int], offered: trio.Event) -> Router:
    """/wait: waits for ``offered``, then takes one thing for its client unless it is gone."""

    async def wait(request: Request) -> Response:
        await request.body()
        async with while_connected(request):
            await offered.wait()
            if not client_gone(request):
                taken.append(1)
                return v1_text("taken")
        return v1_text("nothing")

    router = Router()
    router.add("POST", "/wait", wait)
    return router


async def test_a_waiting_handler_learns_that_its_client_has_gone():
    taken: list[int] = []
    offered = trio.Event()
    async with running(_waiter(taken, offered)) as address:
        abandoned = []
        for _ in range(100):
            stream = await trio.open_tcp_stream(*address)
            await stream.send_all(b"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            abandoned.append(stream)
        async with connect(address) as client:
            await client.send(b"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            await trio.testing.wait_all_tasks_blocked()
            for stream in abandoned:
                await stream.aclose()
            await trio.testing.wait_all_tasks_blocked()
            offered.set()
            assert (await client.answer())[2] == b"taken"
    assert taken == [1]  # the client that stayed; none for the hundred gone


async def test_pipelined_requests_behind_a_waiting_one_are_kept():
    taken: list[int] = []
    offered = trio.Event()
    async with running(_waiter(taken, offered)) as address, connect(address) as client:
        await client.send(b"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                          + GET_PING)
        await trio.testing.wait_all_tasks_blocked()
        offered.set()
        assert (await client.answer())[2] == b"taken"
        assert (await client.answer())[0] == 404  # /ping is not a route of this router
