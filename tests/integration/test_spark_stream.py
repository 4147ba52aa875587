"""The nsq streaming source in a real local Spark, against a real nsqd.

Reads by offset: Spark's offsets, exactly once into an idempotent sink across a driver
killed at five points of a batch and across an nsqd restart, the starting positions,
AvailableNow stopping at its start's offsets, the progress metrics, failures that surface.
Channel reads: every message once, FINished only after Spark commits, replayed from the
reader's checkpoint after the driver is killed."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import nsq_spark
import pytest
from nsq_spark import touch
from nsq_testing import DEADLINE, start_daemon, wait_until

pytestmark = pytest.mark.spark

QUERY_SCRIPT = Path(__file__).with_name("_spark_query.py")


@pytest.fixture(scope="module")
def spark():
    session = nsq_spark.local_session("nsq-spark-stream-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory):
    data = tmp_path_factory.mktemp("nsqd")
    with start_daemon("nsqd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                               "--https-address=127.0.0.1:0", f"--data-path={data}"]) as daemon:
        yield daemon


def wait_progressing(condition, progress, what: str, details=lambda: ""):
    """Until ``condition()`` holds, for as long as ``progress()`` keeps changing: a Spark
    query starts in seconds on a quiet machine and in minutes on a busy one, so the deadline
    is a stretch with no progress at all (and a cap on the whole), not a time for the work."""
    stalled_after, cap = DEADLINE * 4, DEADLINE * 20
    start = last_change = time.monotonic()
    seen = progress()
    while not (found := condition()):
        now, now_seen = time.monotonic(), progress()
        if now_seen != seen:
            seen, last_change = now_seen, now
        if now - last_change > stalled_after or now - start > cap:
            raise AssertionError(f"no {what} after {now - start:.0f} s, the last "
                                 f"{now - last_change:.0f} s without progress (at {seen!r})"
                                 f"\n{details()}")
        time.sleep(0.2)
    return found


#: Spark's own error when the Python process of a streaming source did not connect back to the
#: JVM within the 10 s it waits (PythonWorkerFactory, fixed): it compiles pyspark from its zip
#: as it starts, about 0.9 s of CPU, which took longer than that at load 17-19 on 2 cores.
WORKER_TIMEOUT = "Python worker failed to connect back"


def started(start, root: Path):
    """``start(checkpoint)`` a streaming query and wait until its source is up (or the query
    ended). A query that Spark failed with ``WORKER_TIMEOUT`` is started again, with a new
    checkpoint, up to three times; any other end is the test's to judge. Returns the query and
    its checkpoint."""
    for attempt in range(3):
        checkpoint = root / f"checkpoint-{attempt}"
        query = start(checkpoint)
        wait_progressing(  # "Initializing StreamExecution", then "Initializing sources"
            lambda q=query: not q.isActive or not q.status["message"].startswith("Initializing"),
            lambda q=query: q.status["message"], "the query's source up")
        error = query.exception()
        if error is None or WORKER_TIMEOUT not in str(error) or attempt == 2:
            return query, checkpoint
        print(f"attempt {attempt}: {WORKER_TIMEOUT}; starting the query again")
    raise AssertionError("unreachable")


def ran_to_end(start):
    """``start(attempt)`` a query that ends by itself (``availableNow``) and wait for its end.
    A query that Spark failed with ``WORKER_TIMEOUT`` is started again, up to three times
    (``start`` decides whether from a new checkpoint); any other failure is raised. Returns
    the query that ended."""
    for attempt in range(3):
        query = start(attempt)
        try:
            query.awaitTermination()
        except Exception as exc:  # pyspark's StreamingQueryException
            if WORKER_TIMEOUT not in str(exc) or attempt == 2:
                raise
            print(f"attempt {attempt}: {WORKER_TIMEOUT}; starting the query again")
            continue
        return query
    raise AssertionError("unreachable")


def publish(nsqd, topic: str, count: int, channel: str = "spark") -> list[bytes]:
    base = f"http://{nsqd.http_address}"
    assert httpx.post(f"{base}/topic/create", params={"topic": topic}).status_code == 200
    assert httpx.post(f"{base}/channel/create", params={"topic": topic, "channel": channel}
                      ).status_code == 200
    bodies = [f"{topic}-{i}".encode() for i in range(count)]
    for i in range(0, count, 1000):
        r = httpx.post(f"{base}/mpub", params={"topic": topic}, content=b"\n".join(bodies[i:i + 1000]))
        assert r.status_code == 200, r.text
    return bodies


def channel_stats(nsqd, topic: str, channel: str = "spark") -> dict:
    r = httpx.get(f"http://{nsqd.http_address}/stats", params={"format": "json", "topic": topic})
    (found,) = [c for c in r.json()["topics"][0]["channels"] if c["channel_name"] == channel]
    return found


def drained(nsqd, topic: str) -> dict | None:
    stats = channel_stats(nsqd, topic)
    return stats if stats["depth"] == 0 and stats["in_flight_count"] == 0 else None


MODES = ["tcp", "http"]  # the driver holds TCP consumers / executors pull over HTTP


def where(nsqd, mode: str) -> tuple[str, str]:
    """The option that names the nsqd: its TCP address makes the driver hold TCP consumers,
    its HTTP address lets the executors pull over HTTP."""
    return ("nsqd", nsqd.tcp_address) if mode == "tcp" else ("nsqdHttp", nsqd.http_address)


def parts_logged(checkpoint: Path) -> int:
    """Part files executors wrote while pulling over HTTP (committed batches' are pruned to
    the last few, so any at all shows the mode)."""
    return len(list((checkpoint / "sources" / "nsq").glob("*.part-*")))


def stream(spark, nsqd, topic: str, checkpoint: Path, mode: str = "tcp", **options: str):
    reader = (spark.readStream.format("nsq").option(*where(nsqd, mode))
              .option("topic", topic).option("channel", "spark")
              .option("checkpointLocation", str(checkpoint)))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.parametrize("mode", MODES)
def test_ten_thousand_messages_in_several_batches(spark, nsqd, tmp_path, mode):
    topic = f"ten_k_{mode}"
    bodies = publish(nsqd, topic, 10_000)
    query, checkpoint = started(
        lambda checkpoint: stream(spark, nsqd, topic, checkpoint, mode,
                                  maxMessagesPerTrigger="1000")
        .writeStream.format("memory").queryName(topic)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds").start(), tmp_path)

    def count() -> int:
        return spark.sql(f"SELECT count(*) AS n FROM {topic}").first().n

    def progress() -> tuple[int, int, str]:
        return count(), len(query.recentProgress), query.status["message"]

    try:
        wait_progressing(lambda: count() >= 10_000, progress, "10,000 rows in the memory sink")
    finally:
        query.stop()
    rows = spark.sql(f"SELECT id, body, topic, channel, attempts, nsqd FROM {topic}").collect()
    assert len(rows) == 10_000
    assert len({r.id for r in rows}) == 10_000
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    assert {(r.topic, r.channel, r.nsqd) for r in rows} == {(topic, "spark", nsqd.tcp_address)}
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) >= 10 and max(batches) <= 1000
    assert (parts_logged(checkpoint) > 0) == (mode == "http")
    stats = wait_until(lambda: drained(nsqd, topic), what="channel depth 0, in_flight 0")
    assert stats["message_count"] == 10_000
    assert stats["timeout_count"] == 0 and stats["requeue_count"] == 0


def test_available_now_takes_what_is_queued_and_ends(spark, nsqd, tmp_path):
    bodies = publish(nsqd, "avail_now", 1500)
    out = tmp_path / "out"
    query, _ = started(
        lambda checkpoint: stream(spark, nsqd, "avail_now", checkpoint,
                                  maxMessagesPerTrigger="400")
        .select("id", "body", "timestamp").writeStream.format("parquet")
        .option("path", str(out)).option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start(), tmp_path)
    query.awaitTermination()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    assert len({r.id for r in rows}) == 1500
    assert all(abs(r.timestamp.timestamp() - time.time()) < 24 * 3600 for r in rows)
    wait_until(lambda: drained(nsqd, "avail_now"), what="channel depth 0, in_flight 0")


def slowdown() -> float:
    """How many times slower than a quiet machine this one runs now: its runnable tasks per
    core (the load average of the last minute), at least 1. A test whose subject is a
    timeout (TOUCH keeping messages in flight past it) scales the timeout by this, since
    every step that must happen within it (a thread woken, a request answered) slows so."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


