"""``nsqd --export-go-data-path``: a data directory for Go's nsqd 1.3 with every message our
channels have not finished, read back with our own go-diskqueue reader and, when a Go nsqd
binary is at hand (``NSQD_GO=/path/to/nsqd``, or Go's ``nsqd`` on PATH), consumed from Go's
nsqd itself."""

import base64
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from nsq_common import FrameType, commands, decode_message
from nsq_testing import DEADLINE, WireClient, until, wait_until
from nsqd import gofiles
from nsqd.record import decode_record

NSQD = str(Path(sys.executable).with_name("nsqd"))
DATA = Path(__file__).resolve().parents[2] / "packages" / "nsqd" / "tests" / "data"


def go_nsqd() -> str | None:
    """Go's nsqd binary: $NSQD_GO, or an ``nsqd`` on PATH whose --version says Go built it."""
    for candidate in (os.environ.get("NSQD_GO"), shutil.which("nsqd")):
        if not candidate:
            continue
        try:
            out = subprocess.run([candidate, "--version"], capture_output=True, text=True,
                                 timeout=DEADLINE, check=False)
        except OSError:
            continue
        if "built w/go" in out.stdout + out.stderr:
            return candidate
    return None


GO_NSQD = go_nsqd() or ""
needs_go = pytest.mark.skipif(not GO_NSQD, reason="no Go nsqd to start on the export: set "
                              "NSQD_GO=/path/to/nsqd (v1.3) or put Go's nsqd on PATH")


def post(address: str, path: str, body: bytes = b"", **params: str) -> None:
    answer = httpx.post(f"http://{address}{path}", params=params, content=body,
                        timeout=DEADLINE)
    assert answer.status_code == 200, answer.text


def export(source: Path, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NSQD, f"--data-path={source}", f"--export-go-data-path={target}"],
                          capture_output=True, text=True, timeout=120, check=False)


def exported(target: Path) -> dict[str, list]:
    """Every queue of the exported directory, read with our go-diskqueue reader: name ->
    decoded messages."""
    names = {m.group("queue") for m in map(gofiles.QUEUE_FILE.fullmatch,
                                             os.listdir(target)) if m is not None}
    out = {}
    for name in sorted(names):
        records = [r for batch in gofiles.read_queue(target, name, logging.getLogger("test"))
                   for r in batch]
        assert all(not r[8] & 0x80 for r in records), f"{name}: a record Go cannot read"
        out[name] = [decode_record(r) for r in records]
    return out


def bodies(messages) -> list[bytes]:
    return sorted(m.body for m in messages)


async def publish(address: str, topic: str, payloads: list[bytes]) -> None:
    async with await WireClient.connect(address) as client:
        await client.send(commands.mpub(topic, payloads))
        assert await client.response() == b"OK"


def payloads(prefix: str, n: int) -> list[bytes]:
    return [bytes([i, 0, 10, 255]) + prefix.encode() if i % 4 == 0 else f"{prefix}-{i}".encode()
            for i in range(n)]


async def make_source(run_daemon, source: Path) -> dict[str, list[bytes]]:
    """Publish, partly consume (FIN out of order, REQ, left in flight), pause, dead-letter and
    respawn; stop nsqd. What each Go queue must hold, by body."""
    nsqd = run_daemon("nsqd", f"--data-path={source}")
    http = nsqd.http_address
    post(http, "/topic/create", topic="t")
    for channel in ("a", "b"):
        post(http, "/channel/create", topic="t", channel=channel)
    post(http, "/channel/create", topic="t", channel="d", max_attempts="1")
    sent = payloads("t", 40)
    await publish(nsqd.tcp_address, "t", sent)
    for i in range(2):
        post(http, "/pub", f"deferred-{i}".encode(), topic="t", defer="3600000")
    sent += [b"deferred-0", b"deferred-1"]
    finished = []
    async with await WireClient.connect(nsqd.tcp_address) as client:
        await client.subscribe("t", "a", 20)
        with trio.fail_after(DEADLINE):
            for i in range(20):
                msg = await client.message()
                if i < 16 and i % 2 == 0:
                    await client.send(commands.fin(msg.id))  # acknowledged ahead of the rest
                    finished.append(msg.body)
                elif i >= 16:
                    await client.send(commands.req(msg.id, 0))
        await until(lambda: sum(c["finish_count"] for c in channel_stats(
            http, "t", "a")["clients"]) == len(finished), what="the FINs taken")
        # the requeued and the other 8 stay in flight to this client until nsqd stops
    pulled = httpx.post(f"http://{http}/channel/consume",
                        params={"topic": "t", "channel": "d", "n": "3"}, timeout=DEADLINE)
    dead = []
    for message in pulled.json()["messages"]:
        dead.append(base64.b64decode(message["body"]))
        post(http, "/message/deadletter", topic="t", channel="d", id=message["id"])
    assert len(dead) == 3
    answer = httpx.post(f"http://{http}/channel/deadletter/respawn",
                        params={"topic": "t", "channel": "d", "n": "1"}, timeout=DEADLINE)
    assert answer.json()["count"] == 1
    dead_left = dead[1:]
    paused = payloads("p", 10)
    post(http, "/topic/create", topic="p")
    post(http, "/channel/create", topic="p", channel="c")
    await publish(nsqd.tcp_address, "p", paused[:5])
    post(http, "/topic/pause", topic="p")
    await publish(nsqd.tcp_address, "p", paused[5:])
    held = payloads("lonely", 7)
    await publish(nsqd.tcp_address, "lonely", held)
    nsqd.stop()
    return {
        "t:a": sorted(b for b in sent if b not in finished),
        "t:b": sorted(sent),
        "t:d": sorted(b for b in sent if b not in dead_left),
        "t.d.dead": sorted(dead_left),
        "p:c": sorted(paused[:5]),
        "p": sorted(paused[5:]),
        "lonely": sorted(held),
    }


