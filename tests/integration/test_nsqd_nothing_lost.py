"""Orders of operations the storage once lost acknowledged messages in (docs/design/storage.md),
each on real processes, with kill -9 where it takes one: a topic with no channel yet, a
channel created and killed at once, a missing or damaged cursor journal, a rewind past the
end (and files claiming a position past it)."""

from __future__ import annotations

import json
import os
import re
import signal

import httpx
import pytest
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient
from nsqd import cursorfile, metadata

from ._storage_client import channel_stats, create_channel, drain, publish, topic_stats

#: The storage modes: memory queue first (NSQ's default), every message written before its OK,
#: every message fsynced before its OK.
MODES = {"default": (), "mem0": ("--mem-queue-size=0",), "sync1": ("--sync-every=1",)}
#: Those where a kill -9 loses nothing acknowledged (the default's memory queue is lost, as
#: NSQ's is).
WRITTEN_MODES = ("mem0", "sync1")


def post(daemon, path: str, **params: object) -> httpx.Response:
    return httpx.post(f"http://{daemon.http_address}{path}", params=params, timeout=DEADLINE)


def bodies(prefix: str, n: int) -> list[bytes]:
    return [b"%s-%d" % (prefix.encode(), i) for i in range(n)]


# -- 1. a topic with no channel yet ------------------------------------------------------------


@pytest.mark.parametrize("mode", WRITTEN_MODES)
async def test_a_topic_without_channels_keeps_what_it_held_across_a_kill_9(run_daemon,
                                                                          tmp_path, mode):
    """Producers before consumers: what the topic held for its first channel survives a
    kill -9 (its hold is on disk with its first record, never the offsets reserved)."""
    data = tmp_path / "data"
    data.mkdir()
    args = (f"--data-path={data}", *MODES[mode])
    daemon = run_daemon("nsqd", *args)
    assert post(daemon, "/topic/create", topic="tf").status_code == 200
    sent = bodies("tf", 5)
    for body in sent:
        answer = httpx.post(f"http://{daemon.http_address}/pub", params={"topic": "tf"},
                            content=body, timeout=DEADLINE)
        assert answer.status_code == 200, answer.text
    assert topic_stats(daemon, "tf")["depth"] == 5
    daemon.kill()

    daemon = run_daemon("nsqd", *args)
    assert topic_stats(daemon, "tf")["depth"] == 5
    create_channel(daemon, "tf", "c")
    assert sorted(await drain(daemon, "tf", "c")) == sorted(sent)
    # and once more after another kill: the first channel's journal holds it now (what it
    # finished may come again: at least once)
    await publish(daemon, "tf", bodies("more", 3))
    daemon.kill()
    daemon = run_daemon("nsqd", *args)
    assert set(bodies("more", 3)) <= set(await drain(daemon, "tf", "c"))


def listed(data) -> dict[str, set[str]]:
    """The topics nsqd.dat lists, with their channels."""
    path = data / metadata.FILE_NAME
    if not path.exists():
        return {}
    topics, _ = metadata.load(path)
    return {t.name: {c.name for c in t.channels} for t in topics}


@pytest.mark.parametrize("mode", MODES)
async def test_a_topic_is_listed_when_its_creation_is_answered(run_daemon, tmp_path, mode):
    """The moment /topic/create is answered (and, with --sync-every=1, a publish that made the
    topic), nsqd.dat lists the topic: a kill -9 right then finds it, and what was acknowledged
    to it (a model-based crash run found the publish's topic gone after a kill under load)."""
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}", *MODES[mode])
    for i in range(10):
        assert post(daemon, "/topic/create", topic=f"made{i}").status_code == 200
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            names = listed(data)
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
        assert f"made{i}" in names
    if mode != "sync1":
        return
    for i in range(10):
        await publish(daemon, f"published{i}", [b"x"])
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            names = listed(data)
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
        assert f"published{i}" in names
    daemon.kill()
    daemon = run_daemon("nsqd", f"--data-path={data}", *MODES[mode])
    for i in range(10):
        assert topic_stats(daemon, f"published{i}")["depth"] == 1


