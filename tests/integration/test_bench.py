"""The benchmark runs end to end on small counts (its figures are not checked here: speed is
measured by running it, not by tests; this only keeps it working)."""

import importlib.machinery
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)


def test_every_scenario_runs_with_both_clients(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = run_module("bench", "--count", "4000", "--runs", "1", "--client", "raw,library",
                      "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    results = {(r["queue"], r["scenario"], r["client"]): r for r in doc["results"]}
    assert len(results) == 2 * 4 * 2  # memory and disk, four scenarios, two clients
    for result in results.values():
        assert [run["messages"] for run in result["runs"]] == [4000]
        assert result["median_msgs_per_s"] > 0
    assert len(doc["library_vs_raw"]) == 8


def test_cycle_times_both_clients() -> None:
    done = run_module("bench.cycle", "--mpubs", "50", "--runs", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["raw", "library"]
    for row in rows:
        answer_to_write, write, write_to_answer = map(float, row[2:5])
        assert answer_to_write > 0 and write > 0 and write_to_answer > 0


def test_startup_times_every_daemon_and_a_bare_interpreter() -> None:
    done = run_module("bench.startup", "--runs", "1", "--busy", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 busy processes" in done.stdout
    first, second = done.stdout.split("\n\n")
    rows = {line.split()[0]: line.split()[1:] for line in first.splitlines()[2:]}
    assert set(rows) == {"python", "nsqd", "nsqlookupd", "nsqadmin"}
    # launch to ready and to the first delivery, beside python -c "import trio"
    floor, *lines = second.splitlines()[2:]
    assert floor.startswith("import trio") and float(floor.split()[2]) > 0
    ready = {line.split()[0]: line.split()[1:] for line in lines}
    assert set(ready) == {"nsqd", "nsqlookupd", "nsqadmin"}
    assert float(ready["nsqd"][0]) > 0 and float(ready["nsqd"][4]) > 0  # ping, delivery
    assert float(ready["nsqd"][4]) >= float(ready["nsqd"][0])
    assert ready["nsqlookupd"][4] == "-"  # no delivery but nsqd's
    assert float(rows["python"][0]) > 0  # python -c pass, ms
    for daemon in ("nsqd", "nsqlookupd", "nsqadmin"):
        # per measure: median, min, max (ms) and the ratio to python -c pass
        version, help_, accepting, ping = (rows[daemon][i:i + 4] for i in range(0, 16, 4))
        assert float(version[0]) > 0 and float(version[3]) > 0
        assert float(help_[0]) > 0 and float(ping[0]) > 0
        assert (accepting[0] == "-") == (daemon == "nsqadmin")
        if daemon != "nsqadmin":
            assert float(accepting[0]) > 0


def test_http_routes_with_the_builtin_client(tmp_path: Path) -> None:
    out = tmp_path / "http.json"
    done = run_module("bench.http", "--duration", "0.3", "--connections", "1,2", "--tool",
                      "builtin", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    routes = ("ping", "pub", "pubttl", "mpub", "lookup")
    rows = [line.split() for line in done.stdout.splitlines()[2:] if line.split()[0] in routes]
    assert [(row[0], row[2]) for row in rows] == [
        (route, conns) for route in routes for conns in ("1", "2")]
    for row in rows:
        assert float(row[3].replace(",", "")) > 0  # req/s
    results = json.loads(out.read_text())["results"]
    assert len(results) == 10
    assert all(r["requests"] > 0 and r["errors"] == 0 for r in results)
    assert all(r["messages_per_s"] > 0 for r in results if r["route"] == "mpub")


def test_floor_prints_every_server_beside_another_build(tmp_path: Path) -> None:
    # --go: here this environment's nsqd again (there is no Go here), so that the Go row and
    # the ratios to it are filled in; wrk when installed (a whole second a row), else the
    # built-in client.
    other = tmp_path / "other"
    other.mkdir()
    for name in ("nsqd", "nsqlookupd"):
        (other / name).symlink_to(Path(sys.executable).parent / name)
    out = tmp_path / "floor.json"
    tool = "wrk" if shutil.which("wrk") else "builtin"
    done = run_module("bench.floor", "--runs", "1", "--duration", "0.3", "--tool", tool,
                      "--go", str(other), "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    servers = ["bare-epoll", "bare-trio", "nsq_serving", "nsqd", "go"]
    table = done.stdout.split("\n\n", 1)[1].splitlines()
    assert table[1].startswith("server ") and set(table[2]) == {"-", " "}, done.stdout
    rows = [line.split() for line in table[3:3 + len(servers)]]
    assert [row[0] for row in rows] == servers, done.stdout
    first_cpu, go_cpu = float(rows[0][2]), float(rows[-1][2])
    for row in rows:
        rate, cpu, user, system = (float(cell.replace(",", "")) for cell in row[1:5])
        assert rate > 0 and float(row[6]) > 0 and float(row[8]) > 0  # req/s, its ratios
        assert cpu >= 0 and user >= 0 and system >= 0
        # a ratio to a CPU time of 0 is "-" (/proc's CPU time is in 10 ms ticks)
        assert row[5] == "-" if first_cpu == 0 else float(row[5]) >= 0
        assert row[7] == "-" if go_cpu == 0 else float(row[7]) >= 0
    assert rows[0][6] == "1.00" and rows[-1][8] == "1.00"
    results = json.loads(out.read_text())["results"]
    assert [r["server"] for r in results] == servers
    assert all(len(r["runs"]) == 1 and r["runs"][0]["requests"] > 0
               and r["runs"][0]["errors"] == 0 for r in results)


def test_http_pulling(tmp_path: Path) -> None:
    out = tmp_path / "pull.json"
    done = run_module("bench.pull", "--count", "2000", "--runs", "1", "--pullers", "1,2",
                      "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["pullers"] for r in runs] == [1, 2]
    assert all(r["messages_per_s"] > 0 and r["problems"] == [] for r in runs)



def test_lmstfy_jobs(tmp_path: Path) -> None:
    out = tmp_path / "lmstfy.json"
    done = run_module("bench.lmstfy", "--count", "300", "--runs", "1", "--connections", "1,2",
                      "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["connections"] for r in runs] == [1, 2]
    assert all(r["problems"] == [] for r in runs)
    assert all(r[phase]["jobs_per_s"] > 0 for r in runs
               for phase in ("publish", "bulk", "consume+ack"))


def test_scraping_while_publishing(tmp_path: Path) -> None:
    # A 0.5 s phase: the scraping one starts publishing once the scraper process is up and
    # goes on until it has scraped, so on a busy machine it runs longer instead of scraping
    # nothing.
    out = tmp_path / "metrics.json"
    done = run_module("bench.metrics", "--rate", "2000", "--duration", "0.5", "--pairs", "1",
                      "--topics", "2", "--scrape-interval", "0", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["scraping"] for r in runs] == [False, True]
    assert all(r["messages"] > 0 for r in runs)
    assert runs[1]["scrapes"] > 0


def test_writer_then_reader_for_fixed_times(tmp_path: Path) -> None:
    out = tmp_path / "wr.json"
    done = run_module("bench.writer_reader", "--runs", "1", "--runfor", "0.5", "--pause", "0.1",
                      "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"ours disk 1ch", "ours memory 1ch"}  # nsqd, queue, channels
    for (run,) in runs.values():
        write, read = run["write"], run["read"]
        assert write["messages"] > 0 and write["messages"] % 200 == 0
        assert read["messages"] > 0 and write["nsqd_us_per_msg"] > 0
        assert read["messages"] + read["extra"] + read["depth_left"] == write["messages"]
        assert write["written_bytes"] is not None  # /proc/<pid>/io


def test_the_reader_finds_every_id_in_runs_and_single_frames() -> None:
    # collect_fins copies the ids of a run of same-size messages a column at a time: runs of
    # two sizes, a lone message, a heartbeat between and a partial frame at the end must come
    # out as the frame-by-frame reading gives them.
    import socket

    sys.path.insert(0, str(ROOT))
    from nsq_common import MESSAGE_HEADER, FrameType

    from bench import workers

    def frames(size: int, first: int, n: int) -> tuple[bytes, list[bytes]]:
        ids = [b"%016x" % (first + i) for i in range(n)]
        body = b"b" * size
        data = b"".join(workers.FRAME.pack(4 + 26 + size, FrameType.MESSAGE)
                        + MESSAGE_HEADER.pack(7, 1) + i + body for i in ids)
        return data, ids

    heartbeat = workers.FRAME.pack(4 + 11, FrameType.RESPONSE) + b"_heartbeat_"
    parts = [frames(100, 0, 5), (heartbeat, []), frames(37, 100, 1), frames(100, 200, 2),
             frames(37, 300, 3), frames(100, 400, 4)]
    data = b"".join(d for d, _ in parts)
    data, want = data[:-50], [i for _, ids in parts for i in ids][:-1]
    buf = bytearray(1 << 16)
    buf[:len(data)] = data
    fins = bytearray(b"FIN 0123456789abcdef\n" * 100)
    ours, nsqd = socket.socketpair()
    with ours, nsqd:
        pos, k = workers.collect_fins(buf, len(data), fins, ours)
        assert nsqd.recv(16) == b"NOP\n"
    assert (pos, k) == (len(data) - (4 + 4 + 26 + 100 - 50), len(want))
    assert bytes(fins[:k * workers.FIN_LEN]) == b"".join(b"FIN %s\n" % i for i in want)


def test_writer_reader_channels_and_bytes_written(tmp_path: Path) -> None:
    """--channels and --nsqd label the blocks; --mem-queue-size=0 writes every message, once
    whatever the number of channels: about its 130-byte record a message."""
    out = tmp_path / "wr.json"
    done = run_module("bench.writer_reader", "--runs", "1", "--runfor", "0.5", "--pause", "0.1",
                      "--mem-queue-size", "0", "--channels", "2", "--nsqd", "this=",
                      "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"this mem0 2ch"}
    (run,) = runs["this mem0 2ch"]
    assert 125 < run["write"]["written_bytes_per_msg"] < 200, run["write"]


def test_replication_publishes_in_every_setup_and_times_a_failover(tmp_path: Path) -> None:
    out = tmp_path / "repl.json"
    # --nsqd: another nsqd without etcd beside this one (here the same program again)
    again = Path(sys.executable).parent / "nsqd"
    done = run_module("bench.replication", "--runs", "1", "--count", "300", "--batch", "20",
                      "--replicas", "1,2", "--nsqd", f"again={again}", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert set(doc["runs"]) == {f"{mode} {setup}" for mode in ("pub", "mpub")
                                for setup in ("none (no etcd)", "none (no etcd) again",
                                              "replicas 1", "replicas 2")}
    for key, (run,) in doc["runs"].items():
        assert run["messages"] == 300 and run["msgs_per_s"] > 0
        assert run["commands"] == (300 if key.startswith("pub ") else 15)
        assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["max_ms"]
        assert "latencies_ms" not in run  # (pooled for the table, not written)
        # the run-queue waits (/proc/<pid>/schedstat) of the topic's nodes, then the producer
        assert len(run["run_queue_ms"]) == (3 if "replicas 2" in key else 2)
        assert all(w is not None and w >= 0 for w in run["run_queue_ms"])
        # one nsqd without etcd; the two nodes of the cluster otherwise, the leader first
        assert len(run["nsqd_us_per_msg"]) == (1 if "none" in key else 2)
        assert run["leader_us_per_msg"] is not None  # (/proc/<pid>/stat; 10 ms ticks)
        assert (run["follower_us_per_msg"] is None) == ("replicas 2" not in key)
    (failover,) = doc["failovers"]["2"]  # the lease (6 s) lapses before anyone may lead
    assert failover["first_delivery_s"] > 1 and failover["first_publish_s"] > 1
    assert "failover replicas 2" in done.stdout
    assert "wait" in done.stdout and "mpub replicas 2" in done.stdout


def test_goals_prints_every_path_beside_another_build_and_the_form(tmp_path: Path) -> None:
    # --go: a directory holding nsqd and nsqlookupd; here this environment's again (there is
    # no Go here), so that the columns beside ours and the ratios are filled in.
    other = tmp_path / "other"
    other.mkdir()
    for name in ("nsqd", "nsqlookupd"):
        (other / name).symlink_to(Path(sys.executable).parent / name)
    out = tmp_path / "goals.json"
    done = run_module("bench.goals", "--runs", "1", "--tool", "builtin", "--duration", "0.5",
                      "--runfor", "0.5", "--pause", "0.1", "--lmstfy-count", "300",
                      "--go", str(other), "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    titles = ("nsqd HTTP POST /pub", "nsqlookupd HTTP GET /lookup", "nsqd TCP MPUB into memory",
              "nsqd TCP consume from memory", "lmstfy publish", "lmstfy consume+ack")
    lines = done.stdout.splitlines()
    rows = {title: re.split(r"\s{2,}", line[len(title):].strip())
            for title in titles for line in lines if line.startswith(title + " ")}
    assert set(rows) == set(titles), done.stdout
    for title, cells in rows.items():
        unit, ours_rate, ours_us, against, their_rate, their_us, us_ratio, rate_ratio = cells
        assert float(ours_rate.replace(",", "")) > 0 and float(ours_us) >= 0
        if title.startswith("lmstfy"):  # no lmstfy in Go's NSQ, and no --lmstfy-url here
            assert unit == "jobs/s"
            assert [against, their_rate, their_us, us_ratio, rate_ratio] == ["-"] * 5
            continue
        assert unit in ("req/s", "msg/s") and against == "Go"
        assert float(their_rate.replace(",", "")) > 0 and float(rate_ratio) > 0
        if float(their_us) > 0:  # (/proc's CPU time is in 10 ms ticks)
            assert float(us_ratio) == pytest.approx(float(ours_us) / float(their_us), rel=0.01)
    form = [line for line in lines if line.startswith("form: ")]
    assert len(form) == 1 and re.match(r"form: (plain Python|compiled): ", form[0])
    doc = json.loads(out.read_text())
    assert [r["path"] for r in doc["results"]] == [
        "http-pub", "http-lookup", "tcp-publish", "tcp-consume", "lmstfy-publish",
        "lmstfy-consume"]
    assert all(len(r["ours_runs"]) == 1 and r["failures"] == [] for r in doc["results"])
    assert doc["form"]["line"] == form[0]


def test_goals_tells_extension_modules_from_python_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.goals import form_line, module_forms

    package = tmp_path / "formpkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plain.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    # found, never loaded: an extension module's file name is enough for import's finder
    (package / "sub" / f"fast{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    forms = module_forms(("formpkg",))
    assert forms == {"formpkg": "plain", "formpkg.plain": "plain", "formpkg.sub": "plain",
                     "formpkg.sub.fast": "compiled"}
    assert form_line(forms, []).startswith(
        "form: compiled: 1 of the 4 modules of formpkg are extension modules (formpkg.sub.fast)")
    assert form_line({"nsqd": "plain"}, None).startswith("form: plain Python: all 1 modules")
