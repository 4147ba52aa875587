"""docs/tools.md's examples, run as written (the addresses moved to this test's daemons): one
per command-line tool, each doing what the page says it does, and the README pointing to it."""

from __future__ import annotations

import http.server
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nsq_testing import DEADLINE, Daemon, wait_until
from nsq_testing.lookup import lookup_producers

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("to_nsq", "nsq_tail", "nsq_stat", "nsq_to_file", "nsq_to_http", "nsq_to_nsq")


def examples() -> dict[str, str]:
    """The example command line of each tool, from the page's ``sh`` block."""
    text = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    found = {}
    for line in block.splitlines():
        match = re.search(r"\.venv/bin/(\w+)", line)
        if match:
            found[match[1]] = line
    return found


def test_every_console_script_has_one_example_and_the_readme_links_the_page() -> None:
    scripts = (ROOT / "packages" / "client" / "pyproject.toml").read_text().split(
        "[project.scripts]", 1)[1].split("\n[", 1)[0]
    names = set(re.findall(r"^(\w+) =", scripts, re.M))
    assert names == set(TOOLS)
    assert set(examples()) == names
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/tools.md" in readme
    for name in names:
        assert f"`{name}`" in readme, name


class Cluster:
    def __init__(self, run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
        self.lookupd = run_daemon("nsqlookupd")
        self.nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={self.lookupd.tcp_address}")
        self.nsqd2 = run_daemon("nsqd", f"--lookupd-tcp-address={self.lookupd.tcp_address}")
        self.archive = tmp_path / "archive"
        self.received: list[bytes] = []
        received = self.received

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def argv(self, tool: str) -> list[str]:
        line = examples()[tool]
        for default, ours in (("127.0.0.1:4161", self.lookupd.http_address),
                              ("127.0.0.1:4150", self.nsqd.tcp_address),
                              ("127.0.0.1:4250", self.nsqd2.tcp_address),
                              ("127.0.0.1:8080", f"127.0.0.1:{self.server.server_port}"),
                              ("/tmp/nsq-archive", str(self.archive))):
            line = line.replace(default, ours)
        words = shlex.split(line.split("|")[-1])
        assert words[0] == f".venv/bin/{tool}"
        return [sys.executable, "-m", f"nsq_client.tools.{tool}", *words[1:]]

    def channels(self, nsqd: Daemon, topic: str) -> dict[str, dict[str, Any]]:
        stats = httpx.get(f"http://{nsqd.http_address}/stats",
                          params={"format": "json", "topic": topic}, timeout=DEADLINE).json()
        return {c["channel_name"]: c for t in stats["topics"] for c in t["channels"]}

    def publish(self, body: bytes) -> None:
        httpx.post(f"http://{self.nsqd.http_address}/pub", params={"topic": "events"},
                   content=body, timeout=DEADLINE).raise_for_status()


@pytest.fixture
def cluster(run_daemon: Callable[..., Daemon], tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(run_daemon, tmp_path)
    yield made
    made.server.shutdown()
    made.server.server_close()


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=DEADLINE * 2, check=False, **kwargs)


def until_interrupted(argv: list[str], ready: Callable[[], object], effect: Callable[[], object],
                      act: Callable[[], None], what: str) -> bytes:
    """Run ``argv`` until ``ready()``, ``act()``, wait for ``effect()``, then Ctrl-C it: its
    stderr, after it exited 0."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(ready, timeout=DEADLINE * 2, what=f"{what}: ready")
        act()
        wait_until(effect, timeout=DEADLINE * 2, what=what)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0, err
    return err


def test_the_examples_work_as_the_page_says(cluster: Cluster) -> None:
    c = cluster
    line = examples()["to_nsq"]
    assert line.startswith("printf 'one\\ntwo\\nthree\\n' | ")
    published = run(c.argv("to_nsq"), input=b"one\ntwo\nthree\n")
    assert published.returncode == 0, published.stderr
    wait_until(lambda: lookup_producers(c.lookupd.http_address, "events"),
               what="nsqd registered the topic with nsqlookupd")

    tail = run(c.argv("nsq_tail"))
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == [b"one", b"two", b"three"]

    stat = run(c.argv("nsq_stat"))
    assert stat.returncode == 0, stat.stderr
    reports = [ln for ln in stat.stdout.decode().splitlines() if re.match(r"\s*\d", ln)]
    assert len(reports) == 2, stat.stdout

    err = until_interrupted(
        c.argv("nsq_to_file"), lambda: len(c.channels(c.nsqd, "events")) > 1,
        lambda: [f for f in c.archive.glob("events.*") if f.stat().st_size],
        lambda: c.publish(b"to a file"), "nsq_to_file got the message")
    written = list(c.archive.glob("events.*"))
    assert len(written) == 1, (written, err)
    [written_file] = written
    assert written_file.read_bytes() == b"to a file\n", written_file

    until_interrupted(
        c.argv("nsq_to_http"), lambda: "nsq_to_http" in c.channels(c.nsqd, "events"),
        lambda: c.received, lambda: c.publish(b"over http"), "the endpoint got the message")
    assert c.received == [b"over http"]

    def copy_channel_then_publish() -> None:
        httpx.post(f"http://{c.nsqd2.http_address}/topic/create", params={"topic": "events-copy"},
                   timeout=DEADLINE).raise_for_status()
        httpx.post(f"http://{c.nsqd2.http_address}/channel/create",
                   params={"topic": "events-copy", "channel": "copy"},
                   timeout=DEADLINE).raise_for_status()
        c.publish(b"copied")

    until_interrupted(
        c.argv("nsq_to_nsq"), lambda: "nsq_to_nsq" in c.channels(c.nsqd, "events"),
        lambda: c.channels(c.nsqd2, "events-copy").get("copy", {}).get("depth") == 1,
        copy_channel_then_publish, "the copy on nsqd-2")
