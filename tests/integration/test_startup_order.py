"""What a client that waits for nsqd to start may count on: nsqd answers its first ``/ping``,
and logs the ``listening on`` lines, only once every nsqlookupd it was given knows it and its
topics (ansq's test suite waits for ``/ping``, gnsq's for the log lines, then both ask
nsqlookupd at once)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
from nsq_testing import DEADLINE, free_port, wait_until


def executable(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def ping(http_port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{http_port}/ping", timeout=DEADLINE).status_code == 200
    except httpx.TransportError:
        return False


def test_nsqd_is_registered_with_every_lookupd_by_its_first_ping(run_daemon, tmp_path):
    lookupds = [run_daemon("nsqlookupd") for _ in range(2)]
    data = tmp_path / "data"
    data.mkdir()
    # a first run leaves a topic with a channel in nsqd.dat, for the next start to register
    first = run_daemon("nsqd", f"--data-path={data}")
    assert httpx.post(f"http://{first.http_address}/topic/create",
                      params={"topic": "kept"}).status_code == 200
    assert httpx.post(f"http://{first.http_address}/channel/create",
                      params={"topic": "kept", "channel": "c"}).status_code == 200
    first.stop()

    http_port = free_port()
    log = (tmp_path / "nsqd.log").open("wb")
    nsqd = subprocess.Popen(
        [executable("nsqd"), f"--data-path={data}", "--tcp-address=127.0.0.1:0",
         f"--http-address=127.0.0.1:{http_port}", "--broadcast-address=127.0.0.1",
         *[f"--lookupd-tcp-address={lookupd.tcp_address}" for lookupd in lookupds]],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: ping(http_port) or nsqd.poll() is not None, interval=0.001,
                   what="nsqd's first /ping")
        assert nsqd.poll() is None, (tmp_path / "nsqd.log").read_text()
        # the first /ping has been answered: every lookupd must know nsqd and its channel now
        for lookupd in lookupds:
            producers = httpx.get(f"http://{lookupd.http_address}/nodes").json()["producers"]
            assert [(p["http_port"], p["topics"]) for p in producers] == [(http_port, ["kept"])]
            channels = httpx.get(f"http://{lookupd.http_address}/channels",
                                 params={"topic": "kept"}).json()["channels"]
            assert channels == ["c"]
        # the first /ping may come from the early start: the log lines from the real server
        wait_until(lambda: (tmp_path / "nsqd.log").read_text().count(": listening on ") == 2,
                   what="nsqd's listening lines")
    finally:
        nsqd.terminate()
        nsqd.wait(DEADLINE)
        log.close()
    lines = (tmp_path / "nsqd.log").read_text().splitlines()
    registered = [i for i, line in enumerate(lines) if "): peer info " in line]
    listening = [i for i, line in enumerate(lines) if ": listening on " in line]
    assert len(registered) == 2 and len(listening) == 2, lines
    assert max(registered) < min(listening), lines


def test_nsqd_starts_when_a_lookupd_is_down(run_daemon):
    # a lookupd nobody listens on: the first attempt fails at once and nsqd serves anyway,
    # then keeps retrying it in the background
    nobody = f"127.0.0.1:{free_port()}"
    nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={nobody}")
    assert httpx.get(f"http://{nsqd.http_address}/ping").text == "OK"
    wait_until(lambda: f"LOOKUPD({nobody})" in nsqd.output(), what="a retry logged")


def test_nsqd_registers_in_its_early_start_over_the_connection_it_keeps(run_daemon, tmp_path):
    # a fresh data path: nsqd answers /ping from its early start, registered before that;
    # the connection registered early is the one nsqd goes on with (lookupd sees one peer)
    lookupd = run_daemon("nsqlookupd")
    http_port = free_port()
    log = (tmp_path / "nsqd.log").open("wb")
    nsqd = subprocess.Popen(
        [executable("nsqd"), f"--data-path={tmp_path}", "--tcp-address=127.0.0.1:0",
         f"--http-address=127.0.0.1:{http_port}", "--broadcast-address=127.0.0.1",
         f"--lookupd-tcp-address={lookupd.tcp_address}"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: ping(http_port) or nsqd.poll() is not None, interval=0.001,
                   what="nsqd's first /ping")
        assert nsqd.poll() is None, (tmp_path / "nsqd.log").read_text()
        producers = httpx.get(f"http://{lookupd.http_address}/nodes").json()["producers"]
        assert [(p["broadcast_address"], p["http_port"]) for p in producers] == [
            ("127.0.0.1", http_port)]
        wait_until(lambda: ": listening on " in (tmp_path / "nsqd.log").read_text(),
                   what="nsqd's real server")
        tcp_port = producers[0]["tcp_port"]
        assert f"TCP: listening on 127.0.0.1:{tcp_port}" in (tmp_path / "nsqd.log").read_text()
        # a topic made now is registered over the connection Lookup took over
        assert httpx.post(f"http://127.0.0.1:{http_port}/topic/create",
                          params={"topic": "later"}).status_code == 200

        def registered() -> bool:
            r = httpx.get(f"http://{lookupd.http_address}/lookup", params={"topic": "later"})
            return r.status_code == 200 and [
                p["http_port"] for p in r.json()["producers"]] == [http_port]

        wait_until(registered, what="the new topic in nsqlookupd")
        remote = producers[0]["remote_address"]
        nodes = httpx.get(f"http://{lookupd.http_address}/nodes").json()["producers"]
        assert [p["remote_address"] for p in nodes] == [remote]  # the same connection
    finally:
        nsqd.terminate()
        nsqd.wait(DEADLINE)
        log.close()
    assert lookupd.output().count("TCP: new client(") == 1, lookupd.output()
    assert (tmp_path / "nsqd.log").read_text().count("): peer info ") == 1


def test_nsqd_starts_when_a_lookupd_never_answers(run_daemon):
    # a lookupd that takes the connection and never answers: the early attempt gives up (a
    # step's timeout), nsqd serves, and Lookup keeps trying it
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={address}")
        assert httpx.get(f"http://{nsqd.http_address}/ping").text == "OK"
        wait_until(lambda: f"LOOKUPD({address})" in nsqd.output(), what="the peer logged")
