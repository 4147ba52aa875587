"""What the first ``/ping`` OK promises: the daemon serves every listener it was given.

pynsq's own ``tests/test_writer.py::WriterIntegrationTest::test_writer_await_pub`` starts a
fresh nsqd, waits for ``/ping`` to answer OK (as its ``IntegrationBase.wait_ping`` does: tornado's
``HTTPClient``, again after 0.1 s while it fails), makes a ``Writer`` and publishes 0.1 s later:
a Writer whose connection is not up by then fails with ``SendError: no open connections``.
Kubernetes readiness probes and compose health checks read ``/ping`` the same way. Here that
pattern runs against 20 fresh nsqds in a row, pynsq in a child process (it runs on tornado)
that waits for each nsqd itself, from the moment it is launched.

Then the same promise for nsqlookupd (``/ping`` OK: a producer's ``REGISTER`` over TCP and
``/lookup`` are served) and nsqadmin (its pages are served).
"""

from __future__ import annotations

import json
import queue
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import urllib.request
from pathlib import Path

import pytest
from nsq_testing import DEADLINE, free_port, wait_until

BIN = Path(sys.executable).parent
STARTS = 20

#: pynsq's pattern, one nsqd per line read: "<tcp address> <http port> <topic>" in, the
#: outcome out as one JSON line.
PYNSQ = textwrap.dedent("""
    import asyncio, json, sys, time
    import nsq, tornado.httpclient

    DEADLINE = float(sys.argv[1])
    IDENTIFY = {"user_agent": "sup", "heartbeat_interval": 10, "output_buffer_size": 4096,
                "output_buffer_timeout": 50}  # WriterIntegrationTest.identify_options

    def wait_ping(endpoint):  # pynsq's IntegrationBase.wait_ping, with our deadline
        start = time.time()
        http = tornado.httpclient.HTTPClient()
        try:
            while True:
                try:
                    if http.fetch(endpoint).body == b"OK":
                        return
                except Exception:
                    if time.time() - start > DEADLINE:
                        raise
                    time.sleep(0.1)
        finally:
            http.close()

    async def await_pub(tcp, topic):  # test_writer_await_pub
        w = nsq.Writer(nsqd_tcp_addresses=[tcp], reconnect_interval=600, **IDENTIFY)
        await asyncio.sleep(0.1)
        await w.pub(topic, b'{"one": 1}')
        await w.pub(topic, b'{"two": 2}')
        for conn in list(w.conns.values()):
            conn.close()
        return "OK"

    print("ready", flush=True)
    for line in sys.stdin:
        tcp, http_port, topic = line.split()
        try:
            wait_ping(f"http://127.0.0.1:{http_port}/ping")
            result = asyncio.run(await_pub(tcp, topic))
        except Exception as exc:
            result = f"{type(exc).__name__}: {exc}"
        print(json.dumps(result), flush=True)
""")