@pytest.mark.parametrize("mode", MODES)
def test_a_batch_longer_than_the_message_timeout_loses_nothing(spark, nsqd, tmp_path, mode,
                                                               record_property):
    topic = f"slow_batch_{mode}"
    bodies = publish(nsqd, topic, 300)
    seen: list[bytes] = []
    timeout = round(slowdown(), 1)  # seconds: 1 on a quiet machine
    record_property("msg_timeout", timeout)

    def slow(batch, batch_id):
        rows = batch.select("body").collect()
        if batch_id == 0:
            time.sleep(4 * timeout)  # the workload: a batch four times the messages' timeout
        seen.extend(bytes(r.body) for r in rows)

    query, _ = started(
        lambda checkpoint: stream(spark, nsqd, topic, checkpoint, mode,
                                  msgTimeout=f"{timeout}s")
        .writeStream.foreachBatch(slow).option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start(), tmp_path)
    query.awaitTermination()
    assert sorted(seen) == sorted(bodies)  # each message once: nothing lost, nothing twice
    stats = wait_until(lambda: drained(nsqd, topic), what="channel depth 0, in_flight 0")
    # and the source held them all the while: none timed out and went back to the queue
    assert stats["timeout_count"] == 0 and stats["requeue_count"] == 0


def test_touching_many_messages_at_once(nsqd):
    """The HTTP driver's TOUCH: requests pipelined on one connection, more than one window
    of them, each answer counted (200 in flight, 404 not)."""
    topic = "touch_many"
    publish(nsqd, topic, 450)
    base = f"http://{nsqd.http_address}"
    with httpx.Client(timeout=DEADLINE) as client:
        taken = client.post(f"{base}/channel/consume", params={
            "topic": topic, "channel": "spark", "n": "450", "ttr": "600"}).json()["messages"]
        ids = [m["id"].encode() for m in taken]
        assert len(ids) == 450 > touch.WINDOW
        assert touch.touch_all(client, nsqd.http_address, topic, "spark", ids) == 450
        assert client.post(f"{base}/message/fin", params={"topic": topic, "channel": "spark"},
                           content=b"\n".join(ids[100:150])).status_code == 200
        assert touch.touch_all(client, f"http://{nsqd.http_address}", topic, "spark", ids) == 400
        assert touch.touch_all(client, nsqd.http_address, topic, "spark", []) == 0
        assert client.post(f"{base}/message/fin", params={"topic": topic, "channel": "spark"},
                           content=b"\n".join(ids[:100] + ids[150:])).status_code == 200
    assert channel_stats(nsqd, topic)["timeout_count"] == 0


