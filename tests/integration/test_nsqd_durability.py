"""Durability on real processes: restarts, kill -9, damaged segment files, deferred messages
across restarts, disk errors, metadata, and what delete/empty leave on disk."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import httpx
import trio
from nsq_common import commands
from nsq_testing import WireClient, free_port


async def publish(daemon, topic, bodies, batch=200):
    client = await WireClient.connect(daemon.tcp_address)
    for i in range(0, len(bodies), batch):
        await client.send(commands.mpub(topic, bodies[i:i + batch]))
        assert await client.response() == b"OK"
    await client.aclose()


async def drain(daemon, topic, channel, *, idle=1.0, rdy=1000, fin=True):
    """Consume until nothing arrives for ``idle`` seconds; returns every message received."""
    client = await WireClient.connect(daemon.tcp_address)
    await client.subscribe(topic, channel, rdy)
    got = []
    while True:
        try:
            msg = await client.message(timeout=idle)
        except trio.TooSlowError:
            break
        got.append(msg)
        if fin:
            await client.send(commands.fin(msg.id))
    await client.aclose()
    return got


def stats(daemon, topic=None):
    params = {"format": "json"} | ({"topic": topic} if topic else {})
    return httpx.get(f"http://{daemon.http_address}/stats", params=params).json()


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
    consumer = await WireClient.connect(daemon.tcp_address)
    await consumer.subscribe("dur", "c", rdy=500)
    await publish(daemon, "dur", bodies[:40_000])
    # take 5,000: FIN 4,500, leave 500 in flight across the restart
    for i in range(5_000):
        msg = await consumer.message()
        if i < 4_500:
            delivered.add(msg.body)
            await consumer.send(commands.fin(msg.id))
    await consumer.pub("dur-sync", b"x")  # the FINs above are handled
    assert daemon.stop() == 0
    await consumer.aclose()

    daemon = run_daemon("nsqd", *args)
    doc = stats(daemon, "dur")
    assert doc["topics"][0]["channels"][0]["depth"] == 35_500
    await publish(daemon, "dur", bodies[40_000:70_000])
    assert daemon.stop() == 0

    daemon = run_daemon("nsqd", *args)
    await publish(daemon, "dur", bodies[70_000:])
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
    client = await WireClient.connect(daemon.tcp_address)
    await client.pub("crash", b"first")  # the topic and a channel exist before the crash
    acknowledged.append(b"first")
    http_client = httpx.AsyncClient()
    await http_client.post(f"http://{daemon.http_address}/channel/create",
                           params={"topic": "crash", "channel": "c"})

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
        await trio.sleep(1.5)
        daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(10)
    await client.aclose()
    await http_client.aclose()
    assert len(acknowledged) > 100

    daemon = run_daemon("nsqd", *args)
    got = {m.body for m in await drain(daemon, "crash", "c")}
    missing = set(acknowledged) - got
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"


async def test_damaged_segments_are_set_aside_and_the_rest_delivered(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--data-path={data}", "--mem-queue-size=0", "--max-bytes-per-file=4000"]
    daemon = run_daemon("nsqd", *args)
    httpx.post(f"http://{daemon.http_address}/topic/create", params={"topic": "dmg"})
    httpx.post(f"http://{daemon.http_address}/channel/create",
               params={"topic": "dmg", "channel": "c"})
    bodies = [b"body-%04d-" % i + b"x" * 80 for i in range(200)]
    await publish(daemon, "dmg", bodies, batch=10)
    assert daemon.stop() == 0
    files = sorted(data.glob("dmg:c.diskqueue.*.dat"))
    files = [f for f in files if not f.name.endswith("meta.dat")]
    assert len(files) >= 5
    # garbage in the middle of the second segment, and the last one truncated mid-record
    second = files[1]
    raw = bytearray(second.read_bytes())
    record = 4 + int.from_bytes(raw[:4], "big")
    raw[7 * record:7 * record + 10] = b"\xff" * 10  # over the length of the 8th record
    second.write_bytes(bytes(raw))
    last = files[-1]
    last.write_bytes(last.read_bytes()[:-50])

    daemon = run_daemon("nsqd", *args)
    got = [m.body for m in await drain(daemon, "dmg", "c")]
    assert len(set(got)) == len(got)
    per_file = 4000 // (4 + 26 + 90)
    lost = set(bodies) - set(got)
    # lost: the 8th record of the second file onwards, to the end of that file, and the
    # truncated last record; everything else arrives
    second_file = bodies[per_file:2 * per_file]
    assert set(second_file[:7]) <= set(got)
    assert lost <= set(second_file[7:]) | {bodies[-1]}
    assert bodies[-1] in lost
    assert (data / f"{second.name}.bad").exists()
    assert "bad" in daemon.output()
    # and the queue keeps working
    await publish(daemon, "dmg", [b"after"])
    assert [m.body for m in await drain(daemon, "dmg", "c")] == [b"after"]


async def test_deferred_message_keeps_its_remaining_delay_across_a_restart(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    tcp, http = free_port(), free_port()
    args = [f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}"]
    daemon = run_daemon("nsqd", *args)
    httpx.post(f"http://{daemon.http_address}/topic/create", params={"topic": "later"})
    httpx.post(f"http://{daemon.http_address}/channel/create", params={"topic": "later", "channel": "c"})
    client = await WireClient.connect(daemon.tcp_address)
    await client.send(commands.dpub("later", 5000, b"in five seconds"))
    assert await client.response() == b"OK"
    published = trio.current_time()
    await client.aclose()
    await trio.sleep(2)
    assert daemon.stop() == 0
    daemon = run_daemon("nsqd", *args)
    consumer = await WireClient.connect(daemon.tcp_address)
    await consumer.subscribe("later", "c", rdy=1)
    msg = await consumer.message(timeout=10)
    elapsed = trio.current_time() - published
    assert msg.body == b"in five seconds"
    assert 4.9 <= elapsed <= 7.0, elapsed
    await consumer.aclose()


async def test_disk_write_error_fails_the_publish_and_turns_unhealthy(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    os.symlink("/dev/full", data / "full.diskqueue.000000.dat")
    daemon = run_daemon("nsqd", f"--data-path={data}", "--mem-queue-size=0")
    client = await WireClient.connect(daemon.tcp_address)
    await client.send(commands.pub("full", b"x"))
    error = await client.error()
    assert error.startswith(b"E_PUB_FAILED PUB failed ")
    assert await client.closed()
    r = httpx.get(f"http://{daemon.http_address}/ping")
    assert r.status_code == 500 and r.text.startswith("NOK - ")
    assert stats(daemon, "full")["health"].startswith("NOK - ")
    r = httpx.post(f"http://{daemon.http_address}/pub", params={"topic": "full"}, content=b"x")
    assert r.status_code == 500
    # another topic still works, and a good write makes nsqd healthy again
    await publish(daemon, "fine", [b"ok"])
    assert httpx.get(f"http://{daemon.http_address}/ping").text == "OK"
    await client.aclose()


async def test_metadata_and_paused_state_survive_restart(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    daemon = run_daemon("nsqd", f"--data-path={data}")
    base = f"http://{daemon.http_address}"
    httpx.post(f"{base}/topic/create", params={"topic": "meta"})
    httpx.post(f"{base}/channel/create", params={"topic": "meta", "channel": "c"})
    httpx.post(f"{base}/channel/pause", params={"topic": "meta", "channel": "c"})
    httpx.post(f"{base}/topic/create", params={"topic": "meta2"})
    httpx.post(f"{base}/topic/pause", params={"topic": "meta2"})
    httpx.post(f"{base}/topic/create", params={"topic": "gone#ephemeral"})
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
    consumer = await WireClient.connect(daemon.tcp_address)
    await consumer.subscribe("eph#ephemeral", "c#ephemeral")
    await publish(daemon, "eph#ephemeral", [b"x"] * 5)
    durable = await WireClient.connect(daemon.tcp_address)
    await durable.subscribe("keep", "c")
    await publish(daemon, "keep", [b"y"] * 5)
    assert list(data.glob("keep:c.diskqueue.*"))
    await durable.aclose()
    await trio.sleep(0.2)
    httpx.post(f"{base}/channel/empty", params={"topic": "keep", "channel": "c"})
    assert stats(daemon, "keep")["topics"][0]["channels"][0]["depth"] == 0
    httpx.post(f"{base}/topic/delete", params={"topic": "keep"})
    await trio.sleep(0.3)
    assert daemon.stop() == 0
    await consumer.aclose()
    names = [p.name for p in data.iterdir()]
    assert not [n for n in names if "eph" in n], names
    assert not [n for n in names if n.startswith("keep")], names


async def test_kill_9_with_sync_every_1_keeps_in_flight_messages(run_daemon, tmp_path):
    """A message delivered but not finished when nsqd is killed comes back after the restart;
    finished ones do not (the disk queue commits a record only once its message is FINished)."""
    data = tmp_path / "data"
    data.mkdir()
    tcp, http = free_port(), free_port()
    args = ["--sync-every=1", f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp}",
            f"--http-address=127.0.0.1:{http}"]
    daemon = run_daemon("nsqd", *args)
    consumer = await WireClient.connect(daemon.tcp_address)
    await consumer.subscribe("inflight", "c", rdy=50)
    await publish(daemon, "inflight", [b"m-%d" % i for i in range(40)], batch=10)
    msgs = await consumer.messages(40)
    finished = {m.body for m in msgs[:25]}
    await consumer.send(b"".join(commands.fin(m.id) for m in msgs[:25]))
    await consumer.pub("inflight-sync", b"x")  # the FINs are handled
    await trio.sleep(0.3)  # and their commits persisted by the disk queue's task
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(10)
    await consumer.aclose()

    daemon = run_daemon("nsqd", *args)
    again = {m.body for m in await drain(daemon, "inflight", "c")}
    assert {m.body for m in msgs[25:]} <= again  # every unfinished message comes back
    assert not (again & finished)  # and no finished one does
