"""Durability on real processes: restarts, kill -9, damaged segment files, deferred messages
across restarts, disk errors, metadata, and what delete/empty leave on disk."""

import json
import signal
import subprocess
import sys
import textwrap

import trio
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient, free_port, until
from nsqd import cursorfile

from ._storage_client import drain_messages, get, post, publish, stats


def persisted_mark_delete(data, topic, channel):
    """The mark-delete position a channel's cursor journal records (None while it has none)."""
    state = cursorfile.load(data / "topics" / topic / f"{channel}{cursorfile.SUFFIX}")
    return None if state is None else state.mark_delete


def segments(data, topic):
    return sorted((data / "topics" / topic).glob("*.log"))


PYNSQ_READER = textwrap.dedent("""
    import sys, nsq, tornado.ioloop
    tcp, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
    loop = tornado.ioloop.IOLoop.current()
    seen = set()
    def handler(msg):
        seen.add(msg.body.decode())
        if len(seen) >= expected:
            loop.call_later(0.5, loop.stop)
        return True
    nsq.Reader(message_handler=handler, nsqd_tcp_addresses=[tcp], topic=topic, channel="c",
               max_in_flight=500)
    loop.call_later(120, loop.stop)
    loop.start()
    sys.stdout.write("\\n".join(sorted(seen)))
""")


async def test_100k_messages_through_two_restarts_consumed_by_pynsq(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    tcp, http = free_port(), free_port()
    args = ["--mem-queue-size=1000", f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp}",
            f"--http-address=127.0.0.1:{http}"]
    bodies = [b"m-%d" % i for i in range(100_000)]
    delivered = set()

    daemon = run_daemon("nsqd", *args)
    async with await WireClient.connect(daemon.tcp_address) as consumer:
        await consumer.subscribe("dur", "c", rdy=500)
        await publish(daemon, "dur", bodies[:40_000], batch=200)
        # take 5,000: FIN 4,500, leave 500 in flight across the restart
        for i in range(5_000):
            msg = await consumer.message()
            if i < 4_500:
                delivered.add(msg.body)
                await consumer.send(commands.fin(msg.id))
        await consumer.pub("dur-sync", b"x")  # the FINs above are handled
        assert daemon.stop() == 0

    daemon = run_daemon("nsqd", *args)
    doc = stats(daemon, "dur")
    assert doc["topics"][0]["channels"][0]["depth"] == 35_500
    await publish(daemon, "dur", bodies[40_000:70_000], batch=200)
    assert daemon.stop() == 0

    daemon = run_daemon("nsqd", *args)
    await publish(daemon, "dur", bodies[70_000:], batch=200)
    missing = 100_000 - len(delivered)
    out = await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-c", PYNSQ_READER, daemon.tcp_address, "dur", str(missing)],
        capture_output=True, timeout=150, check=True))
    delivered |= {line.encode() for line in out.stdout.decode().split("\n") if line}
    assert delivered == set(bodies)


async def test_kill_9_with_sync_every_1_loses_nothing_acknowledged(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    tcp, http = free_port(), free_port()
    args = ["--sync-every=1", f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp}",
            f"--http-address=127.0.0.1:{http}"]
    daemon = run_daemon("nsqd", *args)
    acknowledged = []
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.pub("crash", b"first")  # the topic and a channel exist before the crash
        acknowledged.append(b"first")
        post(f"http://{daemon.http_address}/channel/create",
                   params={"topic": "crash", "channel": "c"})
        await publish_until_killed(daemon, client, acknowledged)
    assert len(acknowledged) > 100

    daemon = run_daemon("nsqd", *args)
    got = {m.body for m in await drain_messages(daemon, "crash", "c", rdy=1000)}
    missing = set(acknowledged) - got
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"


