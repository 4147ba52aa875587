"""The daemons' early start, as their users see it: ``--help`` unchanged, ``/ping`` answered
"not yet" while the daemon still loads its server (500 ``NOK - starting``, as Go's nsqd
answers while not healthy) and OK only from the real server, a request sent during start-up
answered by the real server, and a start that fails never answering ``/ping`` OK first.
(tests/integration/test_startup_ready.py: what the first OK promises.)"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from nsq_testing import DEADLINE, free_port, wait_until

BIN = Path(sys.executable).parent
HELP = Path(__file__).with_name("startup_help")
DATE = re.compile(rb"date: [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT\r\n")


@pytest.mark.parametrize("daemon", ["nsqd", "nsqlookupd", "nsqadmin"])
def test_help_is_unchanged(daemon):
    from nsqd.flags import default_node_id

    done = subprocess.run([str(BIN / daemon), "--help"], capture_output=True, text=True,
                          timeout=60)
    expected = (HELP / f"{daemon}.txt").read_text().replace("{hostname}", socket.gethostname())
    expected = expected.replace("{node_id}", str(default_node_id()))
    assert done.returncode == 0
    assert done.stderr == expected


def exchange(port, request):
    """The whole answer to ``request`` (the server closes after it), or None while nothing
    listens yet."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
            sock.sendall(request)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except ConnectionRefusedError:
        return None
    return b"".join(chunks)


def argv(daemon, http_port, tmp_path):
    http = f"--http-address=127.0.0.1:{http_port}"
    if daemon == "nsqd":
        return [http, "--tcp-address=127.0.0.1:0", f"--data-path={tmp_path}"]
    if daemon == "nsqlookupd":
        return [http, "--tcp-address=127.0.0.1:0"]
    return [http, "--lookupd-http-address=127.0.0.1:1"]