def channel_stats(http: str, topic: str, channel: str) -> dict:
    doc = httpx.get(f"http://{http}/stats", params={"format": "json", "topic": topic},
                    timeout=DEADLINE).json()
    return next(c for t in doc["topics"] for c in t["channels"] if c["channel_name"] == channel)


async def test_export_holds_every_unfinished_message(run_daemon, tmp_path):
    source, target = tmp_path / "source", tmp_path / "go"
    source.mkdir()
    expected = await make_source(run_daemon, source)
    done = export(source, target)
    assert done.returncode == 0, done.stderr
    assert "GOEXPORT: t:a.diskqueue: " in done.stderr
    queues = exported(target)
    assert {name: bodies(msgs) for name, msgs in queues.items()} == expected
    attempts = {m.body: m.attempts for m in queues["t:a"]}
    taken = [b for b in expected["t:a"] if attempts[b]]
    assert len(taken) >= 12, "the messages in flight or requeued keep their attempts"
    assert all(m.attempts == 0 for m in queues["t:b"])
    meta = json.loads((target / "nsqd.dat").read_text())
    assert meta == {"version": "1.3.0", "topics": [
        {"name": "t", "paused": False, "channels": [
            {"name": "a", "paused": False}, {"name": "b", "paused": False},
            {"name": "d", "paused": False}]},
        {"name": "p", "paused": True, "channels": [{"name": "c", "paused": False}]},
        {"name": "lonely", "paused": False, "channels": None},
        {"name": "t.d.dead", "paused": False, "channels": None},
    ]}



@needs_go
async def test_go_nsqd_delivers_every_exported_message(run_daemon, tmp_path):
    source, target = tmp_path / "source", tmp_path / "go"
    source.mkdir()
    expected = await make_source(run_daemon, source)
    assert export(source, target).returncode == 0
    delivered = await consume_with_go(GO_NSQD, target, tmp_path)
    assert delivered == {"t:a": expected["t:a"], "t:b": expected["t:b"],
                         "t:d": expected["t:d"], "t.d.dead:first": expected["t.d.dead"],
                         "p:c": sorted(expected["p:c"] + expected["p"]),
                         "lonely:first": expected["lonely"]}


