"""How fast the daemons start, against a bare interpreter started at the same moment.

    python -m bench.startup [--runs 10] [--daemons nsqd,nsqlookupd,nsqadmin] [--busy N]
                            [--bytecode-cache] [--lookupd] [--metadata N] [--go-nsqd PATH]

Runs the console scripts installed next to this Python (``sys.executable``'s directory). Each
run measures, one right after the other, so that all see the same machine:

* ``python -c pass``: this Python, start to exit: the floor every daemon stands on;
* ``python -c "import trio"``: the floor of any Trio program (the ``x trio`` columns);
* for each daemon, ``--version`` and ``--help``: start to exit;
* for each daemon, from starting it (``Popen``) to its TCP port accepting a connection
  (nsqd, nsqlookupd) and to the first HTTP ``GET /ping`` answered 200, on free ports of
  127.0.0.1 (nsqd keeps its data in a temporary directory; nsqadmin is pointed at an
  nsqlookupd address nobody listens on, which it does not contact to answer ``/ping``);
  ``/ping`` answers OK only once the daemon serves every listener (the early start answers
  500 ``NOK - starting`` before). For nsqd, then, to the first delivery: right after that
  OK, a ``PUB`` on one connection, a ``SUB`` and ``RDY 1`` on another, until the message
  arrives (each connection with its ``IDENTIFY``). The daemon is then killed and its
  directory removed.

Prints, per measure, the median, min and max in milliseconds and ``x``: the median over the
runs of the measure divided by that run's ``python -c pass``. The last column is the CPU time
(user + system, Linux ``/proc``) the daemon had used when its first ``/ping`` was answered,
which depends much less on what else runs than the wall times do. ``--busy N`` starts N
processes that keep a core busy each for the whole measurement (ended by pid at the end), to
see the figures on a loaded machine. See ``docs/performance.md``.

Two variants of nsqd's start: ``--lookupd`` starts one nsqlookupd for the whole measurement
(ended by pid at the end) and gives nsqd its ``--lookupd-tcp-address``; nsqd's row then has a
``registered`` column (start to nsqlookupd's ``/nodes`` listing it, polled with the rest) and
says in how many runs it was registered by its first ``/ping``. ``--metadata N`` gives nsqd a
data path with an ``nsqd.dat`` of N topics with a channel each (as a restarted nsqd has).
``--go-nsqd PATH``: Go's nsqd binary, started and measured the same way in each run, as a
row of its own (``go nsqd``; its ``--version`` and ``--help`` are not timed).

The daemons inherit this process's environment. Where ``PYTHONDONTWRITEBYTECODE`` is set and
no ``.pyc`` files were installed (an editable workspace never has them for its own sources),
every start compiles every module it imports from source; ``--bytecode-cache`` runs the
daemons instead with a bytecode cache of their own (``PYTHONPYCACHEPREFIX``, a temporary
directory filled by one untimed run of each measure), as an ordinary installation would.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

DAEMONS = ("nsqd", "nsqlookupd", "nsqadmin")
PING_TIMEOUT = 60.0  # seconds before a daemon that never answers counts as a failure
POLL_INTERVAL = 0.002


_ENV: dict[str, str] | None = None  # the daemons' environment; None: this process's
_LOOKUPD: tuple[int, int] | None = None  # (TCP, HTTP) ports of the nsqlookupd for nsqd
_METADATA_TOPICS = 0  # topics (with a channel each) in the nsqd.dat nsqd starts with
_GO_NSQD: str | None = None  # Go's nsqd binary, measured beside ours ("go nsqd")
GO_NSQD = "go nsqd"


def _bin(name: str) -> str:
    if name == GO_NSQD:
        assert _GO_NSQD is not None
        return _GO_NSQD
    candidate = Path(sys.executable).with_name(name)
    if not candidate.exists():
        raise SystemExit(f"no {name} next to {sys.executable} (run make install)")
    return str(candidate)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _args(daemon: str, http_port: int, tcp_port: int, data_dir: str) -> list[str]:
    http = f"--http-address=127.0.0.1:{http_port}"
    if daemon in ("nsqd", GO_NSQD):
        lookupd = ([f"--lookupd-tcp-address=127.0.0.1:{_LOOKUPD[0]}",
                    "--broadcast-address=127.0.0.1"] if _LOOKUPD else [])
        return [http, f"--tcp-address=127.0.0.1:{tcp_port}", f"--data-path={data_dir}", *lookupd]
    if daemon == "nsqlookupd":
        return [http, f"--tcp-address=127.0.0.1:{tcp_port}"]
    return [http, f"--lookupd-http-address=127.0.0.1:{_free_port()}"]


def _accepting(port: int) -> bool:
    """True once a TCP connection to the port is accepted (the listener is up)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return True
    except OSError:
        return False


