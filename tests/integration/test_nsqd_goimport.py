"""nsqd started on data directories in Go's layout (packages/nsqd/tests/data, see its README):
files written by Go's nsqd 1.3.0 itself (a clean shutdown; a kill -9), and by this nsqd before
its topics became logs (326d0d9: records with an expiry, lmstfy jobs, deferred side files).
Each channel gets exactly the messages Go's nsqd (or that version) delivers from the same
files, attempts kept; restarted, nothing comes again."""

import base64
import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
import trio
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient, until
from nsqd import gofiles

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "packages" / "nsqd" / "tests" / "data"


def copy_fixture(name: str, tmp_path: Path) -> Path:
    data = tmp_path / name
    shutil.copytree(DATA / name, data)
    return data


def expected_of(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def stats(daemon) -> dict:
    answer = httpx.get(f"http://{daemon.http_address}/stats", params={"format": "json"},
                       timeout=DEADLINE)
    return {f"{t['topic_name']}:{c['channel_name']}": c
            for t in answer.json()["topics"] or [] for c in t["channels"]}


def post(daemon, path: str, **params: str) -> None:
    answer = httpx.post(f"http://{daemon.http_address}{path}", params=params, timeout=DEADLINE)
    assert answer.status_code == 200, answer.text


async def take_all(daemon, topic: str, channel: str, count: int) -> list:
    """``count`` messages of ``topic:channel``, each FINished; then the channel holds nothing
    more but what is deferred."""
    got = []
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.subscribe(topic, channel, max(count, 1))
        with trio.fail_after(DEADLINE):
            while len(got) < count:
                msg = await client.message()
                got.append(msg)
                await client.send(commands.fin(msg.id))
        key = f"{topic}:{channel}"
        await until(lambda: stats(daemon)[key]["in_flight_count"] == 0,
                    what=f"every FIN of {key} taken")
    assert stats(daemon)[key]["depth"] == 0, "more messages than the other nsqd delivered"
    return got


def as_go_delivered(messages: list) -> dict[bytes, tuple[bytes, int]]:
    """id -> (body, attempts) of messages as received; an id twice is a failure here."""
    out = {m.id: (m.body, m.attempts) for m in messages}
    assert len(out) == len(messages), "a message delivered twice"
    return out


def from_json(entries: list[dict]) -> dict[bytes, tuple[bytes, int]]:
    """The same of a manifest (Go's nsqd delivers a message twice after its kill -9: once is
    what is expected of us)."""
    return {e["id"].encode(): (base64.b64decode(e["body"]), e["attempts"]) for e in entries}


def old_files(data: Path) -> list[str]:
    return sorted(name for name in os.listdir(data) if gofiles.is_queue_file(name))


@pytest.mark.parametrize("name", ["go-1.3.0-clean", "go-1.3.0-killed"])
async def test_go_data_directory_delivered_once(run_daemon, tmp_path, name):
    data = copy_fixture(name, tmp_path)
    expected = expected_of(name)
    nsqd = run_daemon("nsqd", f"--data-path={data}")
    stats(nsqd)  # answered once the broker has started: the import is done
    assert old_files(data) == []
    assert "GOIMPORT: " in nsqd.output()
    for topic in json.loads((data / "nsqd.dat").read_text())["topics"]:
        if topic["paused"]:
            post(nsqd, "/topic/unpause", topic=topic["name"])
        for channel in topic["channels"] or []:
            if channel["paused"]:
                post(nsqd, "/channel/unpause", topic=topic["name"], channel=channel["name"])
    for key, entries in expected.items():
        topic, channel = key.split(":")
        wanted = from_json(entries)
        got = await take_all(nsqd, topic, channel, len(wanted))
        assert as_go_delivered(got) == wanted, key
    nsqd.stop()

    again = run_daemon("nsqd", f"--data-path={data}")
    assert "GOIMPORT" not in again.output()
    now = stats(again)
    assert sorted(now) == sorted(expected)
    for key, channel in now.items():
        assert (channel["depth"], channel["deferred_count"]) == (0, 0), key


async def test_earlier_version_data_directory(run_daemon, tmp_path):
    """An earlier version's files: plain and extended records (an expiry, lmstfy jobs),
    deferred side files of a channel and of a topic without channels; what was due is
    delivered, what is not stays deferred with its due time, across restarts."""
    name = "ours-326d0d9"
    data = copy_fixture(name, tmp_path)
    expected = expected_of(name)
    nsqd = run_daemon("nsqd", f"--data-path={data}")
    stats(nsqd)  # answered once the broker has started: the import is done
    assert old_files(data) == []
    for key, entries in expected["delivered"].items():
        topic, channel = key.split(":")
        wanted = from_json(entries)
        got = await take_all(nsqd, topic, channel, len(wanted))
        assert as_go_delivered(got) == wanted, key
    deferred = {key: c["deferred_count"] for key, c in stats(nsqd).items()}
    assert deferred == expected["deferred"]
    nsqd.stop()

    again = run_daemon("nsqd", f"--data-path={data}")
    assert "GOIMPORT" not in again.output()
    for key in expected["delivered"]:
        # a subscriber makes the channel take from its own queue what is deferred there
        async with await WireClient.connect(again.tcp_address) as client:
            await client.subscribe(*key.split(":"), 10)
            await until(lambda key=key: stats(again)[key]["deferred_count"]
                        == expected["deferred"][key], what=f"{key} deferred again")
        channel = stats(again)[key]
        assert (channel["depth"], channel["in_flight_count"]) == (0, 0), key
