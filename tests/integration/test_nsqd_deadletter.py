"""Attempt limits and dead letters on a real nsqd: a poison message ends in the channel's
dead-letter queue, survives a restart and kill -9, and can be peeked, respawned, emptied."""

import signal

import httpx
import pytest
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient, free_port, wait_until


def post(daemon, path, content=b"", **params):
    return httpx.post(f"http://{daemon.http_address}{path}", params=params, content=content,
                      timeout=DEADLINE)


def get(daemon, path, **params):
    return httpx.get(f"http://{daemon.http_address}{path}", params=params, timeout=DEADLINE)


def channel_stats(daemon, topic="dl"):
    (t,) = get(daemon, "/stats", format="json", topic=topic).json()["topics"]
    return t["channels"][0]


def dead_letters(daemon, n=10, topic="dl"):
    r = get(daemon, "/channel/deadletter", topic=topic, channel="c", n=str(n))
    assert r.status_code == 200
    return r.json()["messages"]


async def deliveries_until_dead(daemon) -> list[int]:
    """Subscribe with RDY 1 and REQ every delivery until the message is a dead letter."""
    attempts = []
    async with await WireClient.connect(daemon.tcp_address) as consumer:
        await consumer.subscribe("dl", "c", rdy=1)
        while True:
            msg = await consumer.message()
            attempts.append(msg.attempts)
            await consumer.send(commands.req(msg.id, 0))
            # the REQ is in and nsqd has decided: delivered again, or a dead letter
            requeues = len(attempts)
            stats = wait_until(lambda: _decided(daemon, requeues),  # noqa: B023 - used at once
                               what="the REQ and what follows it")
            if stats["dead_letter_count"]:
                return attempts


def _decided(daemon, requeues):
    stats = channel_stats(daemon)
    if stats["requeue_count"] == requeues and (stats["in_flight_count"]
                                               or stats["dead_letter_count"]):
        return stats
    return None


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_poison_message_is_dead_lettered_kept_and_respawned(run_daemon, tmp_path, stop):
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--data-path={data}", f"--tcp-address=127.0.0.1:{free_port()}",
            f"--http-address=127.0.0.1:{free_port()}", "--sync-every=1"]
    nsqd = run_daemon("nsqd", *args)
    assert post(nsqd, "/topic/create", topic="dl").status_code == 200
    assert post(nsqd, "/channel/create", topic="dl", channel="c",
                max_attempts="3").status_code == 200
    assert post(nsqd, "/pub", b"poison", topic="dl").text == "OK"
    assert await deliveries_until_dead(nsqd) == [1, 2, 3]  # never a 4th
    wait_until(lambda: dead_letters(nsqd), what="the dead letter to be readable")
    (dead,) = dead_letters(nsqd)
    assert (dead["text"], dead["attempts"]) == ("poison", 3)
    stats = channel_stats(nsqd)
    assert (stats["depth"], stats["in_flight_count"], stats["dead_letter_count"]) == (0, 0, 1)

    nsqd.stop(stop)
    nsqd = run_daemon("nsqd", *args)
    assert channel_stats(nsqd)["dead_letter_count"] == 1
    wait_until(lambda: dead_letters(nsqd), what="the dead letter to be readable again")
    assert post(nsqd, "/channel/deadletter/respawn", topic="dl", channel="c").json() == {
        "count": 1}
    async with await WireClient.connect(nsqd.tcp_address) as consumer:
        await consumer.subscribe("dl", "c", rdy=1)
        msg = await consumer.message()
        assert (msg.body, msg.attempts) == (b"poison", 1)  # attempts start again
        await consumer.send(commands.fin(msg.id))
        wait_until(lambda: channel_stats(nsqd)["in_flight_count"] == 0, what="the FIN")
    stats = channel_stats(nsqd)
    assert (stats["depth"], stats["dead_letter_count"]) == (0, 0)


