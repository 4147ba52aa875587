"""The early start (``nsq_serving.early``): ``/ping`` answered "not yet" from a thread on a
socket bound before the server runs, byte for byte as the real server answers it while not
healthy, never OK; and every other request (and whatever follows an early ``/ping``) served
by the real server once it takes over.

The real server here is ``serve_http`` with a ``Router`` whose ``/ping`` is nsqd's
(``plain_text(health)``, 500 unless the health is ``OK``), in this process; the early thread
runs beside Trio.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest
import trio
from nsq_serving import NSQ, Router, early, listen_tcp, plain_text, serve_http, v1_text
from nsq_serving._early import parse_ping
from starlette.requests import Request
from starlette.responses import Response

DATE = re.compile(rb"date: [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT\r\n")


def app(health: str = "OK") -> Router:
    async def ping(request: Request) -> Response:
        return plain_text(health, 200 if health == "OK" else 500)

    async def info(request: Request) -> Response:
        return v1_text("real")

    router = Router(NSQ)
    router.add("GET", "/ping", ping)
    router.add("GET", "/info", info)
    return router


@pytest.fixture
def address() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield f"127.0.0.1:{port}"
    early.abandon()  # whatever a failed test left


def exchange(address: str, request: bytes) -> bytes:
    """Send ``request``, read until the server closes (blocking: the early thread answers)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def undated(answer: bytes) -> bytes:
    assert DATE.search(answer), answer
    return DATE.sub(b"date: -\r\n", answer)


PING_CLOSE = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
PING_10 = b"GET /ping HTTP/1.0\r\n\r\n"


async def serve_real(address: str, nursery: trio.Nursery, health: str = "OK") -> None:
    sock = listen_tcp(address)  # the early start's socket
    await nursery.start(serve_http, app(health), [sock])


async def test_early_ping_is_the_real_servers_not_healthy_answer_byte_for_byte(
        address: str) -> None:
    assert early.start(address, [])
    early_answers = [await trio.to_thread.run_sync(exchange, address, request)
                     for request in (PING_CLOSE, PING_10)]
    async with trio.open_nursery() as nursery:
        await serve_real(address, nursery, health="NOK - starting")
        real_answers = [await trio.to_thread.run_sync(exchange, address, request)
                        for request in (PING_CLOSE, PING_10)]
        nursery.cancel_scope.cancel()
    assert [undated(a) for a in early_answers] == [undated(a) for a in real_answers]
    assert early_answers[0].startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert early_answers[0].endswith(b"\r\n\r\nNOK - starting")


async def test_other_requests_wait_for_the_real_server(address: str) -> None:
    assert early.start(address, [])
    host, port = address.rsplit(":", 1)
    # sent while only the early thread runs: /info, and a kept-alive /ping then /info
    info = socket.create_connection((host, int(port)), timeout=30)
    info.sendall(b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    both = socket.create_connection((host, int(port)), timeout=30)
    both.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    responder = next(iter(early._state.responders.values()))
    try:
        async with trio.open_nursery() as nursery:
            while not responder.answered:  # the early thread has answered that /ping
                await trio.sleep(0.001)
            await serve_real(address, nursery)

            def read_all(sock: socket.socket) -> bytes:
                chunks = []
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
                return b"".join(chunks)

            info_answer = await trio.to_thread.run_sync(read_all, info)
            both_answer = await trio.to_thread.run_sync(read_all, both)
            nursery.cancel_scope.cancel()
    finally:
        info.close()
        both.close()
    assert info_answer.endswith(b"\r\n\r\nreal") and b" 200 OK" in info_answer
    # the /ping answered early says "not yet"; the /info after it is the real server's
    ping, _, info_after = both_answer.partition(b"NOK - startingHTTP/1.1")
    assert ping.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert info_after.startswith(b" 200 OK\r\n") and info_after.endswith(b"\r\n\r\nreal")


async def test_ping_is_ok_only_once_the_real_server_serves(address: str) -> None:
    """A kept-alive client asking again and again: "not yet" from the early thread, then OK
    from the real server, on the same connection, never OK before."""
    assert early.start(address, [])
    host, port = address.rsplit(":", 1)
    client = socket.create_connection((host, int(port)), timeout=30)
    ping = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        client.sendall(ping)
        first = await trio.to_thread.run_sync(lambda: client.recv(65536))
        async with trio.open_nursery() as nursery:
            await serve_real(address, nursery)
            client.sendall(ping)
            second = await trio.to_thread.run_sync(lambda: client.recv(65536))
            nursery.cancel_scope.cancel()
    finally:
        client.close()
    assert first.startswith(b"HTTP/1.1 500 ") and first.endswith(b"\r\n\r\nNOK - starting")
    assert second.startswith(b"HTTP/1.1 200 OK\r\n") and second.endswith(b"\r\n\r\nOK")


def test_a_taken_address_abandons_the_early_start(address: str) -> None:
    host, port = address.rsplit(":", 1)
    with socket.socket() as taken:
        taken.bind((host, int(port)))
        taken.listen()
        free = "127.0.0.1:0"
        assert not early.start(address, [free])
        assert early.take_listener(free) is None  # nothing left bound


def test_the_same_address_twice_is_taken_back_in_the_order_it_was_bound() -> None:
    # as a test gives nsqd --tcp-address=127.0.0.1:0 and --http-address=127.0.0.1:0: the TCP
    # socket is bound first and taken first, the HTTP one (answering /ping) second
    same = "127.0.0.1:0"
    bound = early.start(same, [same])
    assert bound is not None and len(bound) == 2
    try:
        tcp, http = listen_tcp(same), listen_tcp(same)
        assert (tcp, http) == (bound[0], bound[1])
        assert list(early._state.responders) == [http.fileno()]
        assert early.take_connections(http) == []  # the /ping thread was http's, and stops
        assert early.take_listener(same) is None
    finally:
        for sock in bound:
            sock.close()


@pytest.mark.parametrize(("head", "expected"), [
    (b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", (True, True)),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", (False, True)),
    (b"GET /ping HTTP/1.0\r\n\r\n", (False, False)),
    (b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", (False, False)),
    (b"GET /ping HTTP/1.1\r\n\r\n", None),  # no Host: the real server's 400
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", None),
    (b"GET /ping?x=1 HTTP/1.1\r\nHost: x\r\n\r\n", None),
    (b"HEAD /ping HTTP/1.1\r\nHost: x\r\n\r\n", None),
    (b"GET /pingx HTTP/1.1\r\nHost: x\r\n\r\n", None),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n", None),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", None),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", None),
    (b"GET /ping HTTP/2.0\r\nHost: x\r\n\r\n", None),
    (b"GET /ping HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", None),
])
def test_what_counts_as_a_ping(head: bytes, expected: tuple[bool, bool] | None) -> None:
    assert parse_ping(head, b"/ping") == expected
