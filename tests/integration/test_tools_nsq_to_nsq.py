"""nsq_to_nsq on real processes: a topic copied to another nsqd, renamed, JSON-filtered."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
from nsq_testing import DEADLINE, Daemon

from ._tools import run_tool_until


def publish(nsqd: Daemon, topic: str, bodies: list[bytes]) -> None:
    httpx.post(f"http://{nsqd.http_address}/mpub", params={"topic": topic},
               content=b"\n".join(bodies)).raise_for_status()


def channel_stats(nsqd: Daemon, topic: str) -> dict:
    stats = httpx.get(f"http://{nsqd.http_address}/stats",
                      params={"format": "json", "topic": topic}).json()
    topics = stats.get("topics") or []
    return topics[0] if topics else {}


def drained(nsqd: Daemon, topic: str) -> bool:
    channels = channel_stats(nsqd, topic).get("channels") or []
    return bool(channels) and channels[0]["depth"] == channels[0]["in_flight_count"] == 0


def read_all(nsqd: Daemon, topic: str, count: int) -> list[bytes]:
    import trio
    from nsq_client import Consumer

    out: list[bytes] = []

    async def main() -> None:
        async with Consumer(topic, "check", nsqd_tcp_addresses=[nsqd.tcp_address],
                            max_in_flight=200) as consumer:
            with trio.fail_after(DEADLINE):
                async for message in consumer:
                    out.append(message.body)
                    if len(out) == count:
                        break

    trio.run(main)
    return out


def copy_until(log: Path, args: list[str], done: Callable[[], bool]) -> bytes:
    return run_tool_until("nsq_to_nsq", log, args, done)


def test_copies_a_topic_to_another_cluster(run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    source, destination = run_daemon("nsqd"), run_daemon("nsqd")
    bodies = [b"record %04d" % i for i in range(1000)]
    publish(source, "orders", bodies)
    copy_until(tmp_path / "log", [
        "--topic=orders", f"--nsqd-tcp-address={source.tcp_address}",
        f"--destination-nsqd-tcp-address={destination.tcp_address}", "--destination-topic=copy"],
        lambda: channel_stats(destination, "copy").get("message_count", 0) >= 1000)
    assert sorted(read_all(destination, "copy", 1000)) == bodies
    source_channel = channel_stats(source, "orders")["channels"][0]
    assert source_channel["channel_name"] == "nsq_to_nsq"
    assert source_channel["depth"] == source_channel["in_flight_count"] == 0


def test_json_filter_and_whitelist(run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    source, destination = run_daemon("nsqd"), run_daemon("nsqd")
    events = [
        {"kind": "click", "user": 1, "secret": "x", "ratio": 2.0},
        {"kind": "view", "user": 2, "secret": "y"},
        {"kind": "click", "user": 3},
    ]
    publish(source, "events", [json.dumps(e).encode() for e in events] + [b"not json"])
    copy_until(tmp_path / "log", [
        "--topic=events", f"--nsqd-tcp-address={source.tcp_address}",
        f"--destination-nsqd-tcp-address={destination.tcp_address}",
        "--require-json-field=kind", "--require-json-value=click",
        "--whitelist-json-field=user", "--whitelist-json-field=ratio"],
        lambda: drained(source, "events")
        and channel_stats(destination, "events").get("message_count", 0) >= 2)
    copied = sorted(read_all(destination, "events", 2))
    assert copied == [b'{"ratio":2,"user":1}', b'{"user":3}']


def test_flag_checks() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "nsq_client.tools.nsq_to_nsq", *args],
                              capture_output=True, timeout=30, check=False)

    result = run("--topic=t", "--nsqd-tcp-address=127.0.0.1:1")
    assert result.returncode == 1 and b"--destination-nsqd-tcp-address required" in result.stderr
    result = run("--topic=bad topic", "--nsqd-tcp-address=127.0.0.1:1")
    assert result.returncode == 1 and b"--topic is invalid" in result.stderr
    result = run("--version")
    assert result.returncode == 0 and result.stdout == b"nsq_to_nsq v1.3.0\n"
