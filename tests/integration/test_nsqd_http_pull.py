"""Consuming over HTTP from a real nsqd: /channel/consume, /message/fin, /req, /touch, shared
with TCP consumers on the same channel."""

import json
import subprocess
import sys
import textwrap

import httpx
import pytest
import trio
from nsq_testing import DEADLINE, until


@pytest.fixture
async def http(nsqd):
    async with httpx.AsyncClient(base_url=f"http://{nsqd.http_address}",
                                 timeout=DEADLINE + 30) as client:
        yield client


async def make_channel(http, topic, channel="c"):
    assert (await http.post("/topic/create", params={"topic": topic})).status_code == 200
    assert (await http.post("/channel/create", params={"topic": topic, "channel": channel})
            ).status_code == 200


async def consume(http, topic, **params):
    r = await http.post("/channel/consume", params={"topic": topic, "channel": "c", **params})
    assert r.status_code == 200, r.text
    return r.json()["messages"]


async def channel_stats(http, topic):
    r = await http.get("/stats", params={"format": "json", "topic": topic})
    (t,) = r.json()["topics"]
    return t["channels"][0]


async def test_consume_then_fin(http):
    await make_channel(http, "pull")
    await http.post("/mpub", params={"topic": "pull"}, content=b"one\ntwo\nthree\n\xff\xfe")
    msgs = await consume(http, "pull", n=10)
    assert [m.get("text") for m in msgs] == ["one", "two", "three", None]  # not UTF-8: no text
    assert msgs[3]["body"] == "//4=" and msgs[0]["body"] == "b25l"
    assert all(m["attempts"] == 1 and len(m["id"]) == 16 and m["timestamp"] > 0 for m in msgs)
    stats = await channel_stats(http, "pull")
    assert (stats["depth"], stats["in_flight_count"]) == (0, 4)
    ids = [m["id"] for m in msgs]
    r = await http.post("/message/fin", params={"topic": "pull", "channel": "c", "id": ids[0]})
    assert r.status_code == 200
    r = await http.post(f"/message/fin?topic=pull&channel=c&id={ids[1]}",  # a list in the body
                        content="\n".join(ids[2:]).encode())
    assert r.status_code == 200
    stats = await channel_stats(http, "pull")
    assert (stats["in_flight_count"], stats["message_count"]) == (0, 4)
    r = await http.post("/message/fin", params={"topic": "pull", "channel": "c", "id": ids[0]})
    assert (r.status_code, r.json()) == (404, {"message": "MESSAGE_NOT_IN_FLIGHT"})


async def test_a_waiting_consume_gets_what_is_published_meanwhile(http):
    await make_channel(http, "pull_wait")
    got = []

    async def waiting():
        got.extend(await consume(http, "pull_wait", wait=DEADLINE))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting)
        await http.post("/pub", params={"topic": "pull_wait"}, content=b"late")
    assert [m["text"] for m in got] == ["late"]
    assert await consume(http, "pull_wait") == []  # nothing waiting: answered at once


async def test_an_unfinished_message_comes_back_after_its_ttr(http):
    await make_channel(http, "pull_ttr")
    await http.post("/pub", params={"topic": "pull_ttr"}, content=b"x")
    (first,) = await consume(http, "pull_ttr", ttr=1)
    (again,) = await consume(http, "pull_ttr", wait=DEADLINE)
    assert (again["id"], again["attempts"]) == (first["id"], 2)
    assert (await channel_stats(http, "pull_ttr"))["timeout_count"] == 1


async def test_req_and_touch(http):
    await make_channel(http, "pull_req")
    await http.post("/pub", params={"topic": "pull_req"}, content=b"x")
    (msg,) = await consume(http, "pull_req")
    params = {"topic": "pull_req", "channel": "c", "id": msg["id"]}
    assert (await http.post("/message/touch", params=params)).status_code == 200
    assert (await http.post("/message/req", params=params)).status_code == 200
    (again,) = await consume(http, "pull_req")
    assert again["attempts"] == 2
    r = await http.post("/message/req", params={**params, "delay": "600"})
    assert r.status_code == 200
    stats = await channel_stats(http, "pull_req")
    assert (stats["deferred_count"], stats["requeue_count"]) == (1, 2)