async def test_a_publish_that_cannot_list_its_new_topic_is_refused(run_daemon, tmp_path):
    """With --sync-every=1, a publish that made a topic nsqd.dat cannot list (here a directory
    stands where it is written) is refused, not acknowledged and then lost to a kill -9."""
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}", "--sync-every=1")
    path = data / metadata.FILE_NAME
    path.unlink(missing_ok=True)
    path.mkdir()
    answer = httpx.post(f"http://{daemon.http_address}/pub", params={"topic": "unlisted"},
                        content=b"x", timeout=DEADLINE)
    assert answer.status_code == 500, answer.text
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.send(commands.pub("unlisted2", b"y"))
        assert (await client.error()).startswith(b"E_PUB_FAILED")
    path.rmdir()
    await publish(daemon, "unlisted", [b"z"])  # nsqd.dat written again: acknowledged
    daemon.kill()
    daemon = run_daemon("nsqd", f"--data-path={data}", "--sync-every=1")
    assert topic_stats(daemon, "unlisted")["depth"] >= 1


# -- 2. /channel/create answers once the channel is on disk ---------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_channel_is_on_disk_when_its_creation_is_answered(run_daemon, tmp_path, mode):
    """The moment /channel/create (or a SUB) is answered, the channel's cursor journal is on
    disk: the process stopped right then (SIGSTOP, as a kill -9 would find it) has it, and a
    kill -9 then loses none of the messages the topic held."""
    data = tmp_path / "data"
    data.mkdir()
    args = (f"--data-path={data}", *MODES[mode])
    daemon = run_daemon("nsqd", *args)
    create_channel(daemon, "t", "first")
    held = bodies("held", 200)
    await publish(daemon, "t", held)
    directory = data / "topics" / "t"
    names = [f"c{i}" for i in range(10)]
    for name in names:
        create_channel(daemon, "t", name, start="earliest")
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            state = cursorfile.load(directory / f"{name}{cursorfile.SUFFIX}")
            names_listed = listed(data).get("t", set())
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
        assert state is not None and state.mark_delete == 0, name
        assert name in names_listed, name  # and nsqd.dat lists it
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.subscribe("t", "by-sub", 0)  # answered OK: on disk too
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            state = cursorfile.load(directory / f"by-sub{cursorfile.SUFFIX}")
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
        assert state is not None
        assert "by-sub" in listed(data)["t"]
    if mode not in WRITTEN_MODES:
        return  # (a kill -9 loses the memory queue there)
    daemon.kill()
    daemon = run_daemon("nsqd", *args)
    for name in names:
        assert sorted(await drain(daemon, "t", name)) == sorted(held), name


# -- 3. a missing or damaged cursor journal ----------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_missing_or_damaged_journal_delivers_again_never_skips(run_daemon, tmp_path,
                                                                      mode):
    """A channel whose journal is gone, or holds no whole entry, starts at the earliest offset
    stored (its backlog delivered again), and the log says so, naming the file."""
    data = tmp_path / "data"
    data.mkdir()
    args = (f"--data-path={data}", *MODES[mode])
    daemon = run_daemon("nsqd", *args)
    for name in ("gone", "damaged", "whole"):
        create_channel(daemon, "j", name)
    sent = bodies("j", 300)
    await publish(daemon, "j", sent)
    assert daemon.stop() == 0
    daemon = run_daemon("nsqd", *args)
    assert daemon.stop() == 0  # a run's first entry rewrites its journal: one entry each

    directory = data / "topics" / "j"
    (directory / f"gone{cursorfile.SUFFIX}").unlink()
    damaged = directory / f"damaged{cursorfile.SUFFIX}"
    raw = bytearray(damaged.read_bytes())
    raw[-1] ^= 0x40  # one flipped byte: its only entry's crc fails
    damaged.write_bytes(bytes(raw))

    daemon = run_daemon("nsqd", *args)
    for name in ("gone", "damaged", "whole"):
        assert channel_stats(daemon, "j", name)["depth"] == 300, name
        assert sorted(await drain(daemon, "j", name)) == sorted(sent), name
    log = daemon.output()
    missing = [line for line in log.splitlines() if "ERROR" in line and "gone.cursor" in line]
    assert missing and "is missing" in missing[0], log
    unreadable = [line for line in log.splitlines()
                  if "ERROR" in line and "damaged.cursor" in line]
    assert unreadable and "no whole entry" in unreadable[0], log
    assert not [line for line in log.splitlines() if "ERROR" in line and "whole.cursor" in line]