PING = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
OTHER = {"nsqd": b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         "nsqlookupd": b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         "nsqadmin": b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"}


@pytest.mark.parametrize("daemon", ["nsqd", "nsqlookupd", "nsqadmin"])
def test_first_ping_and_requests_during_start(daemon, tmp_path):
    port = free_port()
    log = (tmp_path / "log").open("wb")
    process = subprocess.Popen([str(BIN / daemon), *argv(daemon, port, tmp_path)],
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        # as soon as anything listens: a /ping, and another request on its own connection
        first = wait_until(lambda: exchange(port, PING) or process.poll() is not None,
                           interval=0.001, what="the first /ping")
        assert process.poll() is None
        other_early = exchange(port, OTHER[daemon])
        wait_until(lambda: b"200 OK" in (exchange(port, PING) or b""), what="the real server")
        later = exchange(port, PING)
        other_later = exchange(port, OTHER[daemon])
    finally:
        process.terminate()
        process.wait(DEADLINE)
        log.close()
    # the early start's "not yet" (the real server's once it answers: never OK first)
    assert first.startswith(b"HTTP/1.1 500 Internal Server Error\r\n"), first
    assert first.endswith(b"\r\n\r\nNOK - starting")
    assert DATE.sub(b"", first) == (b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 14\r\n"
                                    b"content-type: text/plain; charset=utf-8\r\n"
                                    b"connection: close\r\n\r\nNOK - starting")
    assert later.startswith(b"HTTP/1.1 200 OK\r\n") and later.endswith(b"\r\n\r\nOK")
    if daemon != "nsqd":  # they log every request: the early /ping too
        logged = (tmp_path / "log").read_text()
        assert re.search(r"INFO: 500 GET /ping \(127\.0\.0\.1:\d+\) ", logged), logged
        assert re.search(r"INFO: 200 GET /ping \(127\.0\.0\.1:\d+\) ", logged), logged
    # the request sent during start-up got the real server's answer (its body and status)
    assert other_early.split(b"\r\n", 1)[0] == other_later.split(b"\r\n", 1)[0]
    assert other_early.split(b"\r\n\r\n", 1)[1].replace(b"start_time", b"") != b""
    if daemon == "nsqd":  # /info: the same document but for nothing
        assert other_early.split(b"\r\n\r\n", 1)[1] == other_later.split(b"\r\n\r\n", 1)[1]


def refused(command, port):
    """Run ``command`` (a start to be refused, its HTTP address on ``port``), asking for
    ``/ping`` all the while: its exit status, its stderr, and every answer it gave."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    answers = []

    def exited():
        try:
            answers.append(exchange(port, PING))
        except OSError:  # reset by the exiting daemon
            pass
        return process.poll() is not None

    try:
        wait_until(exited, interval=0.001, what="the refused start's exit")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(DEADLINE)
        stderr = process.stderr.read().decode()
        process.stderr.close()
    return process.returncode, stderr, answers


def test_a_refused_start_never_answers_ping_ok(run_daemon, tmp_path):
    run_daemon("nsqd", f"--data-path={tmp_path}")  # holds the data path's lock
    port = free_port()
    status, stderr, answers = refused(
        [str(BIN / "nsqd"), f"--data-path={tmp_path}", "--tcp-address=127.0.0.1:0",
         f"--http-address=127.0.0.1:{port}"], port)
    assert status == 1
    assert "failed to lock data-path" in stderr
    assert not any(answer and b"200 OK" in answer for answer in answers)


NSQADMIN_FATAL = "[nsqadmin] FATAL: failed to instantiate nsqadmin - "


@pytest.mark.parametrize(("daemon", "args", "status", "stderr"), [
    ("nsqd", ["--node-id=5000"], 1, "[nsqd] FATAL: --node-id must be [0,1024)\n"),
    ("nsqd", ["--node-id=-1"], 1, "[nsqd] FATAL: --node-id must be [0,1024)\n"),
    ("nsqd", ["--max-deflate-level=0"], 1, "[nsqd] FATAL: --max-deflate-level must be [1,9]\n"),
    ("nsqd", ["--log-level=loud"], 1, "[nsqd] FATAL: invalid log level 'loud'\n"),
    ("nsqd", ["--e2e-processing-latency-percentile=1.5"], 1,
     "[nsqd] FATAL: invalid E2E processing latency percentile: 1.5\n"),
    ("nsqd", ["--lmstfy-admin-account=nocolon"], 1,
     "[nsqd] FATAL: invalid --lmstfy-admin-account 'nocolon' (user:password)\n"),
    ("nsqd", ["--etcd-endpoints=http://127.0.0.1:2379,127.0.0.1:2380"], 1,
     "[nsqd] FATAL: invalid --etcd-endpoints '127.0.0.1:2380' (http://<addr>:<port>)\n"),
    ("nsqd", ["--default-replicas=0"], 1, "[nsqd] FATAL: --default-replicas must be at least 1\n"),
    ("nsqd", ["--min-insync-replicas=0"], 1,
     "[nsqd] FATAL: --min-insync-replicas must be at least 1\n"),
    ("nsqd", ["--tls-client-auth-policy=require"], 1,
     "[nsqd] FATAL: cannot require TLS client connections without TLS key and cert\n"),
    ("nsqadmin", [], 1,
     NSQADMIN_FATAL + "--nsqd-http-address or --lookupd-http-address required\n"),
    ("nsqadmin", ["--nsqd-http-address=a:1", "--lookupd-http-address=b:2"], 1,
     NSQADMIN_FATAL + "use --nsqd-http-address or --lookupd-http-address not both\n"),
    ("nsqadmin", ["--nsqd-http-address=a"], 1,
     NSQADMIN_FATAL + "failed to resolve --nsqd-http-address (a) - address a: missing port in "
     "address\n"),
    ("nsqadmin", ["--nsqd-http-address=a:1", "--allow-config-from-cidr=zz"], 1,
     NSQADMIN_FATAL + "failed to parse --allow-config-from-cidr (zz) - 'zz' does not appear to "
     "be an IPv4 or IPv6 network\n"),
    ("nsqadmin", ["--nsqd-http-address=a:1", "--log-level=x"], 1,
     NSQADMIN_FATAL + "invalid log level 'x'\n"),
    ("nsqadmin", ["--nsqd-http-address=a:1", "--refresh-interval=0s"], 1,
     NSQADMIN_FATAL + "--refresh-interval must be positive\n"),
    ("nsqlookupd", ["--log-level=loud"], 2,
     "invalid value \"loud\" for flag -log-level: invalid log level 'loud' (debug, info, warn, "
     "error, fatal)\nUsage of nsqlookupd:\n"),
])
def test_bad_options_refuse_the_start_in_nsqs_words(daemon, args, status, stderr, tmp_path):
    """Checked on the flag values before the early start may say OK (no attrs): the same
    words and exit status as ever, and never an OK first."""
    port = free_port()
    command = [str(BIN / daemon), f"--http-address=127.0.0.1:{port}", *args]
    if daemon != "nsqadmin":
        command.append("--tcp-address=127.0.0.1:0")
    if daemon == "nsqd":
        command.append(f"--data-path={tmp_path}")
    got_status, got_stderr, answers = refused(command, port)
    assert got_status == status
    if daemon == "nsqlookupd":  # then the usage, as --help prints it
        assert got_stderr.startswith(stderr)
    else:
        assert got_stderr == stderr
    assert not any(answer and b"200 OK" in answer for answer in answers)


@pytest.mark.parametrize(("content", "why"), [
    ('{"topics": [{"name": "kept"', "failed to parse metadata in {dat} - "),
    ("[]", "failed to parse metadata in {dat} - metadata is not a JSON object"),
    (None, "failed to read metadata from {dat} - open {dat}: is a directory"),
])
def test_a_bad_nsqd_dat_never_answers_ping_ok(content, why, tmp_path):
    # nsqd.dat is parsed in the early start (before /ping may say OK): a bad one says
    # nothing early, and the real start refuses it in its own words
    dat = tmp_path / "nsqd.dat"
    if content is None:
        dat.mkdir()
    else:
        dat.write_text(content)
    port = free_port()
    status, stderr, answers = refused(
        [str(BIN / "nsqd"), f"--data-path={tmp_path}", "--tcp-address=127.0.0.1:0",
         f"--http-address=127.0.0.1:{port}"], port)
    assert status == 1
    assert "FATAL: failed to load metadata - " + why.format(dat=dat) in stderr, stderr
    assert not any(answer and b"200 OK" in answer for answer in answers)