async def test_the_default_limit_a_consumer_giving_up_and_emptying(run_daemon):
    nsqd = run_daemon("nsqd", "--max-attempts=1")
    assert post(nsqd, "/topic/create", topic="dl").status_code == 200
    assert post(nsqd, "/channel/create", topic="dl", channel="c").status_code == 200
    assert post(nsqd, "/mpub", b"a\nb\nc", topic="dl").text == "OK"
    msgs = post(nsqd, "/channel/consume", topic="dl", channel="c", n="3").json()["messages"]
    ids = {m["text"]: m["id"] for m in msgs}
    assert post(nsqd, "/message/deadletter", topic="dl", channel="c",
                id=ids["a"]).status_code == 200  # given up on at once
    assert post(nsqd, "/message/req", topic="dl", channel="c", id=ids["b"]).status_code == 200
    # b comes back with one delivery behind it: over --max-attempts=1, it is a dead letter
    assert post(nsqd, "/channel/consume", topic="dl", channel="c", n="3").json() == {
        "messages": []}
    wait_until(lambda: len(dead_letters(nsqd)) == 2, what="a and b dead letters")
    assert [m["text"] for m in dead_letters(nsqd)] == ["a", "b"]
    assert post(nsqd, "/channel/deadletter/empty", topic="dl", channel="c",
                n="1").json() == {"count": 1}
    assert [m["text"] for m in dead_letters(nsqd)] == ["b"]
    assert post(nsqd, "/channel/deadletter/empty", topic="dl", channel="c").json() == {
        "count": 1}
    assert channel_stats(nsqd)["dead_letter_count"] == 0
    assert post(nsqd, "/message/fin", topic="dl", channel="c", id=ids["c"]).status_code == 200


def test_max_attempts_is_kept_in_the_metadata_and_can_change(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--data-path={data}", f"--tcp-address=127.0.0.1:{free_port()}",
            f"--http-address=127.0.0.1:{free_port()}"]
    nsqd = run_daemon("nsqd", *args)
    assert post(nsqd, "/topic/create", topic="dl").status_code == 200
    assert post(nsqd, "/channel/create", topic="dl", channel="c").status_code == 200
    assert post(nsqd, "/channel/update", topic="dl", channel="c",
                max_attempts="7").status_code == 200
    assert nsqd.stop() == 0
    assert b'"max_attempts":7' in (data / "nsqd.dat").read_bytes()
    assert not list(data.rglob("*#dead*"))  # no dead letter, no files for them


@pytest.mark.parametrize(("method", "path", "params", "status", "message"), [
    ("POST", "/channel/create", {"channel": "c", "max_attempts": "x"}, 400,
     "INVALID_MAX_ATTEMPTS"),
    ("POST", "/channel/create", {"channel": "c", "max_attempts": "65536"}, 400,
     "INVALID_MAX_ATTEMPTS"),
    ("POST", "/channel/create", {"channel": "c", "max_attempts": "\u00b2"}, 400,
     "INVALID_MAX_ATTEMPTS"),
    ("POST", "/channel/update", {"channel": "c"}, 400, "MISSING_ARG_MAX_ATTEMPTS"),
    ("POST", "/channel/update", {"channel": "nope", "max_attempts": "1"}, 404,
     "CHANNEL_NOT_FOUND"),
    ("GET", "/channel/deadletter", {"channel": "c", "n": "0"}, 400, "INVALID_N"),
    ("POST", "/channel/deadletter/respawn", {"channel": "nope"}, 404, "CHANNEL_NOT_FOUND"),
    ("POST", "/channel/deadletter/empty", {"channel": "c", "n": "x"}, 400, "INVALID_N"),
    ("POST", "/message/deadletter", {"channel": "c", "id": "0" * 16}, 404,
     "MESSAGE_NOT_IN_FLIGHT"),
])
def test_bad_input_gets_nsq_errors(nsqd, method, path, params, status, message):
    assert post(nsqd, "/topic/create", topic="dl").status_code == 200
    assert post(nsqd, "/channel/create", topic="dl", channel="c").status_code == 200
    r = httpx.request(method, f"http://{nsqd.http_address}{path}",
                      params={"topic": "dl", **params}, timeout=DEADLINE)
    assert (r.status_code, r.json()) == (status, {"message": message})