@pytest.mark.parametrize("mem_queue_size", ["10000", "0"], ids=["memory", "disk"])
async def test_peek_then_consume_gives_the_same_messages(run_daemon, mem_queue_size):
    nsqd = run_daemon("nsqd", f"--mem-queue-size={mem_queue_size}")
    async with http_of(nsqd) as http:
        await five_to_peek(http)
        await until(lambda: _peek(http, 5), what="all five messages to peek")
        seen = await _peek(http, 3)
        assert [m["text"] for m in seen] == ["m0", "m1", "m2"]
        assert [m["attempts"] for m in seen] == [0, 0, 0]
        stats = await channel_stats(http, "pull_peek")
        assert (stats["depth"], stats["in_flight_count"]) == (5, 0)
        taken = await consume(http, "pull_peek", n=3)
        assert [m["id"] for m in taken] == [m["id"] for m in seen]


def http_of(nsqd) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://{nsqd.http_address}", timeout=DEADLINE)


async def five_to_peek(http) -> None:
    """Topic pull_peek, channel c, and messages m0 to m4 published."""
    await make_channel(http, "pull_peek")
    r = await http.post("/mpub", params={"topic": "pull_peek"},
                        content=b"\n".join(b"m%d" % i for i in range(5)))
    assert r.status_code == 200, r.text


async def _peek(http, n):
    r = await http.get("/channel/peek", params={"topic": "pull_peek", "channel": "c", "n": n})
    assert r.status_code == 200
    messages = r.json()["messages"]
    return messages if len(messages) == n else None


@pytest.mark.parametrize(("path", "params", "status", "message"), [
    ("/channel/consume", {"topic": "nope", "channel": "c"}, 404, "TOPIC_NOT_FOUND"),
    ("/channel/consume", {"topic": "pull_bad", "channel": "nope"}, 404, "CHANNEL_NOT_FOUND"),
    ("/channel/consume", {"topic": "pull_bad"}, 400, "MISSING_ARG_CHANNEL"),
    ("/channel/consume", {"topic": "pull_bad", "channel": "c", "n": "0"}, 400, "INVALID_N"),
    ("/channel/consume", {"topic": "pull_bad", "channel": "c", "n": "x"}, 400, "INVALID_N"),
    ("/channel/consume", {"topic": "pull_bad", "channel": "c", "n": "2501"}, 400, "INVALID_N"),
    ("/channel/consume", {"topic": "pull_bad", "channel": "c", "wait": "-1"}, 400,
     "INVALID_WAIT"),
    ("/channel/consume", {"topic": "pull_bad", "channel": "c", "wait": "nan"}, 400,
     "INVALID_WAIT"),
    ("/channel/consume", {"topic": "pull_bad", "channel": "c", "ttr": "0"}, 400, "INVALID_TTR"),
    ("/channel/consume", {"topic": "pull_bad", "channel": "c", "ttr": "100000"}, 400,
     "INVALID_TTR"),
    ("/channel/peek", {"topic": "pull_bad", "channel": "c", "n": "-1"}, 400, "INVALID_N"),
    ("/channel/peek", {"topic": "pull_bad", "channel": "x"}, 404, "CHANNEL_NOT_FOUND"),
    ("/message/fin", {"topic": "pull_bad", "channel": "c"}, 400, "MISSING_ARG_ID"),
    ("/message/fin", {"topic": "pull_bad", "channel": "c", "id": "short"}, 400, "INVALID_ID"),
    ("/message/fin", {"topic": "pull_bad", "channel": "c", "id": "é" * 16}, 400, "INVALID_ID"),
    ("/message/req", {"topic": "pull_bad", "channel": "c", "id": "0" * 16, "delay": "x"}, 400,
     "INVALID_DELAY"),
    ("/message/touch", {"topic": "pull_bad", "channel": "c", "id": "0" * 16}, 404,
     "MESSAGE_NOT_IN_FLIGHT"),
])
async def test_bad_input_gets_nsq_errors(http, path, params, status, message):
    await make_channel(http, "pull_bad")
    r = await http.request("GET" if path == "/channel/peek" else "POST", path, params=params)
    assert (r.status_code, r.json()) == (status, {"message": message})


