"""The clickstream example (examples/clickstream) end to end on a real nsqd and a local Spark:
a generated set of page views in, and out the per-minute views and distinct users per page
(Parquet, each window once), the alerts on their topic, and the same windows from the files
nsq_to_file archived, all equal to what plain Python computes from the generated events."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nsq_testing import DEADLINE, Daemon, wait_exit, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "clickstream"))
from clickstream import events, generator, job, package
from clickstream.batch import aggregate_archive

pytestmark = pytest.mark.spark

WATERMARK_MS = 30_000
SPARK_DEADLINE = 300.0  # a whole query on a loaded 2-core machine


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    import nsq_spark

    session: Any = nsq_spark.local_session("clickstream-test")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def http_post(nsqd: Daemon, path: str, **params: str) -> httpx.Response:
    r = httpx.post(f"http://{nsqd.http_address}{path}", params=params, timeout=DEADLINE)
    r.raise_for_status()
    return r


def channel_stats(nsqd: Daemon, topic: str, channel: str) -> dict[str, Any]:
    stats = httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE,
                      params={"format": "json", "topic": topic, "channel": channel}).json()
    return stats["topics"][0]["channels"][0]


def finished(nsqd: Daemon, topic: str, channel: str) -> int:
    """Messages FINished by the channel's connected clients."""
    return sum(c["finish_count"] for c in channel_stats(nsqd, topic, channel)["clients"] or [])


def consume_all(nsqd: Daemon, topic: str, channel: str, count: int) -> list[dict[str, Any]]:
    """``count`` messages of the channel over HTTP (FINished as they come), then whatever else
    is there at that moment."""
    got: list[dict[str, Any]] = []

    def take() -> bool:
        r = http_post(nsqd, "/channel/consume", topic=topic, channel=channel, n="100")
        messages = r.json()["messages"]
        got.extend(json.loads(m["text"]) for m in messages)
        if messages:
            http_post_body(nsqd, "/message/fin", topic, channel,
                           "\n".join(m["id"] for m in messages))
        return len(got) >= count

    if count:
        wait_until(take, what=lambda: f"{len(got)} of {count} messages on {topic}/{channel}")
    take()  # anything beyond count (a duplicate) is there by now: the caller sees it
    return got


def http_post_body(nsqd: Daemon, path: str, topic: str, channel: str, body: str) -> None:
    httpx.post(f"http://{nsqd.http_address}{path}", params={"topic": topic, "channel": channel},
               content=body, timeout=DEADLINE).raise_for_status()


def windows_of(df: Any) -> dict[tuple[int, str], events.WindowStats]:
    from pyspark.sql import functions as F

    rows = df.select(F.unix_millis("window_start").alias("start"), "page", "views",
                     "unique_users").collect()
    found = {(r.start, r.page): events.WindowStats(r.views, r.unique_users) for r in rows}
    assert len(found) == len(rows), "a window written more than once"
    return found


def test_generated_events_close_their_windows_and_only_the_sale_alerts() -> None:
    generated = events.generate(2000, seed=7, watermark_ms=WATERMARK_MS)
    assert generated == events.generate(2000, seed=7, watermark_ms=WATERMARK_MS)
    closed = events.expected_windows(generated, watermark_ms=WATERMARK_MS)
    assert {start for start, _ in closed} == {events.START_MS + m * events.MINUTE_MS
                                              for m in range(5)}
    alerts = events.expected_alerts(closed)
    sale = events.START_MS + events.SALE_MINUTE * events.MINUTE_MS
    assert {(a.page, a.window_start) for a in alerts} == {(events.SALE_PAGE, sale)}


