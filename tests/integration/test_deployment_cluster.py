"""`nsq-cluster up`, run as a user runs it: a subprocess with real daemons, real clients, Ctrl-C.

Every run uses `--base-port 0` (ports chosen by the kernel) and a temp data dir, so it never
meets a developer's own cluster on NSQ's default ports.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from nsq_common import commands
from nsq_testing import WireClient

BANNER = re.compile(r"^  (?P<name>nsq\S+)\s+HTTP http://(?P<http>\S+?)/\s+(?:TCP (?P<tcp>\S+)\s+)?"
                    r"pid (?P<pid>\d+)")
LMSTFY = re.compile(r"^  lmstfy\s+HTTP http://(?P<http>\S+?)/\s+admin http://(?P<admin>\S+?)/\s+"
                    r"\(lmstfy's job API, in (?P<name>\S+)\)$")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def executable(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


class ClusterProcess:
    """`nsq-cluster up ...` with its output collected by a thread (so its pipe never fills)."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [executable("nsq-cluster"), "up", *args], cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.services: dict[str, dict[str, str]] = {}

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                if re.search(pattern, line):
                    return line
            seen = len(self.lines)
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r}; output:\n{self.output()[-6000:]}")

    def wait_until_up(self) -> dict[str, dict[str, str]]:
        self.wait_for_line(r"^Dashboard: ")
        for line in self.lines:
            match = BANNER.match(line)
            if match:
                self.services[match["name"]] = match.groupdict()
        return self.services

    def pids(self) -> list[int]:
        return [int(s["pid"]) for s in self.services.values()]

    def wait(self, timeout: float = 45.0) -> int:
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    def stop(self, sig: int = signal.SIGINT, timeout: float = 45.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.wait(timeout)

    def cleanup(self) -> None:
        """Whatever happened, leave nothing running: the tool, then any child it left."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        for pid in self.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not been reaped (zombies count as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children_of(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == pid:
                found.add(int(entry))
    return found


def http_get(url: str) -> tuple[int, str]:
    try:
        with OPENER.open(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def http_post(url: str, body: bytes) -> str:
    with OPENER.open(urllib.request.Request(url, data=body, method="POST"), timeout=30) as response:
        return response.read().decode()

ETCD = re.compile(r"^  etcd\s+http://(?P<client>\S+)\s+pid (?P<pid>\d+)\s+data \S+ \(topics "
                  r"replicated on (?P<replicas>\d+) nsqd by default\)$")


def eventually(check, timeout: float = 15.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s: {check}")
        time.sleep(interval)


@pytest.fixture
def start_cluster(tmp_path):
    started: list[ClusterProcess] = []

    def start(*args: str) -> ClusterProcess:
        cluster = ClusterProcess(*args, cwd=tmp_path)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.cleanup()


async def test_cluster_comes_up_serves_a_consumer_through_lookupd_and_stops_on_sigint(
        start_cluster, tmp_path):
    data = tmp_path / "data"
    cluster = start_cluster("--base-port", "0", "--data-dir", str(data))
    services = cluster.wait_until_up()
    assert set(services) == {"nsqlookupd", "nsqd-1", "nsqd-2", "nsqadmin"}, cluster.output()
    # nsqd refuses a --data-path that does not exist: the cluster makes each one
    assert (data / "nsqd-1").is_dir() and (data / "nsqd-2").is_dir()
    # the banner's pids are the tool's own children, and it has no others
    assert children_of(cluster.process.pid) == set(cluster.pids())
    lookupd, nsqd1, nsqd2, admin = (services[n] for n in ("nsqlookupd", "nsqd-1", "nsqd-2",
                                                          "nsqadmin"))
    for service in services.values():
        assert http_get(f"http://{service['http']}/ping") == (200, "OK")
    # nsqd-1 serves lmstfy's API too, on the ports the banner names
    (lmstfy,) = [m for m in map(LMSTFY.match, cluster.lines) if m]
    assert lmstfy["name"] == "nsqd-1"
    assert http_get(f"http://{lmstfy['admin']}/pools")[0] == 200
    assert http_get(f"http://{lmstfy['http']}/api/ns/q/size")[0] == 200

    # publish to nsqd-1; a consumer that knows only nsqlookupd finds it and gets the message
    assert http_post(f"http://{nsqd1['http']}/pub?topic=deploy", b"hello") == "OK"

    def producers():
        status, body = http_get(f"http://{lookupd['http']}/lookup?topic=deploy")
        return json.loads(body)["producers"] if status == 200 else None

    (producer,) = eventually(producers)
    assert producer["broadcast_address"] == "127.0.0.1"
    assert producer["tcp_port"] == int(nsqd1["tcp"].rsplit(":", 1)[1])
    consumer = await WireClient.connect(f"{producer['broadcast_address']}:{producer['tcp_port']}")
    await consumer.identify(user_agent="deployment-test")
    await consumer.subscribe("deploy", "c", rdy=1)
    message = await consumer.message()
    assert message.body == b"hello"
    await consumer.send(commands.fin(message.id))
    await consumer.aclose()

    # nsqadmin, pointed at nsqlookupd only, lists both nsqds
    def admin_lists_both():
        status, page = http_get(f"http://{admin['http']}/nodes")
        return status == 200 and nsqd1["http"] in page and nsqd2["http"] in page

    eventually(admin_lists_both)

    # a message nobody consumed, to check that a stop keeps it
    assert http_post(f"http://{nsqd2['http']}/pub?topic=kept", b"still here") == "OK"

    assert cluster.stop(signal.SIGINT) == 0, cluster.output()[-4000:]
    out = cluster.output()
    stops = [line for line in out.splitlines() if "| stopping " in line]
    assert [line.split("stopping ")[1].split()[0] for line in stops] == [
        "nsqadmin", "nsqd-1", "nsqd-2", "nsqlookupd"]
    assert "stopped; nsqd data kept in" in out
    for pid in cluster.pids():
        assert not alive(pid), f"pid {pid} outlived nsq-cluster"
    (segment,) = (data / "nsqd-2" / "topics" / "kept").glob("*.log")
    assert b"still here" in segment.read_bytes()
    assert (data / "nsqd-1" / "nsqd.dat").exists()


def test_replicas_3_starts_an_etcd_and_three_nsqd_replicating_every_topic(start_cluster, tmp_path):
    data = tmp_path / "data"
    cluster = start_cluster("--base-port", "0", "--data-dir", str(data), "--replicas", "3")
    services = cluster.wait_until_up()
    assert set(services) == {"nsqlookupd", "nsqd-1", "nsqd-2", "nsqd-3", "nsqadmin"}
    (etcd,) = [m for m in map(ETCD.match, cluster.lines) if m]
    assert etcd["replicas"] == "3" and (data / "etcd").is_dir()
    assert children_of(cluster.process.pid) == {*cluster.pids(), int(etcd["pid"])}
    nsqds = [services[f"nsqd-{i}"] for i in (1, 2, 3)]
    assert http_post(f"http://{nsqds[0]['http']}/topic/create?topic=everywhere", b"") == ""

    def replicated(nsqd):
        def check():
            status, body = http_get(f"http://{nsqd['http']}/stats?format=json&topic=everywhere")
            topics = json.loads(body)["topics"] if status == 200 else None
            return topics and topics[0].get("replication")
        return eventually(check, timeout=60.0)

    for nsqd in nsqds:  # --default-replicas=3: on all three, led by the node asked
        replication = replicated(nsqd)
        assert len(replication["replicas"]) == 3
        assert replication["leader"] == nsqds[0]["tcp"]

    assert cluster.stop(signal.SIGINT) == 0, cluster.output()[-4000:]
    stops = [line.split("stopping ")[1].split()[0] for line in cluster.output().splitlines()
             if "| stopping " in line]
    assert stops == ["nsqadmin", "nsqd-1", "nsqd-2", "nsqd-3", "nsqlookupd", "etcd"]
    for pid in (*cluster.pids(), int(etcd["pid"])):
        assert not alive(pid), f"pid {pid} outlived nsq-cluster"


def test_a_taken_port_is_refused_with_its_number_before_anything_starts(start_cluster, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        cluster = start_cluster("--base-port", str(port - 21), "--data-dir", str(tmp_path / "d"))
        code = cluster.wait(30)  # it exits by itself
    assert code == 1
    out = cluster.output()
    assert f"port {port} on 127.0.0.1 (nsqadmin HTTP) is already in use" in out
    assert "nothing was started" in out
    assert not (tmp_path / "d").exists()
    assert not BANNER.search(out)


def test_a_taken_lmstfy_port_is_refused_before_anything_starts(start_cluster, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        cluster = start_cluster("--base-port", str(port - 3627), "--data-dir",
                                str(tmp_path / "d"))
        code = cluster.wait(30)
    assert code == 1
    out = cluster.output()
    assert f"port {port} on 127.0.0.1 (nsqd-1 lmstfy HTTP) is already in use" in out
    assert "nothing was started" in out
    assert not (tmp_path / "d").exists()


def test_a_service_that_dies_stops_the_others_and_fails(start_cluster, tmp_path):
    cluster = start_cluster("--base-port", "0", "--nsqd", "1", "--data-dir", str(tmp_path / "d"))
    services = cluster.wait_until_up()
    os.kill(int(services["nsqd-1"]["pid"]), signal.SIGKILL)
    code = cluster.wait(45)
    assert code == 1
    out = cluster.output()
    assert "nsqd-1 exited with status -9 (killed by SIGKILL)" in out
    assert "stopping nsqadmin" in out and "stopping nsqlookupd" in out
    for pid in cluster.pids():
        assert not alive(pid)
