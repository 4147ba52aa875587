"""The real ``nsqlookupd`` process: command lines, signals, timeouts, restarts.

Nothing here measures time: a test waits for what it expects to see, for up to ``WAIT``
seconds (a busy machine is slow; a quiet one never waits that long). Where a lifetime must run
out in the process (``--inactive-producer-timeout``, ``--tombstone-lifetime``), what is seen
before it runs out is asked again until seen, as a busy machine may take longer than the
lifetime between two requests; ``test_tcp.py`` checks the same lifetimes exactly, in process,
on a clock the test moves.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from nsq_testing import Daemon, free_port, start_daemon

EXE = str(Path(sys.executable).with_name("nsqlookupd"))
RunDaemon = Callable[..., Daemon]
WAIT = 30.0  # seconds: the most any one step may take on a slow, busy machine


class Nsqd:
    """A fake nsqd: a blocking V1 connection to the daemon."""

    def __init__(self, daemon: Daemon, broadcast: str = "nsqd.local", http_port: int = 4151):
        self.sock = socket.create_connection(("127.0.0.1", daemon.tcp_port), timeout=WAIT)
        body = json.dumps({"broadcast_address": broadcast, "hostname": "h", "http_port": http_port,
                           "tcp_port": 4150, "version": "1.3.0"}).encode()
        try:
            self.sock.sendall(b"  V1IDENTIFY\n" + struct.pack(">i", len(body)) + body)
            self.info = json.loads(self.response())
        except BaseException:
            self.sock.close()
            raise

    def response(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def command(self, line: str) -> bytes:
        self.sock.sendall(line.encode() + b"\n")
        return self.response()

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=WAIT) as client:
        yield client


@pytest.fixture
def connect() -> Iterator[Callable[..., Nsqd]]:
    """``connect(daemon, broadcast, http_port)`` -> a fake nsqd, closed at the end (if the test
    has not closed it already), also when the test fails."""
    opened: list[Nsqd] = []

    def factory(*args: object) -> Nsqd:
        nsqd = Nsqd(*args)  # type: ignore[arg-type]
        opened.append(nsqd)
        return nsqd

    yield factory
    for nsqd in opened:
        nsqd.close()


@pytest.fixture
def lookupd(run_daemon: RunDaemon) -> Daemon:
    """An nsqlookupd with its default flags (on kernel-chosen ports)."""
    return run_daemon("nsqlookupd")


def url(daemon: Daemon, path: str) -> str:
    return f"http://{daemon.http_address}{path}"


def producers(http: httpx.Client, daemon: Daemon, topic: str) -> list[str]:
    data = http.get(url(daemon, f"/lookup?topic={topic}")).json()
    return [p["broadcast_address"] for p in data["producers"]]


def wait_for(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"condition not met in {timeout} s"
        time.sleep(0.02)


def test_version() -> None:
    done = subprocess.run([EXE, "--version"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert done.stdout.startswith("nsqlookupd v1.3.0 (built w/python3.")
    assert done.stdout.endswith(")\n")


def test_bad_flag_exits_2_with_usage() -> None:
    done = subprocess.run([EXE, "--nope"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.startswith("flag provided but not defined: -nope\nUsage of nsqlookupd:\n")


def test_port_in_use_is_fatal() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([EXE, f"--tcp-address=127.0.0.1:{port}",
                               "--http-address=127.0.0.1:0"],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert f"FATAL: failed to instantiate nsqlookupd - listen (127.0.0.1:{port}) failed" in (
        done.stderr)


def test_single_dash_forms_and_ping_once_listening(http: httpx.Client,
                                                   connect: Callable[..., Nsqd]) -> None:
    daemon = start_daemon("nsqlookupd", ["-tcp-address", "127.0.0.1:0",
                                         "-http-address=127.0.0.1:0", "-broadcast-address", "lk"])
    try:
        # The first request, as soon as both listening lines are out, is answered: no retry.
        assert http.get(url(daemon, "/ping")).text == "OK"
        assert daemon.tcp_address.startswith("127.0.0.1:") and daemon.tcp_port != 0
        assert daemon.http_address.startswith("127.0.0.1:") and daemon.http_port != 0
        log = daemon.output()
        assert f"INFO: TCP: listening on {daemon.tcp_address}" in log
        assert f"INFO: HTTP: listening on {daemon.http_address}" in log
        assert log.startswith("[nsqlookupd] ")
        nsqd = connect(daemon)
        assert nsqd.info == {"broadcast_address": "lk", "hostname": socket.gethostname(),
                             "http_port": daemon.http_port, "tcp_port": daemon.tcp_port,
                             "version": "1.3.0"}
        nsqd.close()
    finally:
        assert daemon.stop(signal.SIGINT) == 0
    assert "INFO: TCP: closing" in daemon.output()


def test_double_dash_forms_and_sigterm(run_daemon: RunDaemon, http: httpx.Client) -> None:
    daemon = run_daemon("nsqlookupd", "--tcp-address", "127.0.0.1:0",
                        "--http-address=127.0.0.1:0", "--log-prefix", "[lk] ", "--verbose")
    assert http.get(url(daemon, "/info")).json() == {"version": "1.3.0"}
    assert daemon.output().startswith("[lk] ")
    assert daemon.stop(signal.SIGTERM) == 0


def test_inactive_producer_is_hidden(run_daemon: RunDaemon, http: httpx.Client,
                                     connect: Callable[..., Nsqd]) -> None:
    daemon = run_daemon("nsqlookupd", "--inactive-producer-timeout=400ms")
    nsqd = connect(daemon)

    def shown_after_ping() -> bool:
        # Seen unless more than 400 ms pass between the PING and the lookup: asked again then.
        assert nsqd.command("PING") == b"OK"
        return producers(http, daemon, "t") == ["nsqd.local"]

    assert nsqd.command("REGISTER t c") == b"OK"
    wait_for(shown_after_ping)
    wait_for(lambda: producers(http, daemon, "t") == [])
    assert http.get(url(daemon, "/nodes")).json() == {"producers": []}
    # still registered, just inactive: the topic and channel stay listed
    assert http.get(url(daemon, "/lookup?topic=t")).json()["channels"] == ["c"]
    wait_for(shown_after_ping)


def test_tombstone_hides_for_its_lifetime(run_daemon: RunDaemon, http: httpx.Client,
                                          connect: Callable[..., Nsqd]) -> None:
    daemon = run_daemon("nsqlookupd", "--tombstone-lifetime=600ms")
    a, b = connect(daemon, "nsqd-a", 4151), connect(daemon, "nsqd-b", 4152)
    for nsqd in (a, b):
        assert nsqd.command("REGISTER t") == b"OK"
        assert nsqd.command("REGISTER u") == b"OK"
    tombstone = url(daemon, "/topic/tombstone?topic=t&node=nsqd-a:4151")
    response = http.post(tombstone)
    assert response.status_code == 200 and response.content == b""

    def hidden_while_tombstoned() -> bool:
        # Seen unless the 600 ms lifetime runs out before the last request: tombstoned again
        # and asked again then.
        shown = producers(http, daemon, "t") == ["nsqd-b"]
        assert sorted(producers(http, daemon, "u")) == ["nsqd-a", "nsqd-b"]
        nodes = {n["broadcast_address"]: n
                 for n in http.get(url(daemon, "/nodes")).json()["producers"]}
        flags = dict(zip(nodes["nsqd-a"]["topics"], nodes["nsqd-a"]["tombstones"], strict=True))
        if shown and flags == {"t": True, "u": False}:
            return True
        assert http.post(tombstone).status_code == 200
        return False

    wait_for(hidden_while_tombstoned)
    wait_for(lambda: sorted(producers(http, daemon, "t")) == ["nsqd-a", "nsqd-b"])
    a.close()
    b.close()


def test_topic_delete(lookupd: Daemon, http: httpx.Client, connect: Callable[..., Nsqd]) -> None:
    nsqd = connect(lookupd)
    assert nsqd.command("REGISTER live c") == b"OK"
    assert http.post(url(lookupd, "/topic/create?topic=made")).status_code == 200
    assert sorted(http.get(url(lookupd, "/topics")).json()["topics"]) == ["live", "made"]
    for topic in ("live", "made"):
        assert http.post(url(lookupd, f"/topic/delete?topic={topic}")).status_code == 200
    assert http.get(url(lookupd, "/topics")).json() == {"topics": []}
    assert http.get(url(lookupd, "/lookup?topic=live")).status_code == 404
    nsqd.close()


def test_restart_on_same_ports_after_sigkill(http: httpx.Client,
                                             connect: Callable[..., Nsqd]) -> None:
    tcp, web = free_port(), free_port()
    args = [f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{web}"]
    first = start_daemon("nsqlookupd", args)
    try:
        nsqd = connect(first)  # an open connection leaves the port in TIME_WAIT after the kill
        assert http.get(url(first, "/ping")).text == "OK"
        first.kill()
        nsqd.close()
        second = start_daemon("nsqlookupd", args)
        try:
            assert (second.tcp_port, second.http_port) == (tcp, web)
            assert http.get(url(second, "/ping")).text == "OK"
            connect(second).close()
        finally:
            assert second.stop() == 0
    finally:
        first.stop()


def test_garbage_peers_leave_the_process_serving(lookupd: Daemon, http: httpx.Client,
                                                 connect: Callable[..., Nsqd]) -> None:
    good = connect(lookupd)
    assert good.command("REGISTER kept") == b"OK"
    for blob in (b"\x00" * 64, b"  V2", b"  V1IDENTIFY\n\xff\xff\xff\xff", b"  V1HELLO\n",
                 b"  V1IDENTIFY\n\x00\x00\x00\x02[]", b"  V1" + b"x" * 70000):
        with socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=WAIT) as bad:
            try:
                bad.sendall(blob)
                bad.shutdown(socket.SHUT_WR)
                while bad.recv(65536):
                    pass
            except ConnectionResetError:
                pass
    assert good.command("PING") == b"OK"
    assert producers(http, lookupd, "kept") == ["nsqd.local"]
    assert lookupd.process.poll() is None
    assert "Traceback" not in lookupd.output()
    good.close()