READER = textwrap.dedent("""
    import json, os, sys
    import nsq, tornado.ioloop

    tcp, stop_file = sys.argv[1], sys.argv[2]
    loop = tornado.ioloop.IOLoop.current()
    received = []

    def handler(msg):
        received.append(msg.body.decode())
        return True

    def check():
        if os.path.exists(stop_file):
            loop.stop()
        else:
            loop.call_later(0.05, check)

    reader = nsq.Reader(message_handler=handler, nsqd_tcp_addresses=[tcp], topic="pull_mix",
                        channel="c", max_in_flight=200)
    check()
    loop.start()
    print(json.dumps(received))
""")


async def test_http_pullers_and_a_pynsq_reader_share_a_channel_each_message_once(
        http, nsqd, tmp_path):
    count = 10_000
    await make_channel(http, "pull_mix")
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, nsqd.tcp_address, str(stop)],
                              stdout=subprocess.PIPE)
    try:
        await until(lambda: channel_stats(http, "pull_mix"), timeout=DEADLINE)
        await until(_has_client(http), what="the pynsq reader subscribed")
        for start in range(0, count, 1000):
            body = "\n".join(f"m{i}" for i in range(start, start + 1000)).encode()
            assert (await http.post("/mpub", params={"topic": "pull_mix"}, content=body)
                    ).text == "OK"
        pulled: list[list[str]] = [[], []]

        async def puller(mine: list[str]) -> None:
            while True:
                msgs = await consume(http, "pull_mix", n=100, wait=0.2)
                if not msgs:
                    stats = await channel_stats(http, "pull_mix")
                    if stats["depth"] == 0 and stats["in_flight_count"] == 0:
                        return
                    continue
                mine.extend(m["text"] for m in msgs)
                r = await http.post("/message/fin?topic=pull_mix&channel=c",
                                    content="\n".join(m["id"] for m in msgs).encode())
                assert r.status_code == 200

        async with trio.open_nursery() as nursery:
            for mine in pulled:
                nursery.start_soon(puller, mine)
        stop.touch()
        out, _ = await trio.to_thread.run_sync(reader.communicate, None, DEADLINE)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    by_reader = json.loads(out)
    everything = by_reader + pulled[0] + pulled[1]
    assert sorted(everything) == sorted(f"m{i}" for i in range(count))  # each exactly once
    assert by_reader and (pulled[0] or pulled[1])
    stats = await channel_stats(http, "pull_mix")
    assert (stats["depth"], stats["in_flight_count"], stats["timeout_count"]) == (0, 0, 0)


def _has_client(http):
    async def check():
        return (await channel_stats(http, "pull_mix"))["clients"]
    return check


async def test_peek_after_a_restart_reads_the_disk(run_daemon, tmp_path):
    # after a restart every message is on disk only: the first peek reads them, as a
    # consume would, rather than answering with what happens to be in memory
    data = tmp_path / "peek_data"
    data.mkdir()
    nsqd = run_daemon("nsqd", f"--data-path={data}")
    async with http_of(nsqd) as http:
        await five_to_peek(http)
    nsqd.stop()
    nsqd = run_daemon("nsqd", f"--data-path={data}")
    async with http_of(nsqd) as http:
        r = await http.get("/channel/peek", params={"topic": "pull_peek", "channel": "c",
                                                    "n": 5})
        assert [m["text"] for m in r.json()["messages"]] == [f"m{i}" for i in range(5)]
