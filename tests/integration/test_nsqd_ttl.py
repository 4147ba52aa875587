"""Message TTL on a real nsqd: a topic's default TTL is kept across a restart and applies to
TCP publishes too; bad TTLs are refused. (Expiry itself, from memory and from disk, runs on
the virtual clock: packages/nsqd/tests/test_virtual_time.py.)"""

import time

import httpx
import pytest
import trio
from nsq_testing import DEADLINE, WireClient, free_port, wait_until


def post(daemon, path, content=b"", **params):
    r = httpx.post(f"http://{daemon.http_address}{path}", params=params, content=content,
                   timeout=DEADLINE + 10)
    return r


def channel_stats(daemon, topic):
    r = httpx.get(f"http://{daemon.http_address}/stats",
                  params={"format": "json", "topic": topic}, timeout=DEADLINE)
    (t,) = r.json()["topics"]
    return t["channels"][0]


def past(ns: int) -> bool:
    return time.time_ns() > ns


def test_a_topic_default_ttl_survives_a_restart_and_applies_to_tcp_publishes(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--data-path={data}", f"--tcp-address=127.0.0.1:{free_port()}",
            f"--http-address=127.0.0.1:{free_port()}"]
    nsqd = run_daemon("nsqd", *args)
    assert post(nsqd, "/topic/create", topic="ttl_default", message_ttl="1").status_code == 200
    assert nsqd.stop() == 0
    assert b'"message_ttl":1' in (data / "nsqd.dat").read_bytes()
    nsqd = run_daemon("nsqd", *args)
    assert post(nsqd, "/channel/create", topic="ttl_default", channel="c").status_code == 200
    assert post(nsqd, "/channel/pause", topic="ttl_default", channel="c").status_code == 200

    async def publish():
        async with await WireClient.connect(nsqd.tcp_address) as client:
            await client.pub("ttl_default", b"over tcp")

    trio.run(publish)
    published = time.time_ns()
    wait_until(lambda: past(published + 1_000_000_000), what="the topic's TTL to pass")
    assert post(nsqd, "/pub", b"marker", topic="ttl_default", ttl="3600").text == "OK"
    assert post(nsqd, "/channel/unpause", topic="ttl_default", channel="c").status_code == 200
    r = post(nsqd, "/channel/consume", topic="ttl_default", channel="c", n="10",
             wait=str(DEADLINE))
    assert [m["text"] for m in r.json()["messages"]] == ["marker"]
    assert channel_stats(nsqd, "ttl_default")["expired_count"] == 1


@pytest.mark.parametrize(("path", "params"), [
    ("/pub", {"topic": "t", "ttl": "-1"}),
    ("/pub", {"topic": "t", "ttl": "1.5"}),
    ("/mpub", {"topic": "t", "ttl": "x"}),
    ("/mpub", {"topic": "t", "ttl": str(2**32)}),
    ("/pub", {"topic": "t", "ttl": "\u00b2"}),  # a digit to str.isdigit, not to int()
    ("/topic/create", {"topic": "t", "message_ttl": "soon"}),
])
def test_a_bad_ttl_is_refused(nsqd, path, params):
    r = post(nsqd, path, b"x", **params)
    assert (r.status_code, r.json()) == (400, {"message": "INVALID_TTL"})


def test_dead_letter_expired_is_a_channel_setting(run_daemon):
    """Its effect runs on the virtual clock (packages/nsqd/tests/test_virtual_time.py)."""
    nsqd = run_daemon("nsqd")
    assert post(nsqd, "/topic/create", topic="ttl_dead").status_code == 200
    assert post(nsqd, "/channel/create", topic="ttl_dead", channel="c",
                dead_letter_expired="true").status_code == 200
    r = post(nsqd, "/channel/update", topic="ttl_dead", channel="c", dead_letter_expired="maybe")
    assert (r.status_code, r.json()) == (400, {"message": "INVALID_DEAD_LETTER_EXPIRED"})
    assert post(nsqd, "/channel/update", topic="ttl_dead", channel="c",
                dead_letter_expired="false").status_code == 200
