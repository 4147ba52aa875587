"""The log-and-cursor storage on real processes (docs/design/storage.md): a full disk that
never wedges, replay (rewind, start=earliest, retention), kill -9 at random points, one copy
on disk whatever the number of channels."""

from __future__ import annotations

import os
import random
import shutil
import signal
from pathlib import Path

import httpx
import pytest
import trio
from nsq_common import FrameType, commands
from nsq_testing import DEADLINE, WireClient, free_port, until
from nsqd import cursorfile
from nsqd.record import decode_record
from nsqd.segment import Segment

from ._storage_client import (
    channel_empty,
    channel_stats,
    create_channel,
    drain,
    get,
    post,
    publish,
)

# -- helpers ---------------------------------------------------------------------------------


def ping(daemon) -> httpx.Response:
    return get(f"http://{daemon.http_address}/ping")


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


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


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
    create_channel(daemon, "full", "c")
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
    assert "Traceback" not in daemon.output()  # every failed write handled, none a crash
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
    assert "Traceback" not in daemon.output()


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
    create_channel(daemon, "r", "C")
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
    create_channel(daemon, "r", "D", start="earliest")
    assert await drain(daemon, "r", "D") == before + bodies
    # and by default (latest) nothing of it
    create_channel(daemon, "r", "E")
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
    # an offset the log no longer holds is refused with the range it holds; the earliest by
    # time (timestamp 0: before everything) is where the log starts now: nothing to replay
    answer = post(f"{http}/channel/rewind", params={"topic": "r", "channel": "C", "offset": "0"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "E_INVALID rewind offset 0 out of range 1100-1100"
    answer = post(f"{http}/channel/rewind",
                  params={"topic": "r", "channel": "C", "timestamp": "0"})
    assert (answer.status_code, answer.json()) == (200, {"offset": 1100})
    assert await drain(daemon, "r", "C") == []  # nothing retained to replay


def _wall_seconds() -> float:
    import time

    return time.time()


# -- kill -9 at random points ----------------------------------------------------------------

KILLS = 30
PHASES = ("publish", "consume", "rewind", "removal")


class Ledger:
    """What the clients saw, across every run: acknowledged publishes, deliveries, FINs."""

    def __init__(self) -> None:
        self.acknowledged: set[bytes] = set()
        self.delivered: set[bytes] = set()
        self.finished: set[bytes] = set()  # ids FINished, ever
        self.finished_since_rewind: set[bytes] = set()  # ids FINished after the last rewind
        self.fins_sent = 0
        self.next_body = 0
        self.lags: list[int] = []


def stored_ids(data: Path, topic: str, scratch: Path) -> dict[int, bytes]:
    """Offset -> message id of every record in the topic's segments, read from a copy (as
    nsqd would at its next start: a torn last batch cut)."""
    copy = scratch / "segments"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    paths = sorted((data / "topics" / topic).glob("*.log"))
    for path in paths:
        shutil.copyfile(path, copy / path.name)
    ids: dict[int, bytes] = {}
    for path in sorted(copy.glob("*.log")):
        segment = Segment.open(path, active=True)
        try:
            offset = segment.base
            while True:
                runs = segment.read(offset, 1 << 20)
                if not runs:
                    break
                for first, records in runs:
                    for i, record in enumerate(records):
                        ids[first + i] = decode_record(record, first + i).id
                    offset = first + len(records)
        finally:
            segment.close()
    return ids


async def one_run(daemon, ledger: Ledger, phase: str, rng: random.Random, journal: Path):
    """Publish, consume and FIN (and rewind, in that phase) until the random moment of this
    phase, then SIGKILL nsqd. Returns (the FIN count at each observed change of the cursor
    journal, whether a rewind was sent and not answered)."""
    http = f"http://{daemon.http_address}"
    run_acked = 0
    run_fins = 0
    journal_changes: list[int] = []
    rewind_state = {"sent": False, "answered": False}
    dead = trio.Event()

    async def publisher(limit):
        nonlocal run_acked
        try:
            async with await WireClient.connect(daemon.tcp_address) as client:
                while run_acked < limit:
                    batch = [b"k-%07d" % (ledger.next_body + i) for i in range(10)]
                    ledger.next_body += 10
                    await client.send(commands.mpub("kill", batch))
                    if await client.response() != b"OK":
                        return
                    ledger.acknowledged.update(batch)
                    run_acked += len(batch)
        except (EOFError, trio.BrokenResourceError, OSError, AssertionError):
            return

    async def consumer():
        nonlocal run_fins
        try:
            async with await WireClient.connect(daemon.tcp_address) as client:
                await client.subscribe("kill", "c", rdy=25)
                while True:
                    msg = await client.message(timeout=60)
                    ledger.delivered.add(msg.body)
                    # noted before it is sent: a FIN nsqd may have had counts as FINished
                    ledger.fins_sent += 1
                    run_fins += 1
                    ledger.finished.add(msg.id)
                    ledger.finished_since_rewind.add(msg.id)
                    await client.send(commands.fin(msg.id))
        except (EOFError, trio.BrokenResourceError, trio.TooSlowError, OSError):
            return

    async def watch_journal():
        seen = None
        while not dead.is_set():
            try:
                st = os.stat(journal)
                now = (st.st_ino, st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                now = None
            if now != seen:
                seen = now
                journal_changes.append(ledger.fins_sent)
            await trio.sleep(0.002)

    def rewind():
        rewind_state["sent"] = True
        try:
            answer = httpx.post(f"{http}/channel/rewind",
                                params={"topic": "kill", "channel": "c", "offset": "0"},
                                timeout=DEADLINE)
        except httpx.HTTPError:
            return
        if answer.status_code == 200:
            ledger.finished_since_rewind.clear()  # FINs from here on count
            rewind_state["answered"] = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_journal)
        nursery.start_soon(consumer)
        if phase == "consume":
            await publisher(rng.randrange(200, 1500))
            target = rng.randrange(1, max(run_acked, 2))
            await until(lambda: run_fins >= target or channel_empty(daemon, "kill", "c"))
        else:
            nursery.start_soon(publisher, 10**9)
            if phase == "publish":
                target = rng.randrange(10, 2000)
                await until(lambda: run_acked >= target, what="publishes")
            elif phase == "rewind":
                target = rng.randrange(10, 600)
                await until(lambda: run_fins >= target, what="FINs")
                nursery.start_soon(trio.to_thread.run_sync, rewind)
                extra = rng.randrange(0, 100)
                await until(lambda: rewind_state["sent"] and run_fins >= target + extra,
                            what="FINs after the rewind")
            else:  # removal: right after the log removed a segment
                before = daemon.output().count(": removed ")
                wanted = before + rng.randrange(1, 3)
                await until(lambda: daemon.output().count(": removed ") >= wanted,
                            what="a segment removed")
        daemon.process.send_signal(signal.SIGKILL)
        await trio.to_thread.run_sync(daemon.process.wait, DEADLINE)
        dead.set()
        nursery.cancel_scope.cancel()
    return journal_changes, rewind_state["sent"] and not rewind_state["answered"], run_fins


def check_cursor(data: Path, scratch: Path, ledger: Ledger, journal_changes: list[int],
                 rewind_pending: bool, fins_at_kill: int) -> None:
    """The cursor nsqd will start with is never ahead of what was FINished, and behind it
    by no more than the FINs sent since the third-last journal write the test saw (the last
    write may be torn, and the one before may have been under way when they were sent)."""
    ids = stored_ids(data, "kill", scratch)
    state = cursorfile.load(data / "topics" / "kill" / f"c{cursorfile.SUFFIX}")
    if state is None or not ids:
        return
    start = min(ids)

    def done(offset):
        return offset < max(state.mark_delete, start) or any(
            a <= offset < b for a, b in state.ranges)

    ahead = [o for o, i in ids.items() if done(o) and i not in ledger.finished]
    assert not ahead, f"the cursor marks offsets done that were never FINished: {ahead[:10]}"
    if rewind_pending:
        return  # either cursor, whole: the old one or the rewound one
    lag = sum(1 for o, i in ids.items() if i in ledger.finished_since_rewind and not done(o))
    ledger.lags.append(lag)
    allowed = fins_at_kill - (journal_changes[-3] if len(journal_changes) >= 3 else 0)
    assert lag <= allowed, (lag, allowed, journal_changes[-5:], fins_at_kill)


async def test_kill_9_at_random_points_loses_nothing_and_cursors_keep_up(run_daemon, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--data-path={data}", "--sync-every=1", "--max-bytes-per-file=8000",
            "--msg-timeout=60s"]
    # Segments are removed on the --sync-timeout tick: short for the removal phase; long
    # otherwise, so that only --sync-every=1 (a write as soon as a FIN comes) keeps cursors
    # up to date there.
    ticks = {"removal": "--sync-timeout=200ms"}
    journal = data / "topics" / "kill" / f"c{cursorfile.SUFFIX}"
    ledger = Ledger()
    phases = [PHASES[run % len(PHASES)] if run < len(PHASES) else rng.choice(PHASES)
              for run in range(KILLS)]
    daemon = run_daemon("nsqd", *args, ticks.get(phases[0], "--sync-timeout=60s"))
    create_channel(daemon, "kill", "c")
    for run, phase in enumerate(phases):
        changes, rewind_pending, run_fins = await one_run(daemon, ledger, phase, rng, journal)
        try:
            check_cursor(data, tmp_path / "scratch", ledger, changes, rewind_pending,
                         ledger.fins_sent)
            if phase != "removal" and run_fins >= 300:
                assert len(changes) >= 2, "no cursor write in the run, with --sync-every=1"
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, run {run} ({phase}): {exc}") from None
        following = phases[run + 1] if run + 1 < len(phases) else "last"
        daemon = run_daemon("nsqd", *args, ticks.get(following, "--sync-timeout=60s"))
    # the last start: everything acknowledged is delivered
    ledger.delivered.update(await drain(daemon, "kill", "c", rdy=200))
    lost = ledger.acknowledged - ledger.delivered
    assert not lost, f"seed {seed}: {len(lost)} acknowledged lost, e.g. {sorted(lost)[:5]}"
    assert ledger.delivered <= ledger.acknowledged | {
        b"k-%07d" % i for i in range(ledger.next_body)}
    print(f"seed {seed}: {KILLS} kills ({', '.join(phases)}), {len(ledger.acknowledged)} "
          f"acknowledged, {ledger.fins_sent} FINs; FINs a cursor lagged at each kill: "
          f"{ledger.lags}")


# -- one copy --------------------------------------------------------------------------------


def disk_usage(path: Path) -> int:
    """Bytes the files under ``path`` take on disk (their blocks, as du counts)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


async def test_four_channels_keep_one_copy_on_disk(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}", "--mem-queue-size=0")
    for name in "abcd":
        create_channel(daemon, "one", name)
    bodies = [(b"%05d-" % i).ljust(1024, b"x") for i in range(10_000)]
    await publish(daemon, "one", bodies)
    for name in "abcd":
        assert channel_stats(daemon, "one", name)["depth"] == 10_000
    running = disk_usage(data)
    assert daemon.stop() == 0
    stopped = disk_usage(data)
    print(f"10,000 x 1 KB, 4 channels: {running / 1e6:.2f} MB running, {stopped / 1e6:.2f} MB "
          "stopped")
    assert running <= 15_000_000 and stopped <= 15_000_000, (running, stopped)
    daemon = run_daemon("nsqd", f"--data-path={data}", "--mem-queue-size=0")
    for name in "abcd":
        assert sorted(await drain(daemon, "one", name)) == bodies


async def test_channel_empty_frees_the_space_without_waiting_for_the_tick(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}", "--mem-queue-size=0",
                        "--max-bytes-per-file=20000", "--sync-timeout=1h")
    create_channel(daemon, "e", "c")
    await publish(daemon, "e", [b"e-%04d-" % i + b"x" * 100 for i in range(1000)], batch=10)
    assert len(list((data / "topics" / "e").glob("*.log"))) >= 5
    post(f"http://{daemon.http_address}/channel/empty", params={"topic": "e", "channel": "c"})
    await until(lambda: len(list((data / "topics" / "e").glob("*.log"))) <= 1,
                what="the segments removed after /channel/empty")
    assert topic_read(daemon, "e")["earliest_offset"] == 1000
