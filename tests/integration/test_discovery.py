"""A cluster on loopback: 2 nsqlookupd, 3 nsqd registered with both, and real clients."""

import json
import signal
import subprocess
import sys
import textwrap

import httpx
import pytest
import trio
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient, free_port, until

TOMBSTONE_LIFETIME = 10


@pytest.fixture
def lookupds(run_daemon):
    # inactive timeout above nsqd's 15 s ping interval, so live producers stay listed; a
    # tombstone lifetime long enough that a slow machine still sees the tombstone in place
    return [run_daemon("nsqlookupd", "--inactive-producer-timeout=20s",
                       f"--tombstone-lifetime={TOMBSTONE_LIFETIME}s")
            for _ in range(2)]


def nsqd_args(lookupds):
    return ["--broadcast-address=127.0.0.1",
            *[f"--lookupd-tcp-address={lk.tcp_address}" for lk in lookupds]]


@pytest.fixture
def cluster(run_daemon, lookupds):
    return lookupds, [run_daemon("nsqd", *nsqd_args(lookupds)) for _ in range(3)]


async def pub_once(daemon, topic, body):
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.pub(topic, body)


async def producers(http, lookupd, topic):
    r = await http.get(f"http://{lookupd.http_address}/lookup", params={"topic": topic})
    if r.status_code != 200:
        return set()
    return {p["tcp_port"] for p in r.json()["producers"]}


PYNSQ_LOOKUP_READER = textwrap.dedent("""
    import json, sys, nsq, tornado.ioloop
    lookupds, topic, expected = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
    loop = tornado.ioloop.IOLoop.current()
    seen = []
    def handler(msg):
        seen.append(msg.body.decode())
        if len(set(seen)) >= expected:
            loop.call_later(0.5, loop.stop)
        return True
    nsq.Reader(message_handler=handler, lookupd_http_addresses=["http://" + a for a in lookupds],
               topic=topic, channel="c", max_in_flight=100, lookupd_poll_interval=1)
    loop.call_later(60, loop.stop)
    loop.start()
    print(json.dumps(seen))
""")


async def test_pynsq_reader_finds_every_nsqd_through_lookupd(cluster):
    lookupds, nsqds = cluster
    bodies = []
    for i, daemon in enumerate(nsqds):
        batch = [f"n{i}-{j}".encode() for j in range(300)]
        async with await WireClient.connect(daemon.tcp_address) as client:
            await client.send(commands.mpub("spread", batch))
            assert await client.response() == b"OK"
        bodies.extend(batch)
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        for lk in lookupds:
            ports = await until(lambda lk=lk: producers(http, lk, "spread"))
            assert len(ports) == 3 or await until(
                lambda lk=lk: _three(producers(http, lk, "spread")))
    out = await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-c", PYNSQ_LOOKUP_READER, ",".join(lk.http_address for lk in lookupds),
         "spread", str(len(bodies))], capture_output=True, timeout=90, check=True))
    seen = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert sorted(set(seen)) == sorted(b.decode() for b in bodies)


async def _three(awaitable):
    return len(await awaitable) == 3


async def test_new_topic_and_channel_visible_in_every_lookupd(cluster):
    # nsqd REGISTERs a new topic and channel at once (its periodic PING carries no topics)
    lookupds, nsqds = cluster
    async with httpx.AsyncClient(timeout=DEADLINE) as http, \
            await WireClient.connect(nsqds[0].tcp_address) as client:
        await client.subscribe("fresh", "ch")
        for lk in lookupds:
            async def visible(lk=lk):
                r = await http.get(f"http://{lk.http_address}/lookup", params={"topic": "fresh"})
                return r.status_code == 200 and r.json()["channels"] == ["ch"] and r.json()["producers"]
            await until(visible, what=f"topic fresh, channel ch in {lk.http_address}")


async def test_killed_nsqd_leaves_new_one_joins_restarted_lookupd_relearns(run_daemon, lookupds):
    args = nsqd_args(lookupds)
    first = run_daemon("nsqd", *args)
    second = run_daemon("nsqd", *args)
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        for d in (first, second):
            await pub_once(d, "live", b"x")
        await until(lambda: _has(producers(http, lookupds[0], "live"), {first.tcp_port, second.tcp_port}))
        first.kill()  # gone within the inactive timeout (its connection closes: at once)
        await until(lambda: _equals(producers(http, lookupds[0], "live"), {second.tcp_port}))
        third = run_daemon("nsqd", *args)
        await pub_once(third, "live", b"x")
        await until(lambda: _has(producers(http, lookupds[0], "live"), {third.tcp_port}))
        # restart a lookupd on the same ports: the nsqds reconnect and register everything again
        old = lookupds[1]
        tcp, http_port = old.tcp_port, old.http_port
        old.stop()
        again = run_daemon("nsqlookupd", f"--tcp-address=127.0.0.1:{tcp}",
                           f"--http-address=127.0.0.1:{http_port}")
        await until(lambda: _equals(producers(http, again, "live"),
                                    {second.tcp_port, third.tcp_port}))


