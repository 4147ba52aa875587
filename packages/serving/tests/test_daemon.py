"""What the daemons' commands share: the version line, a bad option's exit, serving until a
signal, the exit when serving cannot start, and one app served on one address."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from functools import partial
from typing import Any

import pytest
import trio
from nsq_common import NSQ_VERSION
from nsq_serving import (
    ConnectionCounts,
    exit_on,
    run_daemon,
    serve_app,
    serve_until_signalled,
    version_string,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

DEADLINE = 30


def test_version_string() -> None:
    assert version_string("nsqd").startswith(f"nsqd v{NSQ_VERSION} (built w/python3.")


def test_exit_on_writes_the_fatal_line_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited, exit_on(ValueError, KeyError, prefix="[d] ",
                                                      context="failed to instantiate d - "):
        raise ValueError("--port is bad")
    assert exited.value.code == 1
    assert capsys.readouterr().err == "[d] FATAL: failed to instantiate d - --port is bad\n"
    with pytest.raises(TypeError), exit_on(ValueError, prefix="[d] "):
        raise TypeError("not one of the errors: passed on")


def _signalling(events: list[str], first: signal.Signals) -> Any:
    """A ``serve`` that sends its own process ``first`` once started, and notes its end."""

    async def serve(name: str, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        events.append(f"serving {name}")
        try:
            os.kill(os.getpid(), first)
            await trio.sleep_forever()
        finally:
            events.append("cancelled")

    return serve


async def test_sighup_calls_on_hangup_and_sigterm_ends_serving() -> None:
    events: list[str] = []

    def hangup() -> None:
        events.append("hangup")
        os.kill(os.getpid(), signal.SIGTERM)

    with trio.fail_after(DEADLINE):
        await serve_until_signalled(_signalling(events, signal.SIGHUP), "x", on_hangup=hangup)
    assert events == ["serving x", "hangup", "cancelled"]


async def test_without_on_hangup_sigint_ends_serving() -> None:
    events: list[str] = []
    with trio.fail_after(DEADLINE):
        await serve_until_signalled(_signalling(events, signal.SIGINT), "x")
    assert events == ["serving x", "cancelled"]


def test_run_daemon_logs_exiting(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "d")
    run_daemon("d", logging.getLogger("d"), _signalling([], signal.SIGTERM), "x")
    assert caplog.messages == ["exiting"]


def test_run_daemon_exits_1_when_serving_cannot_start(caplog: pytest.LogCaptureFixture) -> None:
    async def serve(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        raise OSError("listen (127.0.0.1:1) failed - taken")

    with pytest.raises(SystemExit) as exited:
        run_daemon("d", logging.getLogger("d"), serve)
    assert exited.value.code == 1
    assert caplog.messages == ["failed to instantiate d - listen (127.0.0.1:1) failed - taken"]


async def test_serve_app_logs_the_bound_address_and_counts_connections(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "d")
    given: list[ConnectionCounts] = []

    async def ping(request: Request) -> Response:
        return PlainTextResponse(f"{given[0].open} open")

    def app_for(counts: ConnectionCounts) -> Starlette:
        given.append(counts)
        return Starlette(routes=[Route("/ping", ping, methods=["GET"])])

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(partial(serve_app, app_for, "127.0.0.1:0", backlog=8,
                                                  log=logging.getLogger("d")))
            assert caplog.messages == [f"HTTP: listening on {address}"]
            host, port = address.rsplit(":", 1)
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(b"GET /ping HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := await stream.receive_some():
                reply += chunk
            await stream.aclose()
            assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"\r\n\r\n1 open")
            assert given[0].accepted == 1
            nursery.cancel_scope.cancel()


def test_flag_parsing_loads_neither_trio_nor_prometheus() -> None:
    code = ("import sys, nsq_serving; nsq_serving.version_string; nsq_serving.exit_on; "
            "nsq_serving.metrics_endpoint; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'trio', 'prometheus_client'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
