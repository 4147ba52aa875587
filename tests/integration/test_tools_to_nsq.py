"""to_nsq on real processes: stdin records to a topic, on every nsqd given, with --rate."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import httpx
from nsq_testing import DEADLINE, Daemon


def to_nsq(*args: str, stdin: bytes, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "nsq_client.tools.to_nsq", *args], input=stdin,
                          capture_output=True, timeout=timeout, check=False)


def topic_stats(nsqd: Daemon, topic: str) -> dict:
    stats = httpx.get(f"http://{nsqd.http_address}/stats",
                      params={"format": "json", "topic": topic}, timeout=DEADLINE).json()
    return (stats.get("topics") or [{}])[0]


def drain(nsqd: Daemon, topic: str, channel: str, count: int) -> list[bytes]:
    """Read ``count`` messages back with the library (from a fresh channel)."""
    return [body for body, _ in drain_timed(nsqd, topic, channel, count)]


def drain_timed(nsqd: Daemon, topic: str, channel: str, count: int) -> list[tuple[bytes, int]]:
    """Like ``drain``, with each message's timestamp (when nsqd took it, in ns)."""
    import trio
    from nsq_client import Consumer

    out: list[tuple[bytes, int]] = []

    async def main() -> None:
        async with Consumer(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address],
                            max_in_flight=100) as consumer:
            with trio.fail_after(DEADLINE):
                async for message in consumer:
                    out.append((message.body, message.timestamp))
                    if len(out) == count:
                        break

    trio.run(main)
    return out


def test_every_line_is_published_in_order(run_daemon: Callable[..., Daemon]) -> None:
    nsqd = run_daemon("nsqd")
    lines = [b"line %d" % i for i in range(500)]
    result = to_nsq("--topic=lines", f"--nsqd-tcp-address={nsqd.tcp_address}",
                    stdin=b"\n".join(lines) + b"\n\n\nlast without newline")
    assert result.returncode == 0, result.stderr
    assert topic_stats(nsqd, "lines")["message_count"] == 501  # empty records are skipped
    assert drain(nsqd, "lines", "check", 501) == [*lines, b"last without newline"]


def test_delimiter_and_fan_out_to_every_nsqd(run_daemon: Callable[..., Daemon]) -> None:
    first, second = run_daemon("nsqd"), run_daemon("nsqd")
    result = to_nsq("--topic=csv", "--delimiter=,", f"--nsqd-tcp-address={first.tcp_address}",
                    f"--nsqd-tcp-address={second.tcp_address}", stdin=b"one,two,three")
    assert result.returncode == 0, result.stderr
    for nsqd in (first, second):
        assert drain(nsqd, "csv", "check", 3) == [b"one", b"two", b"three"]


def test_rate_limits_messages_per_second(run_daemon: Callable[..., Daemon]) -> None:
    nsqd = run_daemon("nsqd")
    bodies = [b"%d" % i for i in range(30)]
    result = to_nsq("--topic=slow", "--rate=20", f"--nsqd-tcp-address={nsqd.tcp_address}",
                    stdin=b"\n".join(bodies))
    assert result.returncode == 0, result.stderr
    assert b"Throttling messages rate to max:20/second" in result.stderr
    assert topic_stats(nsqd, "slow")["message_count"] == 30
    # 30 messages at 20/s, starting with one token: at least 1.45 s between the first and the
    # last publish as nsqd stamped them (a lower bound: a slow machine only spreads them more;
    # the time to start the tool is not in it)
    timed = drain_timed(nsqd, "slow", "check", 30)
    assert [body for body, _ in timed] == bodies
    assert timed[-1][1] - timed[0][1] >= 1.4e9


def test_flag_errors_exit_like_go(run_daemon: Callable[..., Daemon]) -> None:
    result = to_nsq("--topic=t", stdin=b"")
    assert result.returncode == 1
    assert b"--nsqd-tcp-address required" in result.stderr
    result = to_nsq("--topic=t", "--delimiter=ab", "--nsqd-tcp-address=127.0.0.1:1", stdin=b"")
    assert result.returncode == 1 and b"--delimiter must be a single byte" in result.stderr
    result = to_nsq("--no-such-flag", stdin=b"")
    assert result.returncode == 2 and b"flag provided but not defined: -no-such-flag" in result.stderr
    version = subprocess.run([sys.executable, "-m", "nsq_client.tools.to_nsq", "--version"],
                             capture_output=True, check=False)
    assert version.returncode == 2  # to_nsq has no --version flag in NSQ either
