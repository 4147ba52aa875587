"""The tools' pure parts: file naming and rotation, host pools, timing reports, JSON filters,
nsq_stat's sums, go-nsq option flags."""

import gzip
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nsq_client import Config
from nsq_client.tools._common import apply_opts
from nsq_client.tools._file_logger import FileLogger, FileOptions, filename_format, strftime
from nsq_client.tools._hostpool import EpsilonGreedy, HostPool, TimerMetrics
from nsq_client.tools.nsq_stat import report_line, totals
from nsq_client.tools.nsq_to_http import parse_headers
from nsq_client.tools.nsq_to_nsq import JSONFilter, RetryLater
from nsq_common import ChannelStats


def test_strftime_knows_nsqs_subset_only() -> None:
    when = time.mktime((2024, 3, 5, 7, 8, 9, 0, 0, -1))
    assert strftime("%Y-%m-%d_%H", when) == "2024-03-05_07"
    assert strftime("%y%m%d %I:%M:%S %p %%", when) == "240305 07:08:09 AM %"
    assert strftime("%j %Q", when) == "%j %Q"  # not in the subset: literal


def test_filename_format() -> None:
    opts = FileOptions()
    assert filename_format(opts, "t", "web1.example.com", 42) == "t.web1.<DATETIME>.log"
    gz = FileOptions(gzip=True)
    assert filename_format(gz, "t", "h", 1) == "t.h<REV>.<DATETIME>.log.gz"
    ident = FileOptions(host_identifier="<SHORT_HOST>-<HOSTNAME>", filename_format="<TOPIC>.<HOST>.<PID>")
    assert filename_format(ident, "t", "a.b", 7) == "t.a-a.b.7"
    with pytest.raises(ValueError, match="missing <REV>"):
        filename_format(FileOptions(rotate_size=10, filename_format="<TOPIC>.log"), "t", "h", 1)
    with pytest.raises(ValueError):
        filename_format(FileOptions(work_dir="/w", output_dir="/o", filename_format="x"), "t", "h", 1)


@pytest.fixture
def file_logger() -> Iterator[Callable[..., FileLogger]]:
    """``FileLogger(...)``, closed at the end also when the test fails (an open file left to the
    garbage collector is a ResourceWarning, an error here)."""
    made: list[FileLogger] = []

    def make(*args: object, **kwargs: object) -> FileLogger:
        files = FileLogger(*args, **kwargs)  # type: ignore[arg-type]
        made.append(files)
        return files

    yield make
    for files in made:
        files.close()  # a second close does nothing


class Clock:
    def __init__(self) -> None:
        self.now = time.mktime((2024, 3, 5, 7, 0, 0, 0, 0, -1))

    def __call__(self) -> float:
        return self.now


def test_rotation_by_size_interval_and_hour(tmp_path: Path,
                                            file_logger: Callable[..., FileLogger]) -> None:
    clock = Clock()
    opts = FileOptions(output_dir=str(tmp_path), rotate_size=10, rotate_interval=60.0)
    files = file_logger(opts, "t", hostname="h", pid=1, clock=clock)
    assert files.needs_rotation()  # nothing open yet
    files.write(b"0123456789\n")
    assert files.path.endswith("t.h-000000.2024-03-05_07.log")
    assert files.needs_rotation()  # 11 > 10 bytes
    files.update_file()
    assert files.path.endswith("-000001.2024-03-05_07.log")
    assert not files.needs_rotation()
    clock.now += 61
    assert files.needs_rotation()  # interval
    files.update_file()
    clock.now += 3600
    assert files.needs_rotation()  # a new hour, a new name, <REV> from 0 again
    files.update_file()
    assert files.path.endswith("t.h-000000.2024-03-05_08.log")
    files.close()
    assert sorted(os.listdir(tmp_path)) == [
        "t.h-000000.2024-03-05_07.log", "t.h-000000.2024-03-05_08.log",
        "t.h-000001.2024-03-05_07.log", "t.h-000002.2024-03-05_07.log"]


def test_existing_files_are_never_overwritten(tmp_path: Path,
                                              file_logger: Callable[..., FileLogger]) -> None:
    clock = Clock()
    (tmp_path / "t.h-000000.2024-03-05_07.log.gz").write_bytes(b"old")
    files = file_logger(FileOptions(output_dir=str(tmp_path), gzip=True), "t", hostname="h", pid=1,
                        clock=clock)
    files.write(b"new\n")
    assert files.path.endswith("-000001.2024-03-05_07.log.gz")
    files.close()
    assert (tmp_path / "t.h-000000.2024-03-05_07.log.gz").read_bytes() == b"old"


def test_plain_files_are_appended_to(tmp_path: Path, file_logger: Callable[..., FileLogger]) -> None:
    clock = Clock()
    (tmp_path / "t.h.2024-03-05_07.log").write_bytes(b"before\n")
    files = file_logger(FileOptions(output_dir=str(tmp_path)), "t", hostname="h", pid=1, clock=clock)
    files.write(b"after\n")
    files.close()
    assert (tmp_path / "t.h.2024-03-05_07.log").read_bytes() == b"before\nafter\n"


