"""nsq_tail on real processes: prints a topic's messages, --n, --print-topic, Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from nsq_client import Config, DiscoveryError
from nsq_client._discovery import LookupdPoller
from nsq_testing import DEADLINE, Daemon, wait_until
from nsq_testing.lookup import registered


def tail(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "nsq_client.tools.nsq_tail", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def communicate(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """``proc.communicate()`` with the shared deadline; a process that does not finish in time
    is killed and its pipes closed before the error goes up."""
    try:
        return proc.communicate(timeout=DEADLINE)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise


def publish(nsqd: Daemon, topic: str, *bodies: bytes) -> None:
    httpx.post(f"http://{nsqd.http_address}/mpub", params={"topic": topic},
               content=b"\n".join(bodies), timeout=DEADLINE).raise_for_status()


def channel(nsqd: Daemon, topic: str, name: str) -> dict:
    stats = httpx.get(f"http://{nsqd.http_address}/stats",
                      params={"format": "json", "topic": topic, "channel": name},
                      timeout=DEADLINE).json()
    return stats["topics"][0]["channels"][0]


def test_n_messages_then_exit(run_daemon: Callable[..., Daemon]) -> None:
    nsqd = run_daemon("nsqd")
    publish(nsqd, "events", *(b"event %d" % i for i in range(10)))
    proc = tail("--topic=events", f"--nsqd-tcp-address={nsqd.tcp_address}", "--n=10")
    out, err = communicate(proc)
    assert proc.returncode == 0, err
    assert out.splitlines() == [b"event %d" % i for i in range(10)]
    assert b"Adding consumer for topic: events" in err


def test_print_topic_and_several_topics(run_daemon: Callable[..., Daemon]) -> None:
    nsqd = run_daemon("nsqd")
    publish(nsqd, "a", b"from a")
    publish(nsqd, "b", b"from b")
    proc = tail("--topic=a", "--topic=b", f"--nsqd-tcp-address={nsqd.tcp_address}",
                "--print-topic", "--channel=shared")
    lines: list[bytes] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip(b"\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: len(lines) >= 2, what=lambda: f"two lines printed, not {lines}")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(DEADLINE)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(DEADLINE)
            for pipe in (proc.stdout, proc.stderr):
                assert pipe is not None
                pipe.close()
    assert sorted(lines) == [b"a | from a", b"b | from b"]
    assert proc.returncode == 0
    for topic in ("a", "b"):
        stats = channel(nsqd, topic, "shared")
        assert stats["message_count"] == 1 and stats["in_flight_count"] == 0
        assert stats["depth"] == 0  # finished, not given back


def test_ctrl_c_gives_back_what_was_not_printed(run_daemon: Callable[..., Daemon],
                                                tmp_path: Path) -> None:
    nsqd = run_daemon("nsqd")
    publish(nsqd, "big", *(b"%d" % i for i in range(2000)))
    output = tmp_path / "out"
    with output.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "nsq_client.tools.nsq_tail", "--topic=big",
                                 "--channel=c", f"--nsqd-tcp-address={nsqd.tcp_address}",
                                 "--max-in-flight=500"], stdout=sink, stderr=subprocess.PIPE)
        try:
            wait_until(output.read_bytes, interval=0.01, what="nsq_tail printed something")
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = communicate(proc)
    assert proc.returncode == 0, err
    lines = output.read_bytes().splitlines()
    printed = len(lines)
    assert printed and lines == [b"%d" % i for i in range(printed)]
    stats = channel(nsqd, "big", "c")
    assert stats["in_flight_count"] == 0
    # every message was either printed (and FINished) or is back in the queue
    assert stats["depth"] + printed == 2000
    assert stats["depth"] + stats["deferred_count"] == 2000 - printed


def test_default_channel_is_ephemeral_and_lookupd_works(run_daemon: Callable[..., Daemon]) -> None:
    lookupd = run_daemon("nsqlookupd")
    nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                      "--broadcast-address=127.0.0.1")
    publish(nsqd, "found", b"via lookupd")
    with registered(lookupd, nsqd, ["found"]):
        proc = tail("--topic=found", f"--lookupd-http-address={lookupd.http_address}", "--n=1")
        out, err = communicate(proc)
    assert proc.returncode == 0, err
    assert out == b"via lookupd\n"


def test_flag_errors(run_daemon: Callable[..., Daemon]) -> None:
    proc = tail("--topic=t")
    _, err = communicate(proc)
    assert proc.returncode == 1
    assert b"--nsqd-tcp-address or --lookupd-http-address required" in err
    proc = tail("--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--lookupd-http-address=127.0.0.1:2")
    _, err = communicate(proc)
    assert proc.returncode == 1 and b"not both" in err
    proc = tail("--nsqd-tcp-address=127.0.0.1:1")
    _, err = communicate(proc)
    assert proc.returncode == 1 and b"--topic required" in err
    proc = tail("--version")
    out, _ = communicate(proc)
    assert proc.returncode == 0 and out == b"nsq_tail v1.3.0\n"


async def test_a_topic_lookupd_does_not_know_is_asked_and_logged_once_a_poll(
        run_daemon: Callable[..., Daemon], caplog: pytest.LogCaptureFixture) -> None:
    """nsq_tail on a topic nothing has published yet: each poll of a lone nsqlookupd is one
    /lookup and one warning, not three of each."""
    lookupd = run_daemon("nsqlookupd")
    poller = LookupdPoller([lookupd.http_address], "not-yet", Config())
    requests: list[httpx.URL] = []

    async def count(request: httpx.Request) -> None:
        requests.append(request.url)

    async with httpx.AsyncClient(timeout=DEADLINE, event_hooks={"request": [count]}) as client:
        with pytest.raises(DiscoveryError, match="TOPIC_NOT_FOUND"):
            await poller.query(client)
    assert [url.path for url in requests] == ["/lookup"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "nsq_client"
                and "error querying nsqlookupd" in r.getMessage()]
    assert len(warnings) == 1, warnings
