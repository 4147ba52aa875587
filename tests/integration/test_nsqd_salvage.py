"""Damaged and unfinished segment files at a real nsqd's start (docs/design/storage.md, "What a
`kill -9` leaves"): a damaged batch costs that batch alone, kept aside and counted in /stats and
/metrics; a segment a roll left without a batch is removed without an error."""

from __future__ import annotations

from pathlib import Path

import httpx
from nsq_testing import DEADLINE, WireClient
from nsqd.segment import BATCH_HEAD, MAGIC

GO_TOPIC = ["topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes",
            "paused", "e2e_processing_latency"]


def get(url: str, **params: object) -> httpx.Response:
    return httpx.get(url, params=params, timeout=DEADLINE)  # type: ignore[arg-type]


def post(url: str, **params: object) -> httpx.Response:
    answer = httpx.post(url, params=params, timeout=DEADLINE)  # type: ignore[arg-type]
    assert answer.status_code == 200, answer.text
    return answer


def topic_doc(daemon, topic: str) -> dict:
    (doc,) = get(f"http://{daemon.http_address}/stats", format="json", topic=topic).json()[
        "topics"]
    return doc


def read_all(daemon, topic: str) -> dict[int, str]:
    """Offset -> body of every message ``/topic/read`` gives, from the earliest on."""
    out: dict[int, str] = {}
    offset = 0
    while True:
        doc = get(f"http://{daemon.http_address}/topic/read", topic=topic, offset=offset,
                  n=1000).json()
        for m in doc["messages"]:
            out[m["offset"]] = m["text"]
        if not doc["messages"] or doc["next_offset"] > doc["latest_offset"]:
            return out
        offset = doc["next_offset"]


def batches(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, count) of each batch of a whole segment file."""
    data = path.read_bytes()
    out, pos = [], len(MAGIC)
    while pos < len(data):
        length, base, n, _, _ = BATCH_HEAD.unpack_from(data, pos)
        out.append((pos, base, n))
        pos += 4 + length
    return out


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(bytes(data))


async def test_a_damaged_batch_costs_that_batch_alone(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--data-path={data}", "--mem-queue-size=0", "--max-bytes-per-file=3000"]
    daemon = run_daemon("nsqd", *args)
    http = f"http://{daemon.http_address}"
    for topic in ("t", "clean"):
        post(f"{http}/topic/create", topic=topic)
        post(f"{http}/channel/create", topic=topic, channel="c")
    # a channel that takes nothing: the segments stay for the read after the restart below,
    # whenever the removal tick comes after channel c's FINs
    post(f"{http}/channel/create", topic="t", channel="keep")
    bodies = {o: f"message-{o:04d}-" + "x" * 50 for o in range(200)}
    async with await WireClient.connect(daemon.tcp_address) as client:
        for o in range(200):  # one batch each (--mem-queue-size=0)
            for topic in ("t", "clean"):
                await client.pub(topic, bodies[o].encode())
    assert daemon.stop() == 0  # a clean stop: each segment's index written
    files = sorted((data / "topics" / "t").glob("*.log"))
    assert len(files) >= 4
    # One flipped byte in a record of a batch in the middle of the first segment (its index
    # is used: a read finds it), and in the length field of one of the second (scanned).
    first, second = batches(files[0]), batches(files[1])
    pos, lost_a, _ = first[len(first) // 2]
    flip(files[0], pos + BATCH_HEAD.size + 20)
    pos, lost_b, _ = second[len(second) // 2]
    flip(files[1], pos + 2)
    files[1].with_suffix(".index").unlink()
    damaged = {p.name: p.read_bytes() for p in files[:2]}

    daemon = run_daemon("nsqd", *args)
    expected = {o: b for o, b in bodies.items() if o not in (lost_a, lost_b)}
    assert read_all(daemon, "t") == expected
    output = daemon.output()
    assert output.count("bytes lost, kept aside as") == 2, output
    asides = sorted((data / "topics" / "t").glob("*.log.damaged-*"))
    assert [p.name.split(".")[0] for p in asides] == [files[0].stem, files[1].stem]
    for aside in asides:  # the damaged batch's bytes, as they were in the segment
        segment_name, at = aside.name.split(".damaged-")
        assert aside.read_bytes() in damaged[segment_name]
        assert damaged[segment_name].index(aside.read_bytes()) == int(at)
    doc = topic_doc(daemon, "t")
    assert doc["damaged_batches"] == 2 and doc["damaged_bytes"] == sum(
        p.stat().st_size for p in asides)
    assert list(topic_doc(daemon, "clean")) == GO_TOPIC  # no damage: Go's keys, exactly
    metrics = get(f"http://{daemon.http_address}/metrics").text
    assert 'nsq_topic_damaged_batches_total{topic="t"} 2.0' in metrics
    assert 'nsq_topic_damaged_batches_total{topic="clean"} 0.0' in metrics
    assert f'nsq_topic_damaged_bytes_total{{topic="t"}} {doc["damaged_bytes"]}.0' in metrics
    # the channel gets every message but the two
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.subscribe("t", "c", rdy=250)
        got = []
        for _ in expected:
            msg = await client.message()
            got.append(msg.body.decode())
            await client.send(b"FIN %s\n" % msg.id)
    assert got == list(expected.values())

    # The indexes written at the stop describe the segments without the damaged batches: the
    # next start reads the same, finds no damage again, and the files are kept aside still.
    assert daemon.stop() == 0
    daemon = run_daemon("nsqd", *args)
    assert read_all(daemon, "t") == expected
    assert "damaged_batches" not in topic_doc(daemon, "t")
    assert "kept aside" not in daemon.output() and "ERROR" not in daemon.output()
    assert sorted((data / "topics" / "t").glob("*.log.damaged-*")) == asides


async def test_a_segment_a_roll_left_without_a_batch_is_removed(run_daemon, tmp_path):
    """A crash between making a segment's file and writing its magic leaves it empty (or with
    a part of the magic): no batch in it was ever acknowledged."""
    data = tmp_path / "data"
    data.mkdir()
    args = [f"--data-path={data}", "--mem-queue-size=0"]
    daemon = run_daemon("nsqd", *args)
    http = f"http://{daemon.http_address}"
    post(f"{http}/topic/create", topic="t")
    post(f"{http}/channel/create", topic="t", channel="c")
    async with await WireClient.connect(daemon.tcp_address) as client:
        for o in range(5):
            await client.pub("t", b"m%d" % o)
    assert daemon.stop() == 0
    directory = data / "topics" / "t"
    (directory / f"{5:020d}.log").write_bytes(MAGIC)  # a roll's segment, not the last
    (directory / f"{6:020d}.log").write_bytes(MAGIC[:3])  # the next roll's, cut short
    (directory / f"{7:020d}.log").write_bytes(b"")  # and the last one's, no magic yet

    daemon = run_daemon("nsqd", *args)
    assert read_all(daemon, "t") == {o: f"m{o}" for o in range(5)}
    output = daemon.output()
    assert "ERROR" not in output and "FATAL" not in output, output
    assert "a segment with no batch" in output
    assert sorted(p.name for p in directory.iterdir() if ".log" in p.name) == [
        f"{0:020d}.log"]
    async with await WireClient.connect(daemon.tcp_address) as client:
        await client.pub("t", b"m5")  # the next segment is made again when needed
    assert read_all(daemon, "t")[5] == "m5"