def test_gzip_syncs_make_whole_members_and_work_dir_moves(
        tmp_path: Path, file_logger: Callable[..., FileLogger]) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    opts = FileOptions(output_dir=str(out), work_dir=str(work), gzip=True)
    files = file_logger(opts, "t", hostname="h", pid=1, clock=Clock())
    files.write(b"one\n")
    files.sync()
    files.write(b"two\n")
    files.sync()
    data = (work / "t.h-000000.2024-03-05_07.log.gz").read_bytes()
    assert data.count(b"\x1f\x8b") >= 2 and gzip.decompress(data) == b"one\ntwo\n"
    (out / "t.h-000000.2024-03-05_07.log.gz").write_bytes(b"taken")  # a name taken meanwhile
    files.close()
    assert os.listdir(work) == []
    assert gzip.decompress((out / "t.h-000001.2024-03-05_07.log.gz").read_bytes()) == b"one\ntwo\n"


def test_host_pool_rests_failing_hosts() -> None:
    now = [0.0]
    pool = HostPool(["a", "b", "c"], clock=lambda: now[0])
    assert [pool.get() for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]
    pool.mark("b", RuntimeError("down"))
    assert {pool.get() for _ in range(4)} == {"a", "c"}
    now[0] = 31.0
    assert "b" in {pool.get() for _ in range(3)}
    pool.mark("b", RuntimeError("down"))
    now[0] = 31.0 + 59
    assert "b" not in {pool.get() for _ in range(4)}  # 60 s the second time
    for host in "ac":
        pool.mark(host, RuntimeError("down"))
    assert {pool.get() for _ in range(3)} == {"a", "b", "c"}  # all down: all back


def test_epsilon_greedy_prefers_the_fastest() -> None:
    pool = EpsilonGreedy(["slow", "fast"], rng=random.Random(3))
    for _ in range(5):
        pool.mark("slow", None, 0.5)
        pool.mark("fast", None, 0.01)
    picks = [pool.get() for _ in range(200)]
    assert picks.count("fast") > 150


def test_timer_metrics_report_every_n() -> None:
    metrics = TimerMetrics(4, "[aggregate]:")
    assert [metrics.status(d) for d in (0.001, 0.002, 0.003, 0.004)] == [None] * 4
    report = metrics.status(0.005)
    # the fifth replaced the first: 5, 2, 3, 4
    assert report == "[aggregate]: finished 4 - 99th: 5.00ms - 95th: 5.00ms - avg: 3.50ms"
    assert TimerMetrics(0, "").status(1.0) is None


def test_json_filter() -> None:
    f = JSONFilter("kind", "click", ["user", "n"])
    assert f.apply(b'{"kind":"click","user":7,"n":2.0,"x":1}') == b'{"n":2,"user":7}'
    assert f.apply(b'{"kind":"view","user":7}') is None
    assert f.apply(b"[1, 2]") is None
    with pytest.raises(RetryLater):
        f.apply(b'{"user":7}')
    numbers = JSONFilter("n", "3", [])
    assert numbers.apply(b'{"n":3}') == b'{"n":3}'
    assert numbers.apply(b'{"n":"3"}') == b'{"n":"3"}'
    assert numbers.apply(b'{"n":4}') is None
    assert JSONFilter("k", "", []).apply(b'{"k":null}') == b'{"k":null}'
    assert JSONFilter("k", "", []).apply(b'{"j":1}') is None


def test_nsq_stat_sums_channels_over_nsqd() -> None:
    reply = {"topics": [{"topic_name": "t", "channels": [
        {"channel_name": "c", "depth": 5, "backend_depth": 2, "in_flight_count": 1,
         "deferred_count": 0, "requeue_count": 3, "timeout_count": 1, "message_count": 50,
         "client_count": 2},
        {"channel_name": "other", "depth": 100}]}]}
    sums = totals([reply, reply, {"topics": None}], "t", "c")
    assert sums is not None
    assert (sums.depth, sums.memory_depth, sums.backend_depth, sums.in_flight_count,
            sums.deferred_count, sums.requeue_count, sums.timeout_count, sums.message_count,
            sums.client_count) == (10, 6, 4, 2, 0, 6, 2, 100, 4)
    assert totals([reply], "t", "missing") is None
    before = ChannelStats("", "", "t", "c", message_count=60, depth=4)
    assert report_line(sums, before, 2.0).split()[:2] == ["20", "17"]


def test_headers_and_consumer_opts() -> None:
    assert parse_headers(["X-A: 1", "B:two:three"]) == {"X-A": "1", "B": "two:three"}
    with pytest.raises(ValueError):
        parse_headers(["novalue:"])
    config = apply_opts(Config(), ["max_attempts,10", "snappy", "lookupd_poll_interval,15s"], "x")
    assert (config.max_attempts, config.snappy, config.lookupd_poll_interval) == (10, True, 15.0)
    with pytest.raises(SystemExit):
        apply_opts(Config(), ["nonsense,1"], "consumer-opt")