async def publish_until_killed(daemon, client, acknowledged):
    """Publish batches, noting each acknowledged one, and SIGKILL nsqd mid-stream once more
    than a hundred messages have been acknowledged."""

    async def publisher():
        n = 0
        while True:
            batch = [b"c-%d" % (n + i) for i in range(10)]
            await client.send(commands.mpub("crash", batch))
            try:
                if await client.response() != b"OK":
                    return
            except (EOFError, trio.BrokenResourceError, trio.TooSlowError):
                return
            acknowledged.extend(batch)
            n += 10

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publisher)
        await until(lambda: len(acknowledged) > 500, what="500 acknowledged publishes")
        daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(DEADLINE)


async def test_damaged_segments_are_set_aside_and_the_rest_delivered(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--data-path={data}", "--mem-queue-size=0", "--max-bytes-per-file=4000"]
    daemon = run_daemon("nsqd", *args)
    post(f"http://{daemon.http_address}/topic/create", params={"topic": "dmg"})
    post(f"http://{daemon.http_address}/channel/create",
               params={"topic": "dmg", "channel": "c"})
    bodies = [b"body-%04d-" % i + b"x" * 80 for i in range(200)]
    await publish(daemon, "dmg", bodies, batch=10)  # one batch of 10 records per MPUB
    assert daemon.stop() == 0
    files = segments(data, "dmg")
    assert len(files) >= 5
    # garbage in a record of the second segment's second batch, and the last segment cut
    # short in its last batch
    second = files[1]
    raw = bytearray(second.read_bytes())
    batch = 28 + 10 * (4 + 26 + 90)
    raw[8 + batch + 100:8 + batch + 110] = b"\xff" * 10
    second.write_bytes(bytes(raw))
    last = files[-1]
    last.write_bytes(last.read_bytes()[:-50])

    daemon = run_daemon("nsqd", *args)
    got = [m.body for m in await drain_messages(daemon, "dmg", "c", rdy=1000)]
    assert len(set(got)) == len(got)
    first_of_second = int(second.name[:20])
    lost = set(bodies) - set(got)
    # lost: the damaged batch of the second segment and what follows it in that segment
    # (at most), and the torn last batch; everything else arrives
    assert set(bodies[:first_of_second + 10]) <= set(got)
    assert set(bodies[first_of_second + 10:first_of_second + 20]) <= lost
    assert set(bodies[-10:]) <= lost
    assert not lost & set(bodies[int(files[2].name[:20]):-10])
    assert "damaged" in daemon.output() or "bad crc" in daemon.output()
    # and the topic keeps working
    await publish(daemon, "dmg", [b"after"])
    assert [m.body for m in await drain_messages(daemon, "dmg", "c", rdy=1000)] == [b"after"]


async def test_disk_write_error_fails_the_publish_and_turns_unhealthy(run_daemon, tmp_path):
    data = tmp_path / "data"
    (data / "topics").mkdir(parents=True)
    (data / "topics" / "full").write_bytes(b"")  # a file where the topic's directory goes
    daemon = run_daemon("nsqd", f"--data-path={data}", "--mem-queue-size=0")
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.send(commands.pub("full", b"x"))
        error = await client.error()
        assert error.startswith(b"E_PUB_FAILED PUB failed ")
        assert await client.closed()
    r = get(f"http://{daemon.http_address}/ping")
    assert r.status_code == 500 and r.text.startswith("NOK - ")
    assert stats(daemon, "full")["health"].startswith("NOK - ")
    r = post(f"http://{daemon.http_address}/pub", params={"topic": "full"}, content=b"x")
    assert r.status_code == 500
    # another topic still works, and a good write makes nsqd healthy again
    await publish(daemon, "fine", [b"ok"])
    assert get(f"http://{daemon.http_address}/ping").text == "OK"


async def test_metadata_and_paused_state_survive_restart(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}")
    base = f"http://{daemon.http_address}"
    post(f"{base}/topic/create", params={"topic": "meta"})
    post(f"{base}/channel/create", params={"topic": "meta", "channel": "c"})
    post(f"{base}/channel/pause", params={"topic": "meta", "channel": "c"})
    post(f"{base}/topic/create", params={"topic": "meta2"})
    post(f"{base}/topic/pause", params={"topic": "meta2"})
    post(f"{base}/topic/create", params={"topic": "gone#ephemeral"})
    assert daemon.stop() == 0
    doc = json.loads((data / "nsqd.dat").read_bytes())
    assert doc["version"] == "1.3.0"
    assert sorted(doc["topics"], key=lambda t: t["name"]) == [
        {"name": "meta", "paused": False, "channels": [{"name": "c", "paused": True}]},
        {"name": "meta2", "paused": True, "channels": None},
    ]
    assert oct((data / "nsqd.dat").stat().st_mode & 0o777) == "0o600"
    daemon = run_daemon("nsqd", f"--data-path={data}")
    topics = {t["topic_name"]: t for t in stats(daemon, None)["topics"]}
    assert set(topics) == {"meta", "meta2"}
    assert topics["meta2"]["paused"] is True
    assert topics["meta"]["channels"][0]["paused"] is True


async def test_ephemeral_never_touches_disk_and_delete_removes_files(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}", "--mem-queue-size=0")
    base = f"http://{daemon.http_address}"
    async with await WireClient.connect(daemon.tcp_address) as consumer:
        await consumer.subscribe("eph#ephemeral", "c#ephemeral")
        await publish(daemon, "eph#ephemeral", [b"x"] * 5)
        async with await WireClient.connect(daemon.tcp_address) as durable:
            await durable.subscribe("keep", "c")
            await publish(daemon, "keep", [b"y"] * 5)
            assert segments(data, "keep")
        await until(lambda: stats(daemon, "keep")["topics"][0]["channels"][0]["client_count"] == 0,
                    what="nsqd saw the keep:c client go")
        post(f"{base}/channel/empty", params={"topic": "keep", "channel": "c"})
        assert stats(daemon, "keep")["topics"][0]["channels"][0]["depth"] == 0
        post(f"{base}/topic/delete", params={"topic": "keep"})
        await until(lambda: not (data / "topics" / "keep").exists(), what="keep's files removed")
        assert daemon.stop() == 0
    names = [p.name for p in data.rglob("*")]
    assert not [n for n in names if "eph" in n], names
    assert not [n for n in names if n.startswith("keep")], names


async def test_kill_9_with_sync_every_1_keeps_in_flight_messages(run_daemon, tmp_path):
    """A message delivered but not finished when nsqd is killed comes back after the restart;
    finished ones do not (once the channel's cursor has been persisted past them)."""
    data = tmp_path / "data"
    data.mkdir()
    tcp, http = free_port(), free_port()
    args = ["--sync-every=1", f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp}",
            f"--http-address=127.0.0.1:{http}"]
    daemon = run_daemon("nsqd", *args)
    async with await WireClient.connect(daemon.tcp_address) as consumer:
        await consumer.subscribe("inflight", "c", rdy=50)
        await publish(daemon, "inflight", [b"m-%d" % i for i in range(40)], batch=10)
        msgs = await consumer.messages(40)
        finished = {m.body for m in msgs[:25]}
        await consumer.send(b"".join(commands.fin(m.id) for m in msgs[:25]))
        await consumer.pub("inflight-sync", b"x")  # the FINs are handled
        # and the cursor persisted past them by the topic's task
        await until(lambda: persisted_mark_delete(data, "inflight", "c") == 25,
                    what=lambda: "inflight:c persisted at 25, not "
                                 f"{persisted_mark_delete(data, 'inflight', 'c')}")
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait(DEADLINE)

    daemon = run_daemon("nsqd", *args)
    again = {m.body for m in await drain_messages(daemon, "inflight", "c", rdy=1000)}
    assert {m.body for m in msgs[25:]} <= again  # every unfinished message comes back
    assert not (again & finished)  # and no finished one does