def _get(port: int, path: str, whole: bool = False) -> bytes:
    """The answer to ``GET <path>`` on the port (HTTP/1.0: closed after it), its status line
    alone unless ``whole``; empty while nothing listens yet."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
            reply = b""
            while whole or b"\r\n" not in reply:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return b""
    return reply


def _ping(port: int) -> bool:
    """True once ``GET /ping`` on the port answers 200; False while nothing listens yet."""
    return _get(port, "/ping").split(b" ", 2)[1:2] == [b"200"]


def _frame(sock: socket.socket) -> tuple[int, bytes]:
    """One V2 frame: its type and data."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise OSError("nsqd closed the connection")
            data += chunk
        return data

    size, kind = struct.unpack(">ii", exactly(8))
    return kind, exactly(size - 4)


def _identified(port: int) -> socket.socket:
    """A V2 connection to nsqd that has had its ``IDENTIFY`` answered."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=PING_TIMEOUT)
    body = json.dumps({"client_id": "bench", "hostname": "bench", "user_agent": "bench.startup",
                       "feature_negotiation": True}).encode()
    sock.sendall(b"  V2IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    if _frame(sock)[0] != 0:
        raise RuntimeError("IDENTIFY refused")
    return sock


def _delivered(port: int) -> bool:
    """A message PUBlished on one connection and delivered on another (SUB, RDY 1)."""
    with _identified(port) as producer, _identified(port) as consumer:
        producer.sendall(b"PUB startup\n" + struct.pack(">i", 5) + b"first")
        if _frame(producer) != (0, b"OK"):
            raise RuntimeError("PUB refused")
        consumer.sendall(b"SUB startup bench\n")
        if _frame(consumer) != (0, b"OK"):
            raise RuntimeError("SUB refused")
        consumer.sendall(b"RDY 1\n")
        while True:
            kind, data = _frame(consumer)
            if kind == 2:
                return data[26:] == b"first"


def _registered(lookupd_http_port: int, http_port: int) -> bool:
    """True once nsqlookupd's ``/nodes`` lists the nsqd whose HTTP port is ``http_port``."""
    reply = _get(lookupd_http_port, "/nodes", whole=True)
    head, _, body = reply.partition(b"\r\n\r\n")
    if head.split(b" ", 2)[1:2] != [b"200"]:
        return False
    return any(p.get("http_port") == http_port for p in json.loads(body)["producers"])


def _write_metadata(data_dir: str, topics: int) -> None:
    """An nsqd.dat of ``topics`` topics with a channel each, in NSQ's layout."""
    doc = {"topics": [{"name": f"t{i}", "paused": False,
                       "channels": [{"name": "c", "paused": False}]} for i in range(topics)],
           "version": "1.3.0"}
    Path(data_dir, "nsqd.dat").write_text(json.dumps(doc, separators=(",", ":")))


def time_command(argv: list[str], expect: str) -> float:
    """Seconds ``argv`` takes, start to exit; it must exit 0 and print ``expect``."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=_ENV)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or expect not in done.stdout + done.stderr:
        raise RuntimeError(f"{argv} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return elapsed


def time_bare() -> float:
    """Seconds ``python -c pass`` takes with this Python."""
    return time_command([sys.executable, "-c", "pass"], "")


def time_trio() -> float:
    """Seconds ``python -c "import trio"`` takes with this Python: any Trio program's floor."""
    return time_command([sys.executable, "-c", "import trio"], "")


def time_version(daemon: str) -> float:
    """Seconds ``<daemon> --version`` takes, start to exit."""
    return time_command([_bin(daemon), "--version"], daemon)