def test_a_stream_refused_at_start_says_why(spark, tmp_path):
    """endingOffsets is for batch reads: a stream can tell only once it runs (Spark makes its
    reader then), and the query ends with the connector's error, not PySpark's own."""
    query, _ = started(
        lambda checkpoint: spark.readStream.format("nsq").option("nsqdHttp", "127.0.0.1:1")
        .option("topic", "t").option("endingOffsets", "latest").load()
        .writeStream.format("memory").queryName("refused")
        .option("checkpointLocation", str(checkpoint)).start(), tmp_path)
    wait_progressing(lambda: not query.isActive, lambda: query.status["message"],
                     "the query's end")
    with pytest.raises(Exception, match="OptionError: option endingOffsets is for batch reads"):
        query.awaitTermination()


class Driver:
    """``_spark_query.py`` run as its own driver process, its output in a file (a pipe
    nobody reads while it runs would fill with Spark's log and stop the driver)."""

    def __init__(self, source: tuple[str, str], topic, checkpoint: Path, out: Path, expected: int,
                 *extra: str) -> None:
        self.checkpoint, self.out = checkpoint, out
        self.log = out.parent / f"driver-{len(list(out.parent.glob('driver-*.log')))}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(QUERY_SCRIPT), *source, topic, str(checkpoint),
                 str(out), str(expected), *extra],
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=log)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def progress(self) -> tuple[int, int, int]:
        """What grows while the driver works: its log, the checkpoint, the sink."""
        def files(root: Path) -> int:  # os.walk: Spark removes directories meanwhile
            return sum(len(dirs) + len(names) for _, dirs, names in os.walk(root))
        return self.log.stat().st_size, files(self.checkpoint), files(self.out)

    def wait_for(self, condition, what: str, *, exiting: bool = False):
        """``wait_progressing`` on the driver's progress; fails at once if the driver exits
        first (unless exiting is what is awaited)."""
        def holds():
            if not exiting and self.proc.poll() is not None:
                raise AssertionError(f"the driver exited ({self.proc.returncode}) before "
                                     f"{what}:\n{self.output()}")
            return condition()

        return wait_progressing(holds, self.progress, what, details=self.output)

    def finish(self) -> int:
        """Its exit status, once it has ended by itself."""
        self.wait_for(lambda: self.proc.poll() is not None, "exit", exiting=True)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the driver and everything it started (its JVM and Python workers share
        the new session the test gave it), as a machine losing the driver would."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.mark.parametrize("mode", MODES)
