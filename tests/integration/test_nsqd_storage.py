"""The log-and-cursor storage on real processes (docs/design/storage.md): a full disk that
never wedges, replay (rewind, start=earliest, retention), kill -9 at random points, one copy
on disk whatever the number of channels."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio
from nsq_common import FrameType, commands
from nsq_testing import DEADLINE, WireClient, free_port, until
from nsqd import cursorfile

# -- helpers ---------------------------------------------------------------------------------


def get(url: str, **kwargs: object) -> httpx.Response:
    return httpx.get(url, timeout=DEADLINE, **kwargs)  # type: ignore[arg-type]


def post(url: str, **kwargs: object) -> httpx.Response:
    return httpx.post(url, timeout=DEADLINE, **kwargs)  # type: ignore[arg-type]


def stats(daemon, topic):
    return get(f"http://{daemon.http_address}/stats",
               params={"format": "json", "topic": topic}).json()


def channel_stats(daemon, topic, channel):
    for t in stats(daemon, topic)["topics"] or []:
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c
    return None


def channel_empty(daemon, topic, channel):
    c = channel_stats(daemon, topic, channel)
    return c is not None and c["depth"] == c["in_flight_count"] == c["deferred_count"] == 0


def ping(daemon) -> httpx.Response:
    return get(f"http://{daemon.http_address}/ping")


async def publish(daemon, topic, bodies, batch=100):
    async with await WireClient.connect(daemon.tcp_address) as client:
        for i in range(0, len(bodies), batch):
            await client.send(commands.mpub(topic, bodies[i:i + batch]))
            assert await client.response() == b"OK"


async def pub_until_refused(daemon, topic, prefix, size, window=32):
    """PUB unique bodies of ``size`` bytes, ``window`` at a time pipelined, until nsqd
    refuses one; returns (the bodies acknowledged with OK, the error frame)."""
    acknowledged: list[bytes] = []
    n = 0
    async with await WireClient.connect(daemon.tcp_address) as client:
        while True:
            sent = []
            for _ in range(window):
                body = (b"%s-%07d-" % (prefix, n)).ljust(size, b"x")
                n += 1
                sent.append(body)
            await client.send(b"".join(commands.pub(topic, b) for b in sent))
            for body in sent:
                frame_type, data = await client.read_frame()
                if frame_type == FrameType.ERROR:
                    return acknowledged, data
                assert (frame_type, data) == (FrameType.RESPONSE, b"OK")
                acknowledged.append(body)


async def drain(daemon, topic, channel, *, rdy=500, timeout=120.0):
    """Consume and FIN until /stats shows the channel empty; every body received, in order."""
    got: list[bytes] = []
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.subscribe(topic, channel, rdy)
        with trio.fail_after(timeout):
            while True:
                try:
                    msg = await client.message(timeout=0.3)
                except trio.TooSlowError:  # a pause: is that everything?
                    if channel_empty(daemon, topic, channel):
                        return got
                    continue
                got.append(msg.body)
                await client.send(commands.fin(msg.id))


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted on a fresh directory (needs root, which CI has; skipped with the
    reason elsewhere). Listed before ``run_daemon`` so that the daemons stop before it is
    unmounted."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount/umount command here to make a small tmpfs for a full disk")
    where = tmp_path / "small-fs"
    where.mkdir()
    done = subprocess.run([mount, "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill up (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run([umount, str(where)], capture_output=True, check=False).returncode:
            subprocess.run([umount, "-l", str(where)], capture_output=True, check=False)
        shutil.rmtree(where, ignore_errors=True)


# -- a full disk -----------------------------------------------------------------------------


@pytest.mark.parametrize("segment_bytes,restart", [
    (100 << 20, signal.SIGTERM),  # one segment: space comes back by cutting the active one
    (1 << 20, signal.SIGKILL),  # several: whole segments removed, then the active one cut
], ids=["one-segment-sigterm", "segments-sigkill"])
async def test_a_full_disk_never_wedges_and_loses_nothing(small_tmpfs, run_daemon,
                                                          segment_bytes, restart):
    data = small_tmpfs / "data"
    data.mkdir()
    tcp, http = free_port(), free_port()
    args = [f"--data-path={data}", "--mem-queue-size=0", f"--max-bytes-per-file={segment_bytes}",
            "--sync-timeout=200ms", f"--tcp-address=127.0.0.1:{tcp}",
            f"--http-address=127.0.0.1:{http}"]
    daemon = run_daemon("nsqd", *args)
    post(f"http://{daemon.http_address}/channel/create", params={"topic": "full", "channel": "c"})
    acknowledged: list[bytes] = []

    # 1. PUB until full: refused with E_PUB_FAILED, /ping NOK.
    acked, error = await pub_until_refused(daemon, "full", b"one", 1000)
    acknowledged += acked
    assert error.startswith(b"E_PUB_FAILED"), error
    assert b"no space left on device" in error.lower(), error
    assert len(acked) > 5000  # most of the 8 MiB
    answer = ping(daemon)
    assert answer.status_code == 500 and answer.text.startswith("NOK"), answer.text

    # 2. A consumer drains them all: every acknowledged message, none other; the space comes
    # back by itself (no restart) and PUB works again.
    got = await drain(daemon, "full", "c")
    assert sorted(got) == sorted(acked), (len(got), len(acked))
    await until(lambda: free_bytes(small_tmpfs) > 6 << 20, what="the log's space back")
    assert "removed" in daemon.output()
    await until(lambda: ping(daemon).status_code == 500)  # still NOK until a write succeeds
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.pub("full", b"after-drain")
    acknowledged.append(b"after-drain")
    assert ping(daemon).text == "OK"

    # 3. Fill again, restart on the full disk: it starts, serves what is there.
    acked, error = await pub_until_refused(daemon, "full", b"two", 1000)
    acknowledged += acked
    assert error.startswith(b"E_PUB_FAILED"), error
    assert free_bytes(small_tmpfs) < 64 << 10
    status = daemon.stop(restart)
    assert status == (0 if restart == signal.SIGTERM else -signal.SIGKILL), daemon.output()
    daemon = run_daemon("nsqd", *args)
    got2 = await drain(daemon, "full", "c")
    assert set(got2) >= {b"after-drain", *acked}, (len(got2), len(acked))
    # what was drained before may come again (its cursor entry could not be written on the
    # full disk), nothing else; each at most once in this drain
    assert set(got2) <= set(acknowledged)
    assert len(got2) == len(set(got2))

    # 4. The space comes back again; PUB works, /ping OK.
    await until(lambda: free_bytes(small_tmpfs) > 6 << 20, what="the log's space back")
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.pub("full", b"last")
    assert ping(daemon).text == "OK"
    assert [*await drain(daemon, "full", "c")] == [b"last"]


# -- replay ----------------------------------------------------------------------------------


def topic_read(daemon, topic, offset=0, n=1):
    return get(f"http://{daemon.http_address}/topic/read",
               params={"topic": topic, "offset": offset, "n": n}).json()


async def test_rewind_start_earliest_and_retention_expiry(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}", "--mem-queue-size=0",
                        "--max-bytes-per-file=20000", "--sync-timeout=200ms")
    http = f"http://{daemon.http_address}"
    assert post(f"{http}/topic/create", params={"topic": "r", "retention": "1h"}).status_code == 200
    post(f"{http}/channel/create", params={"topic": "r", "channel": "C"})
    before = [b"before-%04d" % i for i in range(100)]
    await publish(daemon, "r", before)
    assert sorted(await drain(daemon, "r", "C")) == before
    rewind_to = "%.6f" % (await trio.to_thread.run_sync(_wall_seconds))
    bodies = [b"replay-%04d-" % i + b"x" * 100 for i in range(1000)]
    await publish(daemon, "r", bodies, batch=10)  # 10 per batch: several segments
    assert sorted(await drain(daemon, "r", "C")) == bodies
    segment_files = sorted((data / "topics" / "r").glob("*.log"))
    assert len(segment_files) >= 5  # every message FINished, all kept for the retention

    # rewind to a time before the 1,000: exactly those again, in order
    answer = post(f"{http}/channel/rewind", params={"topic": "r", "channel": "C",
                                                     "timestamp": rewind_to})
    assert answer.status_code == 200, answer.text
    assert answer.json()["offset"] == 100
    assert await drain(daemon, "r", "C") == bodies
    # by offset, to the very first
    post(f"{http}/channel/rewind", params={"topic": "r", "channel": "C", "offset": "0"})
    assert await drain(daemon, "r", "C") == before + bodies

    # a new channel from the earliest retained offset gets everything
    post(f"{http}/channel/create", params={"topic": "r", "channel": "D", "start": "earliest"})
    assert await drain(daemon, "r", "D") == before + bodies
    # and by default (latest) nothing of it
    post(f"{http}/channel/create", params={"topic": "r", "channel": "E"})
    assert channel_stats(daemon, "r", "E")["depth"] == 0

    # retention expiry: every segment past every cursor and older than 1 s goes, and the log
    # says so
    read = topic_read(daemon, "r")
    assert (read["earliest_offset"], read["latest_offset"]) == (0, 1099)
    post(f"{http}/topic/create", params={"topic": "r", "retention": "1s"})
    await until(lambda: topic_read(daemon, "r")["earliest_offset"] == 1100,
                what="the expired segments removed")
    assert "LOG(r): removed" in daemon.output()
    assert len(sorted((data / "topics" / "r").glob("*.log"))) <= 1
    assert topic_read(daemon, "r", 0, 10)["messages"] == []
    post(f"{http}/channel/rewind", params={"topic": "r", "channel": "C", "offset": "0"})
    assert await drain(daemon, "r", "C") == []  # nothing retained to replay


def _wall_seconds() -> float:
    import time

    return time.time()
