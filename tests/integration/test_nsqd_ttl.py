"""Message TTL on a real nsqd: expired messages are never delivered, from memory or disk, and a
topic's default TTL is kept across a restart and applies to TCP publishes too."""

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


@pytest.mark.parametrize("mem_queue_size", ["10000", "0"], ids=["memory", "disk"])
def test_an_expired_message_is_never_delivered_and_is_counted(run_daemon, mem_queue_size):
    nsqd = run_daemon("nsqd", f"--mem-queue-size={mem_queue_size}")
    assert post(nsqd, "/topic/create", topic="ttl").status_code == 200
    assert post(nsqd, "/channel/create", topic="ttl", channel="c").status_code == 200
    assert post(nsqd, "/channel/pause", topic="ttl", channel="c").status_code == 200
    assert post(nsqd, "/pub", b"short-lived", topic="ttl", ttl="1").text == "OK"
    published = time.time_ns()
    assert post(nsqd, "/mpub", b"a\nb", topic="ttl", ttl="3600").text == "OK"
    wait_until(lambda: past(published + 1_000_000_000), what="the first message's TTL to pass")
    assert post(nsqd, "/channel/unpause", topic="ttl", channel="c").status_code == 200
    r = post(nsqd, "/channel/consume", topic="ttl", channel="c", n="10", wait=str(DEADLINE))
    assert [m["text"] for m in r.json()["messages"]] == ["a", "b"]  # the expired one is gone
    stats = channel_stats(nsqd, "ttl")
    assert (stats["expired_count"], stats["depth"], stats["in_flight_count"]) == (1, 0, 2)


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


def test_expired_messages_go_to_the_dead_letters_when_the_channel_says_so(run_daemon):
    nsqd = run_daemon("nsqd")
    assert post(nsqd, "/topic/create", topic="ttl_dead").status_code == 200
    assert post(nsqd, "/channel/create", topic="ttl_dead", channel="c",
                dead_letter_expired="true").status_code == 200
    assert post(nsqd, "/channel/pause", topic="ttl_dead", channel="c").status_code == 200
    assert post(nsqd, "/pub", b"stale", topic="ttl_dead", ttl="1").text == "OK"
    published = time.time_ns()
    wait_until(lambda: past(published + 1_000_000_000), what="the message's TTL to pass")
    assert post(nsqd, "/channel/unpause", topic="ttl_dead", channel="c").status_code == 200
    r = post(nsqd, "/channel/consume", topic="ttl_dead", channel="c")
    assert r.json() == {"messages": []}
    stats = wait_until(lambda: (s := channel_stats(nsqd, "ttl_dead"))["dead_letter_count"] and s,
                       what="the expired message among the dead letters")
    assert (stats["expired_count"], stats["depth"]) == (1, 0)
    r = httpx.get(f"http://{nsqd.http_address}/channel/deadletter",
                  params={"topic": "ttl_dead", "channel": "c"}, timeout=DEADLINE)
    assert [m["text"] for m in r.json()["messages"]] == ["stale"]
    r = post(nsqd, "/channel/update", topic="ttl_dead", channel="c", dead_letter_expired="maybe")
    assert (r.status_code, r.json()) == (400, {"message": "INVALID_DEAD_LETTER_EXPIRED"})