def test_driver_killed_mid_batch_replays_it_from_the_checkpoint(spark, nsqd, tmp_path, mode,
                                                                record_property):
    topic = f"killed_{mode}"
    bodies = publish(nsqd, topic, 3000)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    out.mkdir()
    channel = ("--channel", "spark", "--msg-timeout", "5s")
    first = Driver(where(nsqd, mode), topic, checkpoint, out, 3000, *channel, "--stall-at", "2")
    try:
        stalled_file = first.wait_for(lambda: next(out.glob("stalled-*.json"), None),
                                      "batch 2 stalled in the first driver")
    finally:
        first.kill()
    stalled = set(json.loads(stalled_file.read_text()))
    assert stalled, "the cut batch had messages"

    second = Driver(where(nsqd, mode), topic, checkpoint, out, 3000, *channel)
    try:
        assert second.finish() == 0, second.output()
    finally:
        second.kill()

    rows = spark.read.parquet(str(out)).select("id", "body", "batch").collect()
    counts = collections.Counter(r.id for r in rows)
    duplicates = {i for i, n in counts.items() if n > 1}
    record_property("duplicates", len(duplicates))
    print(f"{mode}: driver killed in batch 2 ({len(stalled)} messages): {len(duplicates)} ids twice in "
          f"the sink, all from the cut batch")
    assert sorted({bytes(r.body) for r in rows}) == sorted(bodies)  # nothing missing
    assert duplicates <= stalled  # duplicates only from the batch that was cut
    assert max(counts.values()) <= 2
    assert {r.batch for r in rows if r.id in duplicates} == {2}  # the replay is batch 2 itself

    # The second driver exits right after its last batch: whatever of that batch Spark
    # committed without the source FINishing it comes back from nsqd, and a third run of
    # the query drops those redeliveries by id instead of passing them on again.
    print("after the second run:", channel_stats(nsqd, topic))
    more: list[str] = []
    ran_to_end(lambda _: (  # from the same checkpoint, whatever the attempt
        stream(spark, nsqd, topic, checkpoint, mode, idleTimeout="2s").writeStream
        .foreachBatch(lambda batch, _: more.extend(r.id for r in batch.select("id").collect()))
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()))
    assert more == []
    wait_until(lambda: drained(nsqd, topic), what="channel depth 0, in_flight 0")


# -- reads by offset ------------------------------------------------------------------------------

def publish_log(nsqd, topic: str, bodies: list[bytes]) -> None:
    """Publish to a topic with no channel: nsqd holds its messages (for the first channel to
    come), so a read by offset finds them all."""
    with httpx.Client(base_url=f"http://{nsqd.http_address}", timeout=DEADLINE) as client:
        for i in range(0, len(bodies), 1000):
            r = client.post("/mpub", params={"topic": topic}, content=b"\n".join(bodies[i:i + 1000]))
            assert r.status_code == 200, r.text


