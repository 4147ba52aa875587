"""nsq_to_http on real processes, against HTTP servers started here: POST and GET, round-robin
and fan-out, headers, and a failing endpoint whose messages are retried."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from nsq_testing import DEADLINE, Daemon

from ._tools import run_tool_until


class Recorder(ThreadingHTTPServer):
    """Records every request; answers ``fail_first`` of them with 500."""

    daemon_threads = True
    request_queue_size = 256  # nsq_to_http opens up to --n connections at once

    def __init__(self, fail_first: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.fail_first = fail_first
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def _record(self, body: bytes) -> None:
        with self.server.lock:
            failing = self.server.fail_first > 0
            self.server.fail_first -= 1
            if not failing:
                self.server.requests.append((self.command, self.path, dict(self.headers), body))
        self.send_response(500 if failing else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self._record(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def do_GET(self) -> None:
        self._record(b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[Callable[..., Recorder]]:
    started: list[Recorder] = []

    def factory(fail_first: int = 0) -> Recorder:
        server = Recorder(fail_first)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield factory
    for server in started:
        server.shutdown()
        server.server_close()


def publish(nsqd: Daemon, topic: str, bodies: list[bytes]) -> None:
    httpx.post(f"http://{nsqd.http_address}/mpub", params={"topic": topic},
               content=b"\n".join(bodies), timeout=DEADLINE).raise_for_status()


def run_until(log: Path, args: list[str], done: Callable[[], bool]) -> bytes:
    return run_tool_until("nsq_to_http", log, args, done)


def test_post_round_robin_with_headers(run_daemon: Callable[..., Daemon], servers: Callable[..., Recorder],
                                       tmp_path: Path) -> None:
    nsqd = run_daemon("nsqd")
    a, b = servers(), servers()
    bodies = [b"payload %d" % i for i in range(40)]
    publish(nsqd, "hooks", bodies)
    run_until(tmp_path / "log", ["--topic=hooks", f"--nsqd-tcp-address={nsqd.tcp_address}",
                                 f"--post={a.url}/in", f"--post={b.url}/in", "--mode=round-robin",
                                 "--content-type=application/json", "--header=X-Token: s3cret"],
              lambda: len(a.requests) + len(b.requests) >= 40)
    assert len(a.requests) == len(b.requests) == 20
    got = sorted(r[3] for r in a.requests + b.requests)
    assert got == sorted(bodies)
    method, path, headers, _ = a.requests[0]
    assert (method, path) == ("POST", "/in")
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Token"] == "s3cret"
    assert headers["User-Agent"] == "nsq_to_http v1.3.0"


def test_get_fans_out_to_every_address(run_daemon: Callable[..., Daemon],
                                       servers: Callable[..., Recorder], tmp_path: Path) -> None:
    nsqd = run_daemon("nsqd")
    a, b = servers(), servers()
    publish(nsqd, "pings", [b"hello world", b"a&b=c"])
    run_until(tmp_path / "log", ["--topic=pings", f"--nsqd-tcp-address={nsqd.tcp_address}",
                                 f"--get={a.url}/hit?data=%s", f"--get={b.url}/hit?data=%s",
                                 "--mode=all"],
              lambda: len(a.requests) >= 2 and len(b.requests) >= 2)
    for server in (a, b):
        values = sorted(parse_qs(urlsplit(r[1]).query)["data"][0] for r in server.requests)
        assert values == ["a&b=c", "hello world"]
        assert all(r[0] == "GET" for r in server.requests)


def test_a_failing_endpoint_gets_the_message_again(run_daemon: Callable[..., Daemon],
                                                   servers: Callable[..., Recorder],
                                                   tmp_path: Path) -> None:
    nsqd = run_daemon("nsqd")
    flaky = servers(fail_first=2)
    publish(nsqd, "retry", [b"important"])
    log = run_until(tmp_path / "log", [
        "--topic=retry", f"--nsqd-tcp-address={nsqd.tcp_address}", f"--post={flaky.url}/",
        "--consumer-opt=default_requeue_delay,10ms", "--consumer-opt=backoff_multiplier,10ms"],
        lambda: len(flaky.requests) >= 1)
    assert [r[3] for r in flaky.requests] == [b"important"]
    assert b"got status code 500" in log
    stats = httpx.get(f"http://{nsqd.http_address}/stats",
                      params={"format": "json", "topic": "retry"}).json()
    channel = stats["topics"][0]["channels"][0]
    assert channel["requeue_count"] == 2 and channel["depth"] == 0


def test_flag_checks() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "nsq_client.tools.nsq_to_http", *args],
                              capture_output=True, timeout=30, check=False)

    result = run("--topic=t", "--nsqd-tcp-address=127.0.0.1:1")
    assert result.returncode == 1 and b"--get or --post required" in result.stderr
    result = run("--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--get=http://x/")
    assert result.returncode == 1 and b"invalid GET address - must be a printf string" in result.stderr
    result = run("--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--get=http://x/%s",
                 "--content-type=text/plain")
    assert result.returncode == 1 and b"--content-type only used with --post" in result.stderr
    result = run("--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--post=http://x/", "--header=bad")
    assert result.returncode == 1 and b"--header value format should be 'key=value'" in result.stderr