class LineReader:
    """A child's stdout, one line at a time, each within a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout

        def pump() -> None:
            for line in stdout:
                self.lines.put(line)
            self.lines.put("")

        threading.Thread(target=pump, daemon=True).start()

    def next(self) -> str:
        return self.lines.get(timeout=DEADLINE * 2)


def test_pynsq_writer_publishes_right_after_the_first_ping_ok(tmp_path):
    pynsq = subprocess.Popen([sys.executable, "-c", PYNSQ, str(DEADLINE)], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    outcomes = []
    try:
        reader = LineReader(pynsq)
        assert reader.next() == "ready\n"  # pynsq and tornado imported
        assert pynsq.stdin is not None
        for start in range(STARTS):
            data = tmp_path / f"data-{start}"
            data.mkdir()
            tcp_port, http_port = free_port(), free_port()
            with (tmp_path / f"nsqd-{start}.log").open("wb") as log:
                nsqd = subprocess.Popen(
                    [str(BIN / "nsqd"), f"--tcp-address=127.0.0.1:{tcp_port}",
                     f"--http-address=127.0.0.1:{http_port}", f"--data-path={data}"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            try:
                pynsq.stdin.write(f"127.0.0.1:{tcp_port} {http_port} await_pub_{start}\n")
                pynsq.stdin.flush()
                outcome = json.loads(reader.next())
            finally:
                nsqd.terminate()
                status = nsqd.wait(DEADLINE)
            outcomes.append((outcome, status))  # stopped cleanly too: exit 0
    finally:
        if pynsq.stdin is not None:
            pynsq.stdin.close()
        try:
            pynsq.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            pynsq.kill()
            pynsq.wait()
        if pynsq.stdout is not None:
            pynsq.stdout.close()
    assert outcomes == [("OK", 0)] * STARTS


def http_get(port: int, path: str) -> tuple[int, bytes]:
    """Status and body of ``GET <path>``; (0, b"") while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=DEADLINE) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def first_ok(process: subprocess.Popen[bytes], port: int, path: str = "/ping") -> list[int]:
    """Wait for ``path`` to answer OK, from the daemon's launch; every status seen first."""
    seen: list[int] = []

    def ok() -> bool:
        assert process.poll() is None, "the daemon exited"
        status, body = http_get(port, path)
        if status:
            seen.append(status)
        return status == 200 and body == b"OK"

    wait_until(ok, interval=0.002, what=f"{path} OK")
    return seen


@pytest.fixture
def launch(tmp_path):
    """Start a daemon by hand (not waiting for its log lines); stopped at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def factory(name: str, *args: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}-{len(started)}.log").open("wb") as log:
            process = subprocess.Popen([str(BIN / name), *args], stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT)
        started.append(process)
        return process

    yield factory
    for process in started:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def read_frame(sock: socket.socket) -> bytes:
    """One V1 answer from nsqlookupd: a 4-byte size, then the body."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "nsqlookupd closed the connection"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def test_nsqlookupds_first_ping_ok_means_register_and_lookup_are_served(launch):
    tcp_port, http_port = free_port(), free_port()
    lookupd = launch("nsqlookupd", f"--tcp-address=127.0.0.1:{tcp_port}",
                     f"--http-address=127.0.0.1:{http_port}")
    seen = first_ok(lookupd, http_port)
    assert set(seen) <= {500, 200}  # "not yet" (NOK - starting) until OK
    # at once, as a producer: REGISTER over TCP, then a consumer's /lookup
    with socket.create_connection(("127.0.0.1", tcp_port), timeout=DEADLINE) as sock:
        identify = json.dumps({"broadcast_address": "127.0.0.1", "hostname": "h",
                               "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"})
        sock.sendall(b"  V1" + b"IDENTIFY\n" + struct.pack(">i", len(identify))
                     + identify.encode())
        assert json.loads(read_frame(sock))["tcp_port"] == tcp_port
        sock.sendall(b"REGISTER ready-topic\n")
        assert read_frame(sock) == b"OK"
        status, body = http_get(http_port, "/lookup?topic=ready-topic")
    assert status == 200
    producers = json.loads(body)["producers"]
    assert [(p["broadcast_address"], p["tcp_port"]) for p in producers] == [("127.0.0.1", 4150)]


def test_nsqadmins_first_ping_ok_means_its_pages_are_served(launch):
    lookupd_tcp, lookupd_http = free_port(), free_port()
    launch("nsqlookupd", f"--tcp-address=127.0.0.1:{lookupd_tcp}",
           f"--http-address=127.0.0.1:{lookupd_http}")
    port = free_port()
    admin = launch("nsqadmin", f"--http-address=127.0.0.1:{port}",
                   f"--lookupd-http-address=127.0.0.1:{lookupd_http}")
    seen = first_ok(admin, port)
    assert set(seen) <= {500, 200}
    status, body = http_get(port, "/api/topics")
    assert status == 200 and json.loads(body)["topics"] == []
    status, page = http_get(port, "/")
    assert status == 200 and b"<html" in page.lower()
