"""A SIGTERM or SIGINT at any moment of a daemon's start-up stops it cleanly, as Go's daemons
do (they watch for both from their first line): the start is finished, then stopped, with
exit status 0 and the ``exiting`` line, and nothing of its data lost.

The moments tried, each one observable from outside: the signal handler in place (the
earliest a Python program can take a signal: ``/proc/<pid>/status``), the TCP port accepting
(the early start's bind, before Trio is imported) and the first ``/ping`` answered "not yet".
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from nsq_testing import DEADLINE, free_port, wait_until

BIN = Path(sys.executable).parent
MESSAGES = 300


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for ``signum`` (``SigCgt`` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE):
            return True
    except OSError:
        return False


def answers_ping(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/ping", timeout=DEADLINE).status_code > 0
    except httpx.TransportError:
        return False


MOMENTS = {
    "handler in place": lambda pid, tcp, http: catches(pid, signal.SIGTERM),
    "tcp accepting": lambda pid, tcp, http: accepting(tcp),
    "first /ping answered": lambda pid, tcp, http: answers_ping(http),
}


def fill(run_daemon, data: Path) -> list[bytes]:
    """A data path with ``MESSAGES`` messages waiting on a channel, left by a clean stop."""
    nsqd = run_daemon("nsqd", f"--data-path={data}")
    bodies = [b"kept-%d" % i for i in range(MESSAGES)]
    base = f"http://{nsqd.http_address}"
    assert httpx.post(f"{base}/topic/create", params={"topic": "t"},
                      timeout=DEADLINE).status_code == 200
    assert httpx.post(f"{base}/channel/create", params={"topic": "t", "channel": "c"},
                      timeout=DEADLINE).status_code == 200
    for start in range(0, MESSAGES, 100):
        r = httpx.post(f"{base}/mpub", params={"topic": "t"},
                       content=b"\n".join(bodies[start:start + 100]), timeout=DEADLINE)
        assert r.status_code == 200, r.text
    assert nsqd.stop() == 0
    return bodies


def received(tcp_address: str, count: int) -> list[bytes]:
    """``count`` messages' bodies from topic t, channel c (FINished as they come)."""
    host, port = tcp_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=DEADLINE) as sock:
        reader = sock.makefile("rb")

        def frame() -> tuple[int, bytes]:
            size, kind = struct.unpack(">ii", reader.read(8))
            return kind, reader.read(size - 4)

        sock.sendall(b"  V2SUB t c\n")
        assert frame() == (0, b"OK")
        sock.sendall(b"RDY %d\n" % count)
        bodies = []
        while len(bodies) < count:
            kind, data = frame()
            if kind == 0:  # a heartbeat
                sock.sendall(b"NOP\n")
                continue
            assert kind == 2, data
            sock.sendall(b"FIN " + data[10:26] + b"\n")
            bodies.append(data[26:])
    return bodies


def signalled_at(args: list[str], log_path: Path, moment: Callable[[int], bool],
                 signum: int, what: str) -> tuple[int, str]:
    """Start ``args`` (its output to ``log_path``), send it ``signum`` at ``moment(pid)`` (or
    once it has exited), and wait for it: its exit status and output (killed, by its pid, if
    it does not exit in time)."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: process.poll() is not None or moment(process.pid),
                   interval=0.001, what=what)
        process.send_signal(signum)
        status = process.wait(DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return status, log_path.read_text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_signal_during_start_up_stops_nsqd_cleanly(run_daemon, tmp_path, moment, signum):
    data = tmp_path / "data"
    data.mkdir()
    bodies = fill(run_daemon, data)
    tcp_port, http_port = free_port(), free_port()
    status, output = signalled_at(
        [str(BIN / "nsqd"), f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp_port}",
         f"--http-address=127.0.0.1:{http_port}"], tmp_path / "start.log",
        lambda pid: MOMENTS[moment](pid, tcp_port, http_port), signum, moment)
    assert status == 0, output
    assert output.splitlines()[-1].endswith("INFO: exiting"), output
    assert "FATAL" not in output and "ERROR" not in output, output
    # restarted: every message still there, on its channel
    nsqd = run_daemon("nsqd", f"--data-path={data}")
    stats = httpx.get(f"http://{nsqd.http_address}/stats", params={"format": "json"},
                      timeout=DEADLINE).json()
    [topic] = stats["topics"]
    assert [(c["channel_name"], c["depth"]) for c in topic["channels"]] == [("c", MESSAGES)]
    assert sorted(received(nsqd.tcp_address, MESSAGES)) == sorted(bodies)


@pytest.mark.parametrize("daemon", ["nsqlookupd", "nsqadmin"])
def test_a_sigterm_during_start_up_stops_the_others_cleanly(tmp_path, daemon):
    http_port = free_port()
    args = [f"--http-address=127.0.0.1:{http_port}"]
    args += (["--tcp-address=127.0.0.1:0"] if daemon == "nsqlookupd"
             else ["--lookupd-http-address=127.0.0.1:1"])
    status, output = signalled_at([str(BIN / daemon), *args], tmp_path / "start.log",
                                  lambda pid: answers_ping(http_port), signal.SIGTERM,
                                  "the first /ping answered")
    assert status == 0, output
    assert "Traceback" not in output and "FATAL" not in output, output

