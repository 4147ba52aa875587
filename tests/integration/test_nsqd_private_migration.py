"""A data directory written by the release before internal logs (``data/private_queues_v1``,
made by ``data/make_private_queues_v1.py`` with that release's nsqd): its channels' dead
letters and own queue, in go-diskqueue files in the data path, are moved into the channels'
internal logs at start, and every message is kept: the dead letters counted, peeked and
respawned, the respawned message delivered, the log's messages delivered, in every storage
mode; the old files gone; a restart (clean, or kill -9) changes nothing."""

import shutil
import signal
from pathlib import Path

import httpx
import pytest
from nsq_testing import DEADLINE

DATA = Path(__file__).parent / "data" / "private_queues_v1"
MODES = pytest.mark.parametrize("mode", [[], ["--mem-queue-size=0"], ["--sync-every=1"]],
                                ids=["default", "mem-queue-size=0", "sync-every=1"])


def get(nsqd, path, **params):
    return httpx.get(f"http://{nsqd.http_address}{path}", params=params, timeout=DEADLINE)


def post(nsqd, path, **params):
    return httpx.post(f"http://{nsqd.http_address}{path}", params=params, timeout=DEADLINE)


def dead(nsqd, topic, channel):
    r = get(nsqd, "/channel/deadletter", topic=topic, channel=channel, n="10")
    assert r.status_code == 200, r.text
    return [m["text"] for m in r.json()["messages"]]


def counts(nsqd):
    out = {}
    for topic in get(nsqd, "/stats", format="json").json()["topics"]:
        for channel in topic["channels"]:
            out[f"{topic['topic_name']}:{channel['channel_name']}"] = (
                channel["depth"], channel["dead_letter_count"])
    return out


def consume(nsqd, topic, channel):
    """Every message waiting, pulled and finished: their texts in order."""
    r = post(nsqd, "/channel/consume", topic=topic, channel=channel, n="100")
    msgs = r.json()["messages"]
    for msg in msgs:
        assert post(nsqd, "/message/fin", topic=topic, channel=channel,
                    id=msg["id"]).status_code == 200
    return [m["text"] for m in msgs]


@MODES
@pytest.mark.parametrize("restart", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_the_previous_releases_private_queues_keep_every_message(run_daemon, tmp_path, mode,
                                                                 restart):
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    args = [f"--data-path={data}", *mode]
    nsqd = run_daemon("nsqd", *args)
    # the old files are gone, their messages in the channels' logs
    assert not [p.name for p in data.iterdir() if ".diskqueue." in p.name]
    assert sorted(p.name for p in (data / "topics" / "orders").iterdir() if p.is_dir()) == [
        "a#dead", "a#own", "b#dead"]
    assert "orders:a#dead: 2 messages moved" in nsqd.output()
    # a: m1 respawned (own queue), m2 m3 dead, m4 finished, m5 m6 waiting in the log
    assert counts(nsqd) == {"orders:a": (3, 2), "orders:b": (4, 2), "other:c": (0, 1)}
    assert dead(nsqd, "orders", "a") == ["m2", "m3"]
    assert dead(nsqd, "orders", "b") == ["m1", "m2"]
    assert dead(nsqd, "other", "c") == ["x1"]

    nsqd.stop(restart)  # whatever the stop, the next start finds the same
    nsqd = run_daemon("nsqd", *args)
    assert "moved from its go-diskqueue files" not in nsqd.output()
    assert counts(nsqd) == {"orders:a": (3, 2), "orders:b": (4, 2), "other:c": (0, 1)}
    assert dead(nsqd, "orders", "a") == ["m2", "m3"]
    assert consume(nsqd, "orders", "a") == ["m1", "m5", "m6"]  # the respawned one first
    assert post(nsqd, "/channel/deadletter/respawn", topic="orders", channel="b",
                n="1").json() == {"count": 1}
    assert consume(nsqd, "orders", "b") == ["m1", "m3", "m4", "m5", "m6"]
    assert post(nsqd, "/channel/deadletter/empty", topic="other",
                channel="c").json() == {"count": 1}
    assert counts(nsqd) == {"orders:a": (0, 2), "orders:b": (0, 1), "other:c": (0, 0)}
    assert nsqd.stop() == 0

    nsqd = run_daemon("nsqd", *args)
    assert counts(nsqd) == {"orders:a": (0, 2), "orders:b": (0, 1), "other:c": (0, 0)}
    assert dead(nsqd, "orders", "a") == ["m2", "m3"]
    assert dead(nsqd, "orders", "b") == ["m2"]
