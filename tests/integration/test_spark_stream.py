"""The nsq streaming source in a real local Spark, against a real nsqd: every message once,
FINished only after Spark commits, replayed from the checkpoint after the driver is killed."""

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


def test_options_are_checked(spark, tmp_path):
    with pytest.raises(Exception, match="invalid topic name"):
        (spark.readStream.format("nsq").option("nsqd", "127.0.0.1:1").option("topic", "bad topic!")
         .option("channel", "c").load())
    with pytest.raises(Exception, match=r'"lookupd" .* or "nsqd"'):
        spark.readStream.format("nsq").option("topic", "t").load()
    query, _ = started(
        lambda checkpoint: spark.readStream.format("nsq").option("nsqd", "127.0.0.1:1")
        .option("topic", "t").load().writeStream.format("memory").queryName("no_channel")
        .option("checkpointLocation", str(checkpoint)).start(), tmp_path)
    wait_progressing(lambda: not query.isActive, lambda: query.status["message"],
                     "the query's end")
    with pytest.raises(Exception, match='option "channel" is required'):
        query.awaitTermination()


class Driver:
    """``_spark_query.py`` run as its own driver process, its output in a file (a pipe
    nobody reads while it runs would fill with Spark's log and stop the driver)."""

    def __init__(self, nsqd, mode, topic, checkpoint: Path, out: Path, expected: int, *extra: str
                 ) -> None:
        self.checkpoint, self.out = checkpoint, out
        self.log = out.parent / f"driver-{len(list(out.parent.glob('driver-*.log')))}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(QUERY_SCRIPT), *where(nsqd, mode), topic, str(checkpoint),
                 str(out), str(expected), "--msg-timeout", "5s", *extra],
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
    first = Driver(nsqd, mode, topic, checkpoint, out, 3000, "--stall-at", "2")
    try:
        stalled_file = first.wait_for(lambda: next(out.glob("stalled-*.json"), None),
                                      "batch 2 stalled in the first driver")
    finally:
        first.kill()
    stalled = set(json.loads(stalled_file.read_text()))
    assert stalled, "the cut batch had messages"

    second = Driver(nsqd, mode, topic, checkpoint, out, 3000)
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
    query = (stream(spark, nsqd, topic, checkpoint, mode, idleTimeout="2s").writeStream
             .foreachBatch(lambda batch, _: more.extend(r.id for r in batch.select("id").collect()))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert more == []
    wait_until(lambda: drained(nsqd, topic), what="channel depth 0, in_flight 0")
