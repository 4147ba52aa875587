"""nsq_stat on real processes: NSQ's table, summed over nsqd, found directly or via lookupd."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import httpx
from nsq_testing import Daemon
from nsq_testing.lookup import registered

HEADER = [
    b"------rate------+----------------depth----------------+--------------metadata---------------",
    b"ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients",
]


def nsq_stat(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "nsq_client.tools.nsq_stat", *args],
                          capture_output=True, timeout=30, check=False)


def prepare(nsqd: Daemon, count: int, **settings: str) -> None:
    base = f"http://{nsqd.http_address}"
    httpx.post(f"{base}/topic/create", params={"topic": "stats", **settings}).raise_for_status()
    httpx.post(f"{base}/channel/create", params={"topic": "stats", "channel": "ch"}).raise_for_status()
    httpx.post(f"{base}/mpub", params={"topic": "stats"},
               content=b"\n".join(b"m" for _ in range(count))).raise_for_status()


def test_reports_the_channel_summed_over_nsqd(run_daemon: Callable[..., Daemon]) -> None:
    first, second = run_daemon("nsqd"), run_daemon("nsqd")
    prepare(first, 3)
    prepare(second, 4, retention="1h")  # its /stats has our keys: offsets, the retention
    offsets = httpx.get(f"http://{second.http_address}/stats",
                        params={"format": "json", "topic": "stats"}).json()["topics"][0]
    assert offsets["latest_offset"] == 3 and "read_offset" in offsets["channels"][0]
    result = nsq_stat("--topic=stats", "--channel=ch", "--interval=200ms", "--count=2",
                      f"--nsqd-http-address={first.http_address}",
                      f"--nsqd-http-address={second.http_address}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == HEADER
    assert len(lines) == 4  # the first poll only sets the baseline
    for row in lines[2:]:
        assert row.split() == [b"0", b"0", b"|", b"7", b"7", b"0", b"0", b"0", b"|", b"0", b"0",
                               b"7", b"0"]


def test_finds_nsqd_through_lookupd(run_daemon: Callable[..., Daemon]) -> None:
    lookupd = run_daemon("nsqlookupd")
    nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                      "--broadcast-address=127.0.0.1")
    prepare(nsqd, 5)
    with registered(lookupd, nsqd, ["stats"]):
        result = nsq_stat("--topic=stats", "--channel=ch", "--interval=100ms", "--count=1",
                          f"--lookupd-http-address={lookupd.http_address}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2].split()[3] == b"5"


def test_missing_channel_and_bad_flags(run_daemon: Callable[..., Daemon]) -> None:
    nsqd = run_daemon("nsqd")
    prepare(nsqd, 1)
    result = nsq_stat("--topic=stats", "--channel=nope", "--count=1",
                      f"--nsqd-http-address={nsqd.http_address}")
    assert result.returncode == 1
    assert b"failed to find channel(nope) in stats metadata for topic(stats)" in result.stderr
    result = nsq_stat("--topic=stats")
    assert result.returncode == 1 and b"--topic and --channel are required" in result.stderr
    result = nsq_stat("--topic=t", "--channel=c", "--nsqd-http-address=http://127.0.0.1:1")
    assert result.returncode == 1 and b"address should not contain scheme" in result.stderr
    result = nsq_stat("--topic=t", "--channel=c", "--count=0", "--nsqd-http-address=127.0.0.1:1")
    assert result.returncode == 1 and b"--count should be positive" in result.stderr