def test_the_alert_rule_follows_each_pages_own_rate() -> None:
    """Live traffic at the demo's 20 events a second for 20 minutes: a flash sale every
    fifth minute alerts, on the sale page only; busy pages (the home page has some 280 views a
    minute) and quiet ones do not."""
    import random

    rng = random.Random(3)
    views = []
    for minute in range(20):
        for _ in range(1200):
            page = events.pick_page(rng, minute)
            views.append(events.Event(f"u{rng.randrange(400):04d}", page,
                                      events.START_MS + minute * events.MINUTE_MS + rng.randrange(60_000)))
    alerts = events.expected_alerts(events.expected_windows(views))
    sale_minutes = {m for m in range(20) if m % 5 == events.SALE_MINUTE and m >= events.MIN_HISTORY}
    assert {(a.page, (a.window_start - events.START_MS) // events.MINUTE_MS) for a in alerts} == {
        (events.SALE_PAGE, m) for m in sale_minutes}
    assert all(a.views > events.FACTOR * a.baseline for a in alerts)


def test_stream_and_batch_paths_give_the_expected_windows_and_alerts(
        spark: Any, run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    nsqd = run_daemon("nsqd")
    # The job reads pageviews by offset: the topic keeps what its channels have read (here
    # nsq_to_file's archive) for an hour. Alerts are checked on a channel made beforehand.
    http_post(nsqd, "/topic/create", topic=events.TOPIC, retention="1h")
    http_post(nsqd, "/channel/create", topic=events.TOPIC, channel="archive")
    http_post(nsqd, "/topic/create", topic=events.ALERTS_TOPIC)
    http_post(nsqd, "/channel/create", topic=events.ALERTS_TOPIC, channel="check")
    archive = tmp_path / "archive"
    archive.mkdir()
    archiver_log = tmp_path / "nsq_to_file.log"
    with archiver_log.open("wb") as sink:
        archiver = subprocess.Popen(
            [sys.executable, "-m", "nsq_client.tools.nsq_to_file", "--topic", events.TOPIC,
             "--channel", "archive", "--nsqd-tcp-address", nsqd.tcp_address, "--gzip",
             "--output-dir", str(archive), "--sync-interval", "1s"],
            stdout=subprocess.DEVNULL, stderr=sink)
    try:
        generated = events.generate(2000, seed=7, watermark_ms=WATERMARK_MS)
        generator.publish(nsqd.http_address, generated)

        # The streaming path, until it has read everything and found nothing new.
        out = tmp_path / "out"
        config = job.JobConfig(out=str(out), checkpoint=str(tmp_path / "checkpoint"),
                               nsqd_http=nsqd.http_address, nsqd=nsqd.tcp_address,
                               watermark=f"{WATERMARK_MS // 1000} seconds",
                               max_per_trigger=700)  # windows close over several batches
        query = job.start(spark, config)
        assert query.awaitTermination(SPARK_DEADLINE), "the AvailableNow query did not end"
        assert query.exception() is None
        streamed = windows_of(job.views(spark, str(out)))
        closed = events.expected_windows(generated, watermark_ms=WATERMARK_MS)
        assert streamed == closed
        assert len(streamed) >= 5 * 8  # every page in every minute, near enough
        assert not (tmp_path / "checkpoint" / "sources" / "nsq").exists()  # Spark's offsets only

        expected = events.expected_alerts(closed)
        received = consume_all(nsqd, events.ALERTS_TOPIC, "check", len(expected))
        assert len(received) == len(expected)
        assert {events.Alert(a["window_start"], a["page"], a["views"], a["unique_users"],
                             a["baseline"]) for a in received} == expected
        for a in received:
            assert a["id"] == f"{a['page']}@{a['window_start']}"
            assert a["window_end"] - a["window_start"] == events.MINUTE_MS
            assert a["factor"] == events.FACTOR

        # The batch path over what nsq_to_file archived of the same topic.
        wait_until(lambda: finished(nsqd, events.TOPIC, "archive") >= len(generated),
                   what=lambda: f"nsq_to_file finished {finished(nsqd, events.TOPIC, 'archive')}")
    finally:
        archiver.send_signal(signal.SIGINT)
        wait_exit(archiver)
    assert archiver.returncode == 0, archiver_log.read_text()
    assert list(archive.glob(f"{events.TOPIC}.*.log.gz"))
    batched = windows_of(aggregate_archive(spark, str(archive), out=str(tmp_path / "batch")))
    assert batched == events.expected_windows(generated)
    assert {k: v for k, v in batched.items() if k in streamed} == streamed
    assert windows_of(spark.read.parquet(str(tmp_path / "batch"))) == batched


def test_a_batch_written_again_replaces_its_first_output(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    config = job.JobConfig(out=str(tmp_path / "out"), checkpoint=str(tmp_path / "cp"),
                           nsqd="127.0.0.1:1", factor=10**9)  # no alert: nothing published
    writer = job.BatchWriter(config)

    def windows(pages: list[str]) -> Any:
        rows = [(events.START_MS, events.START_MS + events.MINUTE_MS, p, 3, 2) for p in pages]
        df = spark.createDataFrame(rows, "s long, e long, page string, views long, unique_users int")
        return df.select(F.timestamp_millis("s").alias("window_start"),
                         F.timestamp_millis("e").alias("window_end"), "page", "views",
                         "unique_users")

    writer(windows(["/a", "/b"]), 3)
    writer(windows(["/a", "/b"]), 3)  # batch 3 again, as after a restart
    writer(windows(["/c"]), 4)
    writer(windows([]), 5)  # nothing closed: nothing written
    assert sorted(windows_of(job.views(spark, config.out))) == [
        (events.START_MS, "/a"), (events.START_MS, "/b"), (events.START_MS, "/c")]
    assert not (tmp_path / "out" / "views" / "batch_id=5").exists()


ZIP_CHECK = """
import sys
sys.path[:0] = sys.argv[1:3]
import clickstream.job, clickstream.generator, clickstream.batch, clickstream.__main__
import nsq_spark, nsq_spark.sink, nsq_spark.stream, nsq_spark.tcp, nsq_spark.datasource
import httpx, trio
httpx.Client().close()  # httpcore, h11, certifi: imported when a client is made
trio.run(trio.sleep, 0)
for name in sys.argv[3].split(","):
    if name in sys.modules:  # some are imported only when used
        assert sys.modules[name].__file__.startswith(sys.argv[1]), name
"""
# What a cluster's Python must have installed: compiled, or Spark's own.
COMPILED = ("pyspark", "py4j", "pyarrow", "pandas", "numpy", "dateutil", "pytz", "tzdata", "six")


def test_the_py_files_zip_carries_everything_but_compiled_packages(tmp_path: Path) -> None:
    """Without site-packages (python -S), with only the zip and the compiled packages on the
    path, as on a cluster's workers: the job's modules and the connector import, from the zip."""
    import sysconfig

    zipped = package.build(tmp_path / "pyfiles.zip")
    cluster_site = tmp_path / "site"
    cluster_site.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.split(".")[0] in COMPILED or entry.name.endswith(".libs"):
            (cluster_site / entry.name).symlink_to(entry)
    result = subprocess.run([sys.executable, "-S", "-c", ZIP_CHECK, str(zipped), str(cluster_site),
                             ",".join(package.PURE)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=DEADLINE * 4)
    assert result.returncode == 0, result.stderr


def _descendants(root: int) -> set[int]:
    """Every live process below ``root``, from /proc's parent links."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ctrl_c_on_the_demo_stops_it_with_one_line(
        run_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    """``make pipeline`` and Ctrl-C: the terminal sends SIGINT to the demo's whole process
    group (the driver, and whatever of Spark's JVM, its Python workers and nsq_to_file is in
    it). The demo must stop between batches with one line and exit 0, every process it
    started gone, not with Java stack traces from workers killed by the signal mid-task."""
    lookupd = run_daemon("nsqlookupd")
    nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}")
    out = tmp_path / "out"
    log = tmp_path / "demo.log"
    example = Path(__file__).resolve().parents[2] / "examples" / "clickstream"
    with log.open("wb") as sink:
        demo = subprocess.Popen(
            [sys.executable, "-m", "clickstream", "demo", "--lookupd", lookupd.http_address,
             "--nsqd-http", nsqd.http_address, "--nsqd", nsqd.tcp_address, "--out", str(out),
             "--trigger", "2 seconds", "--watermark", "1 hour"],  # no window closes: no tables
            cwd=example, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own group, as the terminal's foreground job
    started: set[int] = set()
    try:
        # Two batches committed: the query runs, with page views arriving.
        wait_until(lambda: (out / "_checkpoint" / "commits" / "1").exists(),
                   timeout=SPARK_DEADLINE, interval=0.2,
                   what=lambda: f"two batches committed; output:\n{log.read_text()[-3000:]}")
        started = _descendants(demo.pid)
        before = len(log.read_bytes())
        os.killpg(demo.pid, signal.SIGINT)
        code = wait_exit(demo, timeout=SPARK_DEADLINE)
        wait_until(lambda: not [pid for pid in started if _alive(pid)], timeout=DEADLINE,
                   what=lambda: f"the demo's processes gone: {[p for p in started if _alive(p)]}")
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(DEADLINE)
        for pid in started | _descendants(demo.pid):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    after = log.read_bytes()[before:].decode(errors="replace")
    # Spark's console progress bar ("[Stage 3:> (0 + 2) / 2]") redraws itself after "\r" and
    # is erased from a terminal when its stage ends: not a line the user is left with.
    lines = [part for part in re.split(r"[\r\n]", after)
             if part.strip() and not part.startswith("[Stage ")]
    assert code == 0, after
    assert len(lines) == 1, after
    assert lines[0].startswith("stopped after batch "), after