async def consume_with_go(binary: str, data: Path, tmp_path: Path, *, with_attempts: bool = False
                          ) -> dict[str, list]:
    """Start Go's nsqd on ``data``, unpause everything and drain every channel (a new channel
    ``first`` for topics without one): the bodies each delivered, sorted (``with_attempts``:
    (body, id, attempts))."""
    ports = [_free_port(), _free_port()]
    with open(tmp_path / "go-nsqd.log", "wb") as log:
        process = subprocess.Popen(
            [binary, f"--data-path={data}", f"--tcp-address=127.0.0.1:{ports[0]}",
             f"--http-address=127.0.0.1:{ports[1]}", "--broadcast-address=127.0.0.1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    try:
        http, tcp = f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[0]}"
        wait_until(lambda: httpx.get(f"http://{http}/ping", timeout=DEADLINE).text == "OK",
                   ignore=(httpx.HTTPError,), what="Go's nsqd up")
        meta = json.loads((data / "nsqd.dat").read_text())
        out = {}
        for topic in meta["topics"]:
            if topic["paused"]:
                post(http, "/topic/unpause", topic=topic["name"])
            for channel in topic["channels"] or [{"name": "first"}]:
                if channel.get("paused"):
                    post(http, "/channel/unpause", topic=topic["name"], channel=channel["name"])
                out[f"{topic['name']}:{channel['name']}"] = await drain_go(
                    tcp, http, topic["name"], channel["name"], with_attempts)
        return out
    finally:
        process.kill()
        process.wait()


async def drain_go(tcp: str, http: str, topic: str, channel: str, with_attempts: bool
                   ) -> list:
    """Every message Go's nsqd delivers on ``topic:channel`` until its /stats shows the channel
    empty, FINished."""
    got = []
    async with await WireClient.connect(tcp) as client:
        await client.subscribe(topic, channel, 500)
        with trio.fail_after(DEADLINE):
            while True:
                try:
                    frame_type, data = await client.read_frame(0.5)
                except trio.TooSlowError:
                    if go_channel_empty(http, topic, channel):
                        return sorted(got)
                    continue
                assert frame_type == FrameType.MESSAGE, data
                msg = decode_message(data)
                got.append((msg.body, msg.id, msg.attempts) if with_attempts else msg.body)
                await client.send(commands.fin(msg.id))


def go_channel_empty(http: str, topic: str, channel: str) -> bool:
    doc = httpx.get(f"http://{http}/stats", params={"format": "json", "topic": topic},
                    timeout=DEADLINE).json()
    for t in doc["topics"]:
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c["depth"] == c["in_flight_count"] == c["deferred_count"] == 0
    return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_export_refuses_a_directory_not_empty(tmp_path):
    source, target = tmp_path / "source", tmp_path / "go"
    source.mkdir()
    target.mkdir()
    (target / "something").write_text("x")
    done = export(source, target)
    assert done.returncode == 1
    assert f"FATAL: --export-go-data-path {target} is not an empty directory" in done.stderr
    assert sorted(os.listdir(target)) == ["something"]


def test_export_refuses_a_running_nsqds_data_path(run_daemon, tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    run_daemon("nsqd", f"--data-path={source}")
    done = export(source, tmp_path / "go")
    assert done.returncode == 1
    assert "FATAL: failed to lock data-path" in done.stderr
    assert not (tmp_path / "go").exists()


def test_export_refuses_files_not_brought_in_yet(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(DATA / "go-1.3.0-killed", source)
    done = export(source, tmp_path / "go")
    assert done.returncode == 1
    assert "queues in Go's layout not brought in yet" in done.stderr


def go_files_in_and_back_out(run_daemon, tmp_path: Path) -> tuple[Path, dict[str, list]]:
    """Go's nsqd's own files brought in by our nsqd and exported untouched: the export, and
    what Go's nsqd delivered from the original files."""
    data = DATA / "go-1.3.0-clean"
    source, target = tmp_path / "source", tmp_path / "go"
    shutil.copytree(data, source)
    nsqd = run_daemon("nsqd", f"--data-path={source}")
    httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE)  # started: brought in
    nsqd.stop()
    done = export(source, target)
    assert done.returncode == 0, done.stderr
    go_delivered = json.loads((DATA / "go-1.3.0-clean.json").read_text())
    wanted = {key: sorted((base64.b64decode(m["body"]), m["id"].encode(), m["attempts"])
                          for m in entries) for key, entries in go_delivered.items()}
    assert json.loads((target / "nsqd.dat").read_text()) == json.loads(
        (data / "nsqd.dat").read_text())
    return target, wanted


def test_go_files_in_and_back_out(run_daemon, tmp_path):
    """Each channel's messages are the ones Go's nsqd delivered from the original files,
    with the same attempts."""
    target, wanted = go_files_in_and_back_out(run_daemon, tmp_path)
    queues = exported(target)
    # Go delivers a record with one attempt more than it stores; a paused topic's channel
    # gets its own queue and then what the topic held
    stored = {key: sorted((m.body, m.id, m.attempts + 1) for m in msgs)
              for key, msgs in queues.items()}
    assert {"orders:billing": stored["orders:billing"],
            "orders:shipping": stored["orders:shipping"],
            "orders:audit": stored["orders:audit"],
            "held:first": stored["held"],
            "frozen:c1": sorted(stored["frozen:c1"] + stored["frozen"])} == wanted


@needs_go
async def test_go_files_in_and_back_out_delivered_by_go(run_daemon, tmp_path):
    target, wanted = go_files_in_and_back_out(run_daemon, tmp_path)
    assert await consume_with_go(GO_NSQD, target, tmp_path, with_attempts=True) == wanted