def time_help(daemon: str) -> float:
    """Seconds ``<daemon> --help`` takes, start to exit."""
    return time_command([_bin(daemon), "--help"], "-http-address")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_start(daemon: str) -> tuple[float, float, float, bool, float, float]:
    """Seconds from starting ``daemon`` to its TCP port accepting (NaN for nsqadmin, which
    has none), to its first ``/ping`` answered OK and to nsqlookupd listing it (NaN but for
    nsqd with ``--lookupd``); whether nsqlookupd listed it when its first ``/ping`` was
    answered (asked right after that answer, if not before); the CPU seconds it had
    used by its first ``/ping``; and, for nsqd, seconds to the first delivery made right
    after that ``/ping`` (``_delivered``; NaN for the others). Each is polled every
    ``POLL_INTERVAL``."""
    nsqd = daemon in ("nsqd", GO_NSQD)
    data_dir = tempfile.mkdtemp(prefix="nsq-startup-")
    http_port, tcp_port = _free_port(), _free_port()
    if nsqd and _METADATA_TOPICS:
        _write_metadata(data_dir, _METADATA_TOPICS)
    log = open(os.path.join(data_dir, "output.log"), "wb")  # noqa: SIM115 (closed below)
    checks: dict[str, Callable[[], bool]] = {}
    if nsqd and _LOOKUPD:
        lookupd_http = _LOOKUPD[1]
        checks["registered"] = lambda: _registered(lookupd_http, http_port)
    if daemon != "nsqadmin":
        checks["accepting"] = lambda: _accepting(tcp_port)
    checks["ping"] = lambda: _ping(http_port)
    times: dict[str, float] = {}
    try:
        start = time.perf_counter()
        process = subprocess.Popen([_bin(daemon), *_args(daemon, http_port, tcp_port, data_dir)],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=data_dir, env=_ENV)
        cpu = float("nan")
        by_ping = False
        try:
            while len(times) < len(checks):
                for name, check in checks.items():
                    if name not in times and check():
                        times[name] = time.perf_counter() - start
                        if name == "ping":
                            cpu = _cpu_seconds(process.pid)
                            registered = checks.get("registered")
                            if "registered" not in times and registered and registered():
                                times["registered"] = time.perf_counter() - start
                            by_ping = "registered" in times
                if len(times) < len(checks):
                    _wait(daemon, process, start, log)
            nan = float("nan")
            delivered = nan
            if nsqd:
                if not _delivered(tcp_port):
                    raise RuntimeError(f"{daemon} delivered another message")
                delivered = time.perf_counter() - start
            return (times.get("accepting", nan), times["ping"], times.get("registered", nan),
                    by_ping, cpu, delivered)
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
            process.wait()
    finally:
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def _wait(daemon: str, process: subprocess.Popen[bytes], start: float, log: BinaryIO) -> None:
    """Sleep before the next poll; the daemon must still be running, and not for too long."""
    if process.poll() is not None or time.perf_counter() - start > PING_TIMEOUT:
        log.flush()
        output = Path(log.name).read_text(errors="replace")
        raise RuntimeError(f"{daemon} did not start (exit code {process.poll()}):\n{output}")
    time.sleep(POLL_INTERVAL)


