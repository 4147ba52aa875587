"""nsq_to_file on real processes: what it wrote is read back and compared with what was
published (plain, gzip with rotation and a work dir, topics found by pattern)."""

from __future__ import annotations

import gzip
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
from nsq_testing import DEADLINE, Daemon, wait_exit, wait_until
from nsq_testing.lookup import registered

HOST = socket.gethostname().split(".")[0]


def start(log: Path, *args: str) -> subprocess.Popen[bytes]:
    """The tool, its log going to a file (a pipe nobody reads would fill up and block it)."""
    with log.open("wb") as sink:
        return subprocess.Popen([sys.executable, "-m", "nsq_client.tools.nsq_to_file", *args],
                                stdout=subprocess.DEVNULL, stderr=sink)


def publish(nsqd: Daemon, topic: str, bodies: list[bytes]) -> None:
    for i in range(0, len(bodies), 500):
        httpx.post(f"http://{nsqd.http_address}/mpub", params={"topic": topic},
                   content=b"\n".join(bodies[i:i + 500]), timeout=DEADLINE).raise_for_status()


def finished(nsqd: Daemon, topic: str, channel: str = "nsq_to_file") -> int:
    stats = httpx.get(f"http://{nsqd.http_address}/stats",
                      params={"format": "json", "topic": topic, "channel": channel},
                      timeout=DEADLINE).json()
    topics = stats.get("topics") or []
    if not topics or not topics[0]["channels"]:
        return 0
    ch = topics[0]["channels"][0]
    clients = ch["clients"] or []
    return sum(c["finish_count"] for c in clients) if clients else -1


def wait_finished(nsqd: Daemon, topic: str, count: int) -> None:
    wait_until(lambda: finished(nsqd, topic) >= count,
               what=lambda: f"only {finished(nsqd, topic)} of {count} finished")


def stop(proc: subprocess.Popen[bytes], log: Path) -> bytes:
    proc.send_signal(signal.SIGINT)
    wait_exit(proc)
    err = log.read_bytes()
    assert proc.returncode == 0, err.decode(errors="replace")
    return err


def test_plain_files_hold_every_message_in_order(run_daemon: Callable[..., Daemon],
                                                  tmp_path: Path) -> None:
    nsqd = run_daemon("nsqd")
    out = tmp_path / "out"
    bodies = [b"event %04d %s" % (i, b"x" * (i % 50)) for i in range(1500)]
    publish(nsqd, "archive", bodies[:1000])
    log = tmp_path / "log"
    proc = start(log, "--topic=archive", f"--nsqd-tcp-address={nsqd.tcp_address}",
                 f"--output-dir={out}", "--sync-interval=200ms")
    try:
        wait_finished(nsqd, "archive", 1000)
        proc.send_signal(signal.SIGHUP)  # close the file; the next message reopens it
        publish(nsqd, "archive", bodies[1000:])
        wait_finished(nsqd, "archive", 1500)
    finally:
        err = stop(proc, log)
    files = sorted(out.iterdir())
    assert len(files) == 1
    assert re.fullmatch(rf"archive\.{re.escape(HOST)}\.\d{{4}}-\d\d-\d\d_\d\d\.log", files[0].name)
    assert files[0].read_bytes() == b"".join(b + b"\n" for b in bodies)
    assert b"[nsq_to_file] " in err and b"syncing" in err


def test_gzip_rotation_and_work_dir(run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    nsqd = run_daemon("nsqd")
    out, work = tmp_path / "out", tmp_path / "work"
    bodies = [b"%05d " % i + b"y" * 95 for i in range(3000)]  # 101 bytes a line
    publish(nsqd, "zipped", bodies)
    log = tmp_path / "log"
    proc = start(log, "--topic=zipped", f"--nsqd-tcp-address={nsqd.tcp_address}", f"--output-dir={out}",
                 f"--work-dir={work}", "--gzip", "--gzip-level=9", "--rotate-size=100000",
                 "--sync-interval=100ms", "--max-in-flight=100")
    try:
        wait_finished(nsqd, "zipped", 3000)
    finally:
        stop(proc, log)
    assert list(work.iterdir()) == []  # every finished file moved out
    files = sorted(out.iterdir())
    assert len(files) >= 3  # 303,000 bytes in files rotated past 100,000
    names = [re.fullmatch(rf"zipped\.{re.escape(HOST)}-(\d{{6}})\.\d{{4}}-\d\d-\d\d_\d\d\.log\.gz",
                          f.name) for f in files]
    assert all(names)
    assert [int(m.group(1)) for m in names if m] == list(range(len(files)))
    lines = []
    for f in files:
        data = gzip.decompress(f.read_bytes())  # concatenated members, one per sync
        assert len(data) <= 100_000 + 101 * 100
        lines.extend(data.splitlines())
    assert lines == bodies


def test_topics_found_by_pattern(run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    lookupd = run_daemon("nsqlookupd")
    nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                      "--broadcast-address=127.0.0.1")
    out = tmp_path / "out"
    topics = ["logs_web", "logs_db", "metrics"]
    for topic in topics:
        publish(nsqd, topic, [topic.encode() + b" %d" % i for i in range(20)])
    with registered(lookupd, nsqd, topics):
        log = tmp_path / "log"
        proc = start(log, "--topic-pattern=^logs_", f"--lookupd-http-address={lookupd.http_address}",
                     f"--output-dir={out}", "--sync-interval=100ms", "--topic-refresh=200ms",
                     "--consumer-opt=lookupd_poll_interval,200ms")
        try:
            wait_finished(nsqd, "logs_web", 20)
            wait_finished(nsqd, "logs_db", 20)
        finally:
            err = stop(proc, log)
    assert b"skipping topic metrics (doesn't match pattern ^logs_)" in err
    files = {f.name.split(".")[0]: f for f in out.iterdir()}
    assert sorted(files) == ["logs_db", "logs_web"]
    for topic, f in files.items():
        assert f.read_bytes().splitlines() == [topic.encode() + b" %d" % i for i in range(20)]


def test_flag_checks(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "nsq_client.tools.nsq_to_file", "--topic=t",
                             "--nsqd-tcp-address=127.0.0.1:1", "--gzip",
                             "--filename-format=<TOPIC>.log"], capture_output=True, timeout=30,
                            check=False)
    assert result.returncode == 1
    assert b"missing <REV> in --filename-format when gzip, rotation, or work dir enabled" in result.stderr
    result = subprocess.run([sys.executable, "-m", "nsq_client.tools.nsq_to_file",
                             "--nsqd-tcp-address=127.0.0.1:1"], capture_output=True, timeout=30,
                            check=False)
    assert result.returncode == 1 and b"--topic or --topic-pattern required" in result.stderr