async def _has(awaitable, wanted):
    return wanted <= await awaitable


async def _equals(awaitable, wanted):
    return await awaitable == wanted


async def test_tombstone_and_topic_delete(cluster):
    lookupds, nsqds = cluster
    lk = lookupds[0]
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        for d in nsqds[:2]:
            await pub_once(d, "tomb", b"x")
        await until(lambda: _has(producers(http, lk, "tomb"), {nsqds[0].tcp_port, nsqds[1].tcp_port}))
        node = f"127.0.0.1:{nsqds[0].http_port}"
        r = await http.post(f"http://{lk.http_address}/topic/tombstone",
                            params={"topic": "tomb", "node": node})
        assert r.status_code == 200
        assert await producers(http, lk, "tomb") == {nsqds[1].tcp_port}
        nodes = (await http.get(f"http://{lk.http_address}/nodes")).json()["producers"]
        tombstoned = next(n for n in nodes if n["tcp_port"] == nsqds[0].tcp_port)
        assert tombstoned["tombstones"][tombstoned["topics"].index("tomb")] is True
        # after the tombstone lifetime it is back
        await until(lambda: _has(producers(http, lk, "tomb"), {nsqds[0].tcp_port}),
                    timeout=TOMBSTONE_LIFETIME + DEADLINE)
        await http.post(f"http://{lk.http_address}/topic/delete", params={"topic": "tomb"})
        topics = (await http.get(f"http://{lk.http_address}/topics")).json()["topics"]
        assert "tomb" not in topics


async def test_channels_known_elsewhere_are_created_before_messages_flow(cluster):
    lookupds, nsqds = cluster
    a, b = nsqds[0], nsqds[1]
    async with await WireClient.connect(a.tcp_address) as consumer, \
            httpx.AsyncClient(timeout=DEADLINE) as http:
        await consumer.subscribe("shared", "archive")
        await until(lambda: _channels(http, lookupds[0], "shared"))
        # nsqd b has never seen the topic; the first publish creates it there, and b asks
        # lookupd for its channels before the message flows, so "archive" gets it
        await pub_once(b, "shared", b"kept")
        doc = await until(lambda: _channel_depth(http, b, "shared", "archive"))
        assert doc == 1


async def _channels(http, lk, topic):
    r = await http.get(f"http://{lk.http_address}/channels", params={"topic": topic})
    return r.json()["channels"]


async def _channel_depth(http, daemon, topic, channel):
    r = await http.get(f"http://{daemon.http_address}/stats", params={"format": "json", "topic": topic})
    for t in r.json()["topics"] or []:
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c["depth"]
    return None


async def test_lookupd_set_changes_at_run_time_and_a_dead_lookupd_does_not_slow_publishing(
        run_daemon, lookupds):
    dead = f"127.0.0.1:{free_port()}"
    daemon = run_daemon("nsqd", "--broadcast-address=127.0.0.1", f"--lookupd-tcp-address={dead}")
    async with await WireClient.connect(daemon.tcp_address) as client, \
            httpx.AsyncClient(timeout=DEADLINE) as http:
        # nothing waits on the dead lookupd: 200 publishes take milliseconds; only a publish
        # path that blocked on dialling it (a second or more each) could miss this deadline
        with trio.fail_after(60):
            for i in range(200):
                await client.pub("dyn", b"%d" % i)
        r = await http.put(f"http://{daemon.http_address}/config/nsqlookupd_tcp_addresses",
                           content=json.dumps([lookupds[0].tcp_address]))
        assert r.json() == [lookupds[0].tcp_address]
        await until(lambda: _has(producers(http, lookupds[0], "dyn"), {daemon.tcp_port}))


async def test_nsqd_shutdown_sends_sigterm_cleanly(cluster):
    _, nsqds = cluster
    assert nsqds[2].stop(signal.SIGTERM) == 0