@contextmanager
def lookupd(wanted: bool) -> Iterator[None]:
    """With ``wanted``, an nsqlookupd for nsqd to register with meanwhile (``_LOOKUPD``),
    ended by pid after."""
    global _LOOKUPD
    if not wanted:
        yield
        return
    tcp_port, http_port = _free_port(), _free_port()
    process = subprocess.Popen([_bin("nsqlookupd"), f"--tcp-address=127.0.0.1:{tcp_port}",
                                f"--http-address=127.0.0.1:{http_port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        start = time.perf_counter()
        while not _ping(http_port):
            if process.poll() is not None or time.perf_counter() - start > PING_TIMEOUT:
                raise RuntimeError("nsqlookupd did not start")
            time.sleep(POLL_INTERVAL)
        _LOOKUPD = (tcp_port, http_port)
        yield
    finally:
        _LOOKUPD = None
        process.kill()
        process.wait()


@contextmanager
def busy(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU meanwhile, ended by pid after."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def _daemon_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in DAEMONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown daemon(s) {', '.join(unknown) or text!r}; choose from {', '.join(DAEMONS)}")
    return names


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


def _figures(seconds: list[float], bare: list[float] | None = None) -> str:
    """Median, min and max in ms, and with ``bare`` the median of the per-run ratios."""
    ms = [s * 1000 for s in seconds if s == s]
    if not ms:
        return f"{'-':>8} {'-':>7} {'-':>7}" + (f" {'-':>5}" if bare is not None else "")
    text = f"{statistics.median(ms):8.1f} {min(ms):7.1f} {max(ms):7.1f}"
    if bare is not None:
        ratios = [s / b for s, b in zip(seconds, bare, strict=True) if s == s]
        text += f" {statistics.median(ratios):5.1f}"
    return text


MEASURES = ("--version", "--help", "TCP accepting", "first /ping")
#: Beside the floor of a Trio program (``python -c "import trio"``): launch to ready and to
#: the first message delivered.
TRIO_MEASURES = ("first /ping", "first delivery")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=_positive, default=10, help="runs of each measure (default 10)")
    parser.add_argument("--daemons", type=_daemon_list, default=list(DAEMONS),
                        help=f"comma-separated subset of: {', '.join(DAEMONS)} (default: all)")
    parser.add_argument("--busy", type=_count, default=0,
                        help="processes keeping a core busy each meanwhile (default 0)")
    parser.add_argument("--bytecode-cache", action="store_true",
                        help="run the daemons with a bytecode cache of their own (see above)")
    parser.add_argument("--lookupd", action="store_true",
                        help="nsqd registers with an nsqlookupd (see above)")
    parser.add_argument("--metadata", type=_count, default=0, metavar="N",
                        help="nsqd starts with an nsqd.dat of N topics (default 0: none)")
    parser.add_argument("--go-nsqd", default=None, metavar="PATH",
                        help="Go's nsqd binary, measured beside ours (default: none)")
    args = parser.parse_args(argv)
    global _ENV, _METADATA_TOPICS, _GO_NSQD
    _METADATA_TOPICS = args.metadata
    _GO_NSQD = args.go_nsqd
    daemons = [*args.daemons, *([GO_NSQD] if args.go_nsqd else [])]
    cache_dir = None
    if args.bytecode_cache:
        cache_dir = tempfile.mkdtemp(prefix="nsq-startup-pyc-")
        _ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        _ENV["PYTHONPYCACHEPREFIX"] = cache_dir
        bytecode = "cached (PYTHONPYCACHEPREFIX, warmed)"
    elif os.environ.get("PYTHONDONTWRITEBYTECODE"):
        bytecode = "PYTHONDONTWRITEBYTECODE set: modules without a .pyc are compiled at each start"
    else:
        bytecode = "written and reused as usual"
    try:
        with lookupd(args.lookupd), busy(args.busy):
            _report(daemons, args.runs, bytecode, args.busy, warm=args.bytecode_cache)
    finally:
        _ENV = None
        _METADATA_TOPICS = 0
        _GO_NSQD = None
        if cache_dir is not None:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return 0


def _report(daemons: list[str], runs: int, bytecode: str, busy_count: int, warm: bool) -> None:
    nan = float("nan")
    if warm:  # fill the bytecode cache; not timed
        time_trio()
        for daemon in daemons:
            if daemon != GO_NSQD:
                time_version(daemon)
                time_help(daemon)
            time_start(daemon)
    bare: list[float] = []
    trio_floor: list[float] = []
    figures: dict[str, dict[str, list[float]]] = {
        d: {m: [] for m in (*MEASURES, *TRIO_MEASURES, "cpu", "registered", "by ping")}
        for d in daemons}
    for _ in range(runs):  # every measure in turn, each run, so that all see the same load
        for daemon in daemons:
            bare.append(time_bare())
            trio_floor.append(time_trio())
            row = figures[daemon]
            row["--version"].append(nan if daemon == GO_NSQD else time_version(daemon))
            row["--help"].append(nan if daemon == GO_NSQD else time_help(daemon))
            accepting, ping, registered, by_ping, cpu, delivered = time_start(daemon)
            row["TCP accepting"].append(accepting)
            row["first /ping"].append(ping)
            row["first delivery"].append(delivered)
            row["registered"].append(registered)
            row["by ping"].append(float(by_ping))
            row["cpu"].append(cpu)
    load = os.getloadavg()[0]
    variant = (" nsqd with an nsqlookupd;" if _LOOKUPD else "") + (
        f" nsqd with an nsqd.dat of {_METADATA_TOPICS} topics;" if _METADATA_TOPICS else "")
    print(f"{runs} runs; {busy_count} busy processes (load {load:.1f} at the end);{variant} "
          f"bytecode: {bytecode}; ms: median min max; x: median of each run's ratio to "
          "`python -c pass`")
    print(f"{'':12} " + "   ".join(f"{m:>30}" for m in MEASURES) + f"   {'CPU at /ping':>24}")
    print(f"{'python':12} {_figures(bare)}     (python -c pass)")
    for daemon in daemons:
        row = figures[daemon]
        own_bare = bare[daemons.index(daemon)::len(daemons)]
        print(f"{daemon:12} " + "   ".join(_figures(row[m], own_bare) for m in MEASURES)
              + f"   {_figures(row['cpu'])}", flush=True)
        if daemon in ("nsqd", GO_NSQD) and _LOOKUPD:
            print(f"{'':12} registered with nsqlookupd: {_figures(row['registered'], own_bare)}; "
                  f"by its first /ping in {sum(row['by ping']):.0f} of {runs} runs", flush=True)
    print("\nlaunch to ready, x trio: median of each run's ratio to `python -c \"import trio\"`")
    print(f"{'':12} " + "   ".join(f"{m:>30}" for m in TRIO_MEASURES))
    print(f"{'import trio':12} {_figures(trio_floor)}     (python -c \"import trio\")")
    for daemon in daemons:
        row = figures[daemon]
        own_trio = trio_floor[daemons.index(daemon)::len(daemons)]
        print(f"{daemon:12} " + "   ".join(_figures(row[m], own_trio) for m in TRIO_MEASURES),
              flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
