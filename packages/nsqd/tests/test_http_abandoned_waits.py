"""A long-poll whose client gives up takes nothing: nsqd's ``POST /channel/consume?wait=`` and
lmstfy's ``GET /api/<ns>/<queue>?timeout=``, served by ``serve_http`` on a real listener,
with a thousand clients that send their wait and go away before anything is published.

Half of them are seen to go before the publish (the wait ends with the client); the other half
close just before it, so that the message arrives while the server has not yet read their end
of the connection (the handler asks the socket once more before taking). Either way every
message stays ready: none in flight for nobody, none dead-lettered after its single attempt.
One client that stays gets its message, so the wait itself works."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing
from nsq_serving import serve_http
from nsqd.broker import Broker
from nsqd.http_api import build_app
from nsqd.lmstfy.api import build_data_app
from nsqd.lmstfy.queues import JobQueues
from nsqd.lmstfy.state import State
from nsqd.lmstfy.throttle import Throttle
from nsqd.options import Options

WAIT = 30.0  # the most any one step may take on a busy machine
ABANDONED = 500  # per phase; two phases: a thousand abandoned waits


@pytest.fixture
async def broker(nursery: trio.Nursery, tmp_path: Path) -> Broker:
    broker = Broker(Options.defaults(data_path=str(tmp_path)))
    await nursery.start(broker.run)
    return broker


async def serving(nursery: trio.Nursery, app: object) -> tuple[str, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    sock.setblocking(False)
    await nursery.start(lambda task_status: serve_http(app, [sock], task_status=task_status))
    address = sock.getsockname()
    return address[0], address[1]


async def ask(address: tuple[str, int], request: bytes) -> tuple[int, bytes]:
    """One request on its own connection (``Connection: close``): status and body."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(request)
        data = b""
        with trio.fail_after(WAIT):
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


@pytest.fixture
async def opened() -> AsyncIterator[list[trio.SocketStream]]:
    streams: list[trio.SocketStream] = []
    yield streams
    for stream in streams:
        await stream.aclose()


async def abandon(address: tuple[str, int], request: bytes, count: int,
                  opened: list[trio.SocketStream], *, seen: bool) -> None:
    """``count`` clients send ``request`` (a wait) and close; with ``seen``, the server is
    let run until it has read their end before this returns."""
    streams = []
    for _ in range(count):
        stream = await trio.open_tcp_stream(*address)
        opened.append(stream)
        await stream.send_all(request)
        streams.append(stream)
    await trio.testing.wait_all_tasks_blocked()  # every wait has begun
    for stream in streams:
        await stream.aclose()
    if seen:
        await trio.testing.wait_all_tasks_blocked()


async def test_nsqd_consume_of_a_gone_client_takes_nothing(nursery, broker, opened):
    address = await serving(nursery, build_app(broker))
    assert (await ask(address, b"POST /topic/create?topic=t HTTP/1.1\r\nHost: x\r\n"
                               b"Connection: close\r\n\r\n"))[0] == 200
    for seen, channel in ((True, b"c1"), (False, b"c2")):  # a channel each: nothing ready
        assert (await ask(address, b"POST /channel/create?topic=t&channel=%s&max_attempts=1 "
                                   b"HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                   % channel))[0] == 200
        consume = (b"POST /channel/consume?topic=t&channel=%s&wait=600 HTTP/1.1\r\nHost: x\r\n"
                   b"Content-Length: 0\r\n\r\n" % channel)
        await abandon(address, consume, ABANDONED, opened, seen=seen)
        for _ in range(5):
            status, _ = await ask(address, b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\n"
                                           b"Content-Length: 3\r\nConnection: close\r\n\r\nmsg")
            assert status == 200
        await trio.testing.wait_all_tasks_blocked()
        _, body = await ask(address, b"GET /stats?format=json&topic=t&channel=%s HTTP/1.1\r\n"
                                     b"Host: x\r\nConnection: close\r\n\r\n" % channel)
        stats = json.loads(body)["topics"][0]["channels"][0]
        assert (stats["in_flight_count"], stats["depth"]) == (0, 5)
        assert stats.get("dead_letter_count", 0) == 0
        status, body = await ask(address, consume.replace(b"\r\n\r\n",
                                                          b"\r\nConnection: close\r\n\r\n"))
        assert status == 200 and json.loads(body)["messages"][0]["text"] == "msg"


async def test_lmstfy_consume_of_a_gone_client_takes_nothing(nursery, broker, tmp_path, opened):
    state = State(str(tmp_path))
    state.tokens["ns"] = {"tok": "test"}
    queues = JobQueues(broker, state)
    address = await serving(nursery, build_data_app(queues, state,
                                                    Throttle(state.limits, broker.now)))
    for seen, queue in ((True, b"q1"), (False, b"q2")):  # a queue each: nothing ready
        consume = b"GET /api/ns/%s?token=tok&timeout=600 HTTP/1.1\r\nHost: x\r\n\r\n" % queue
        await abandon(address, consume, ABANDONED, opened, seen=seen)
        for _ in range(5):
            status, _ = await ask(address, b"PUT /api/ns/%s?token=tok&tries=1 HTTP/1.1\r\n"
                                           b"Host: x\r\nContent-Length: 3\r\n"
                                           b"Connection: close\r\n\r\njob" % queue)
            assert status == 201
        await trio.testing.wait_all_tasks_blocked()
        _, body = await ask(address, b"GET /api/ns/%s/size?token=tok HTTP/1.1\r\nHost: x\r\n"
                                     b"Connection: close\r\n\r\n" % queue)
        assert json.loads(body)["size"] == 5
        _, body = await ask(address, b"GET /api/ns/%s/deadletter/size?token=tok HTTP/1.1\r\n"
                                     b"Host: x\r\nConnection: close\r\n\r\n" % queue)
        assert json.loads(body)["size"] == 0
        status, body = await ask(address, consume.replace(b"\r\n\r\n",
                                                          b"\r\nConnection: close\r\n\r\n"))
        assert status == 200 and json.loads(body)["data"] == "am9i"  # "job"