# -- 4. a rewind past the end ----------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_rewind_past_the_end_is_refused_and_nothing_moves_the_end(run_daemon,
                                                                         tmp_path, mode):
    data = tmp_path / "data"
    data.mkdir()
    args = (f"--data-path={data}", *MODES[mode])
    daemon = run_daemon("nsqd", *args)
    create_channel(daemon, "r", "c")
    await publish(daemon, "r", bodies("old", 5))
    assert len(await drain(daemon, "r", "c")) == 5

    for offset in ("6", "1000000000000", "9223372036854775807"):
        answer = post(daemon, "/channel/rewind", topic="r", channel="c", offset=offset)
        assert answer.status_code == 400, answer.text
        # (the earliest is 0, or 5 once what every channel finished has gone)
        assert re.fullmatch(f"E_INVALID rewind offset {offset} out of range [05]-5",
                            answer.json()["message"]), answer.text
    answer = post(daemon, "/channel/rewind", topic="r", channel="c", timestamp="99999999999")
    assert answer.status_code == 400
    assert answer.json()["message"].startswith(
        "E_INVALID rewind timestamp 99999999999 out of range 0-")
    answer = post(daemon, "/channel/rewind", topic="r", channel="c", offset="5")  # the end
    assert (answer.status_code, answer.json()) == (200, {"offset": 5})
    new = bodies("new", 5)
    await publish(daemon, "r", new)
    assert sorted(await drain(daemon, "r", "c")) == sorted(new)
    assert daemon.stop() == 0

    # files claiming a position far past the end: the end stays, with an ERROR for each
    directory = data / "topics" / "r"
    journal = cursorfile.CursorJournal(directory / f"c{cursorfile.SUFFIX}")
    journal.append(cursorfile.CursorState((1 << 63) - 1), sync=True)
    journal.close()
    offsets = directory / "offsets"
    offsets.write_text(json.dumps({"next": 9223372036855824384}))
    metadata = data / "nsqd.dat"
    doc = json.loads(metadata.read_text())
    doc["topics"][0]["next_offset"] = (1 << 63) - 1
    metadata.write_text(json.dumps(doc))
    daemon = run_daemon("nsqd", *args)
    log = daemon.output()
    assert "ERROR" in log and "c.cursor is past the log's end" in log, log
    assert "next 9223372036855824384 is past the largest offset" in log, log
    assert f"next_offset {(1 << 63) - 1} is past the largest offset" in log, log
    last = bodies("last", 5)
    await publish(daemon, "r", last)
    assert sorted(await drain(daemon, "r", "c")) == sorted(last)
    read = httpx.get(f"http://{daemon.http_address}/topic/read", timeout=DEADLINE,
                     params={"topic": "r", "offset": "0", "n": "1"}).json()
    assert read["latest_offset"] < 1 << 40, read
    assert daemon.stop() == 0
    assert "FATAL" not in daemon.output()
    assert json.loads(offsets.read_text())["next"] < 1 << 40
    assert cursorfile.load(directory / f"c{cursorfile.SUFFIX}").mark_delete < 1 << 40


# -- the counts after a crash ------------------------------------------------------------------


async def test_the_offsets_a_kill_9_reserved_are_counted_nowhere(run_daemon, tmp_path):
    """After a kill -9 the offsets reserved past what was stored (a crash's gap, about a
    million) are passed over by every channel: no figure of /stats counts them (the channel's
    backend_depth and message_count did)."""
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}")
    assert post(daemon, "/topic/create", topic="gap").status_code == 200
    create_channel(daemon, "gap", "c")
    await publish(daemon, "gap", bodies("kept", 3))
    daemon.stop(signal.SIGTERM)
    daemon = run_daemon("nsqd", f"--data-path={data}")
    await publish(daemon, "gap", bodies("tail", 5))  # the memory queue: a kill -9 may lose them
    daemon.kill()

    daemon = run_daemon("nsqd", f"--data-path={data}")
    channel = channel_stats(daemon, "gap", "c")
    assert 3 <= channel["depth"] <= 8
    assert channel["message_count"] == channel["depth"]
    assert channel["backend_depth"] <= channel["depth"]
    assert (await drain(daemon, "gap", "c"))[:3] == bodies("kept", 3)