def log_bounds(nsqd, topic: str) -> tuple[int, int]:
    """The earliest offset of the topic's log on this nsqd, and the next."""
    doc = httpx.get(f"http://{nsqd.http_address}/topic/read", timeout=DEADLINE,
                    params={"topic": topic, "offset": str(1 << 62), "n": "1"}).json()
    return doc["earliest_offset"], doc["latest_offset"] + 1


def exactly_once(rows, bodies: list[bytes]) -> None:
    """Each offset once, and the bodies are those published."""
    counts = collections.Counter((r.nsqd, r.offset) for r in rows)
    repeated = {key: n for key, n in counts.items() if n > 1}
    assert not repeated, f"{len(repeated)} offsets read more than once: {sorted(repeated)[:5]}"
    got = collections.Counter(bytes(r.body) for r in rows)
    missing = collections.Counter(bodies) - got
    assert not missing, f"{sum(missing.values())} messages missing"
    assert got == collections.Counter(bodies)


KILL_POINTS = ("planned", "reading", "written", "before-commit", "after-commit")


def killed_at(point: str, batch: int, checkpoint: Path, out: Path) -> str | None:
    """What the checkpoint and the sink must show after a kill at ``point`` of ``batch``;
    None when they show it."""
    offsets = (checkpoint / "offsets" / str(batch)).exists()
    committed = (checkpoint / "commits" / str(batch)).is_file()
    written = (out / f"batch={batch}" / "_SUCCESS").exists()
    expected = {"planned": (True, False, False), "reading": (True, False, False),
                "written": (True, False, True), "before-commit": (True, False, True),
                "after-commit": (True, True, True)}[point]
    found = (offsets, committed, written)
    return None if found == expected else f"(offsets, commit, sink) {found}, not {expected}"


def test_driver_killed_at_five_points_of_a_batch_loses_and_repeats_nothing(spark, nsqd, tmp_path):
    """A read by offset, the checkpoint on the writer only, into a sink idempotent by batch
    id: the driver is SIGKILLed (JVM and all) at each of five points of a batch, one run
    after another on the same checkpoint, and the last run finishes the topic. Every message
    is in the sink exactly once."""
    topic = "killed_offsets"
    bodies = [f"{topic}-{i}".encode() for i in range(4000)]
    publish_log(nsqd, topic, bodies)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    out.mkdir()
    source = ("nsqdHttp", nsqd.http_address)
    for batch, point in enumerate(KILL_POINTS, start=1):
        driver = Driver(source, topic, checkpoint, out, len(bodies), "--kill-at", point,
                        "--kill-batch", str(batch))
        try:
            if point == "before-commit":
                driver.wait_for(lambda: (out / "commit-failed").exists(),
                                f"Spark failing to commit batch {batch}")
            else:
                driver.wait_for(lambda d=driver: d.proc.poll() is not None,
                                f"the kill at {point} of batch {batch}", exiting=True)
        finally:
            driver.kill()
        if point == "before-commit":  # what a crash there leaves: no commit file
            (checkpoint / "commits" / str(batch)).rmdir()
            (out / "commit-failed").unlink()
        assert killed_at(point, batch, checkpoint, out) is None, (
            f"{point} of batch {batch}: {killed_at(point, batch, checkpoint, out)}\n"
            f"{driver.output()}")
    last = Driver(source, topic, checkpoint, out, len(bodies))
    try:
        assert last.finish() == 0, last.output()
    finally:
        last.kill()
    assert not (checkpoint / "sources" / "nsq").exists()  # the reader kept no file
    exactly_once(spark.read.parquet(str(out)).collect(), bodies)


@pytest.mark.parametrize("mode", ["offset", "tcp", "http"])
def test_an_nsqd_restart_mid_stream_loses_nothing(spark, tmp_path, mode, record_property):
    """nsqd stopped (SIGTERM) and started again on its ports in the middle of a stream: the
    query goes on by itself (a read by offset retries its calls, a channel's consumers
    reconnect) and every message arrives; by offset each exactly once. A channel's messages
    in flight at the restart come again from nsqd (at least once)."""
    from nsq_testing import free_port

    args = [f"--tcp-address=127.0.0.1:{free_port()}", f"--http-address=127.0.0.1:{free_port()}",
            "--https-address=127.0.0.1:0", f"--data-path={tmp_path}"]
    nsqd = start_daemon("nsqd", args)
    topic = f"restarted_{mode}"
    first = [b"before-%d" % i for i in range(2000)]
    second = [b"after-%d" % i for i in range(2000)]
    if mode == "offset":
        publish_log(nsqd, topic, first)
        reader = (spark.readStream.format("nsq").option("nsqdHttp", nsqd.http_address)
                  .option("topic", topic).option("startingOffsets", "earliest"))
    else:
        publish(nsqd, topic, 0)  # the channel, before the messages
        publish_log(nsqd, topic, first)
        reader = (spark.readStream.format("nsq").option(*where(nsqd, mode))
                  .option("topic", topic).option("channel", "spark")
                  .option("checkpointLocation", str(tmp_path / "checkpoint")))
    rows: list = []
    query = (reader.option("maxOffsetsPerTrigger", "300").load()
             .writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_progressing(lambda: rows, lambda: len(query.recentProgress), "a first batch")
        assert len(rows) < len(first)  # the restart comes mid-stream
        nsqd.stop()  # SIGTERM: nsqd saves its log and exits
        nsqd = start_daemon("nsqd", args)
        publish_log(nsqd, topic, second)
        wait_progressing(lambda: {bytes(r.body) for r in rows} >= set(first + second),
                         lambda: (len(rows), query.status["message"]), "every message",
                         details=lambda: str(query.exception()))
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
        nsqd.stop()
    if mode == "offset":
        exactly_once(rows, first + second)
    else:
        counts = collections.Counter(bytes(r.body) for r in rows)
        record_property("duplicates", sum(n - 1 for n in counts.values()))
        assert set(counts) == set(first + second)


def test_starting_offsets_earliest_json_and_timestamp(spark, nsqd, tmp_path):
    topic = "starting"
    first, second = [b"a%d" % i for i in range(300)], [b"b%d" % i for i in range(200)]
    publish_log(nsqd, topic, first)
    last_of_first = httpx.get(f"http://{nsqd.http_address}/topic/read", timeout=DEADLINE, params={
        "topic": topic, "offset": "299", "n": "1"}).json()["messages"][0]["timestamp"]
    ms = last_of_first // 1_000_000 + 1  # the first millisecond after the first set
    wait_until(lambda: time.time_ns() > (ms + 1) * 1_000_000, what="the clock past it")
    publish_log(nsqd, topic, second)

    def read(name: str, **options: str) -> list:
        def start(attempt: int):
            reader = (spark.readStream.format("nsq").option("nsqdHttp", nsqd.http_address)
                      .option("topic", topic).option("maxOffsetsPerTrigger", "150"))
            for key, value in options.items():
                reader = reader.option(key, value)
            return (reader.load().writeStream.format("memory").queryName(f"{name}_{attempt}")
                    .option("checkpointLocation", str(tmp_path / f"{name}-{attempt}"))
                    .trigger(availableNow=True).start())

        query = ran_to_end(start)
        assert query.exception() is None
        return spark.sql(f"SELECT * FROM {query.name}").collect()

    earliest = read("from_earliest", startingOffsets="earliest")
    exactly_once(earliest, first + second)
    assert sorted(r.offset for r in earliest) == list(range(500))
    assert {(r.topic, r.nsqd, r.channel) for r in earliest} == {(topic, nsqd.http_address, None)}
    assert all(r.value == r.body for r in earliest)
    json_start = read("from_json", startingOffsets=json.dumps({topic: {nsqd.http_address: 250}}))
    assert sorted(r.offset for r in json_start) == list(range(250, 500))
    exactly_once(read("from_time", startingTimestamp=str(ms)), second)
    assert read("from_latest", startingOffsets="latest") == []


def test_starting_at_the_latest_reads_what_comes_next(spark, nsqd, tmp_path):
    topic = "latest_only"
    publish_log(nsqd, topic, [b"old-%d" % i for i in range(100)])
    rows: list = []
    query, _ = started(lambda checkpoint: (
        spark.readStream.format("nsq").option("nsqdHttp", nsqd.http_address)
        .option("topic", topic).load()  # startingOffsets latest: Kafka's default
        .writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds").start()), tmp_path)
    try:
        wait_progressing(lambda: query.recentProgress, lambda: query.status["message"],
                         "a first batch (where the latest was)")
        new = [b"new-%d" % i for i in range(150)]
        publish_log(nsqd, topic, new)
        wait_progressing(lambda: len(rows) >= len(new), lambda: len(query.recentProgress),
                         "the new messages")
    finally:
        query.stop()
    exactly_once(rows, new)


def test_available_now_stops_at_the_offsets_of_its_start(spark, nsqd, tmp_path):
    """A publisher keeps publishing while the query runs: the query reads exactly the
    offsets there were when it started (somewhere between before and after its start) and
    ends, and reports how far behind the latest each batch ended."""
    import threading

    topic = "available_now"
    publish_log(nsqd, topic, [b"x%d" % i for i in range(3000)])
    before = log_bounds(nsqd, topic)[1]
    stop = threading.Event()

    def keep_publishing() -> None:
        n = 0
        while not stop.is_set():
            publish_log(nsqd, topic, [b"y%d-%d" % (n, i) for i in range(50)])
            n += 1
            stop.wait(0.05)

    publisher = threading.Thread(target=keep_publishing)
    publisher.start()
    try:
        query = ran_to_end(lambda attempt: (
            spark.readStream.format("nsq").option("nsqdHttp", nsqd.http_address)
            .option("topic", topic).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "1000").load()
            .writeStream.format("memory").queryName(f"{topic}_{attempt}")
            .option("checkpointLocation", str(tmp_path / f"checkpoint-{attempt}"))
            .trigger(availableNow=True).start()))
        after = log_bounds(nsqd, topic)[1]
    finally:
        stop.set()
        publisher.join()
    assert query.exception() is None
    offsets = sorted(r.offset for r in spark.sql(f"SELECT offset FROM {query.name}").collect())
    assert offsets == list(range(len(offsets)))  # each once, from the first, no gap
    assert before <= len(offsets) < after  # what was there at its start, not what came later
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(progress) >= 3 and max(p["numInputRows"] for p in progress) <= 1000
    latest = json.loads(progress[0]["sources"][0]["latestOffset"])
    assert latest[topic][nsqd.http_address] >= before
    assert latest["maxOffsetsBehindLatest"] >= latest["minOffsetsBehindLatest"] >= 0
    assert latest["avgOffsetsBehindLatest"] >= 0
    assert json.loads(progress[-1]["sources"][0]["endOffset"]) == {
        topic: {nsqd.http_address: len(offsets)}}


def test_unreachable_nsqd_or_lookupd_fails_the_query_naming_it(spark, tmp_path):
    """Nothing listens on these ports: the query ends with UnreachableError naming the
    address once the timeout option has passed, rather than staying active and empty."""
    from nsq_testing import free_port

    cases = [("nsqdHttp", f"127.0.0.1:{free_port()}", {}, "nsqd"),
             ("lookupd", f"127.0.0.1:{free_port()}", {}, "nsqlookupd"),
             ("nsqd", f"127.0.0.1:{free_port()}", {"channel": "c"}, "nsqd")]
    for option, address, extra, who in cases:
        reader = (spark.readStream.format("nsq").option(option, address).option("topic", "t")
                  .option("timeout", "2s"))
        for key, value in extra.items():
            reader = reader.option(key, value)
        query, _ = started(lambda checkpoint, r=reader: (
            r.load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start()), tmp_path / option)
        try:
            wait_progressing(lambda q=query: not q.isActive, lambda q=query: q.status["message"],
                             f"the query's end ({option})")
        finally:
            query.stop()
        error = str(query.exception())
        assert "UnreachableError" in error and f"{who} {address}" in error, error
