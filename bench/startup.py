"""How fast the daemons start: ``--version``, and from start to the first ``/ping`` answered.

    python -m bench.startup [--runs 10] [--daemons nsqd,nsqlookupd,nsqadmin]

Runs the console scripts installed next to this Python (``sys.executable``'s directory). For
each daemon, ``--runs`` times each:

* ``--version``: the wall time of ``<daemon> --version``, from start to exit;
* ``first /ping``: from starting the daemon (``Popen``) to the first HTTP ``GET /ping`` it
  answers with a 200, on a free port of 127.0.0.1 (nsqd keeps its data in a temporary
  directory; nsqadmin is pointed at an nsqlookupd address nobody listens on, which it does not
  contact to answer ``/ping``). The daemon is then killed and its directory removed.

Prints the median, min and max in milliseconds. The figures are wall times, so a busy machine
makes them worse; the last column, the CPU time (user + system, Linux ``/proc``) the daemon has
used when its first ``/ping`` is answered, depends much less on what else runs. See
``docs/performance.md``.

The daemons inherit this process's environment. Where ``PYTHONDONTWRITEBYTECODE`` is set and
no ``.pyc`` files were installed (an editable workspace never has them for its own sources),
every start compiles every module it imports from source; ``--bytecode-cache`` runs the
daemons instead with a bytecode cache of their own (``PYTHONPYCACHEPREFIX``, a temporary
directory filled by one untimed run of each measure), as an ordinary installation would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAEMONS = ("nsqd", "nsqlookupd", "nsqadmin")
PING_TIMEOUT = 30.0  # seconds before a daemon that never answers counts as a failure
POLL_INTERVAL = 0.002


_ENV: dict[str, str] | None = None  # the daemons' environment; None: this process's


def _bin(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    if not candidate.exists():
        raise SystemExit(f"no {name} next to {sys.executable} (run make install)")
    return str(candidate)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _args(daemon: str, http_port: int, data_dir: str) -> list[str]:
    http = f"--http-address=127.0.0.1:{http_port}"
    if daemon == "nsqd":
        return [http, f"--tcp-address=127.0.0.1:{_free_port()}", f"--data-path={data_dir}"]
    if daemon == "nsqlookupd":
        return [http, f"--tcp-address=127.0.0.1:{_free_port()}"]
    return [http, f"--lookupd-http-address=127.0.0.1:{_free_port()}"]


def _ping(port: int) -> bool:
    """True once ``GET /ping`` on the port answers 200; False while nothing listens yet."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            reply = b""
            while b"\r\n" not in reply:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return False
    return reply.split(b" ", 2)[1:2] == [b"200"]


def time_version(daemon: str) -> float:
    """Seconds ``<daemon> --version`` takes, start to exit."""
    start = time.perf_counter()
    done = subprocess.run([_bin(daemon), "--version"], capture_output=True, text=True, timeout=60,
                          env=_ENV)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or daemon not in done.stdout:
        raise RuntimeError(f"{daemon} --version failed ({done.returncode}): {done.stdout}{done.stderr}")
    return elapsed


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_first_ping(daemon: str) -> tuple[float, float]:
    """Seconds from starting ``daemon`` to its first ``/ping`` answered, and the CPU seconds
    it had used by then."""
    data_dir = tempfile.mkdtemp(prefix="nsq-startup-")
    port = _free_port()
    log = open(os.path.join(data_dir, "output.log"), "wb")  # noqa: SIM115 (closed below)
    try:
        start = time.perf_counter()
        process = subprocess.Popen([_bin(daemon), *_args(daemon, port, data_dir)],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=data_dir, env=_ENV)
        try:
            while not _ping(port):
                if process.poll() is not None or time.perf_counter() - start > PING_TIMEOUT:
                    log.flush()
                    output = Path(log.name).read_text(errors="replace")
                    raise RuntimeError(f"{daemon} did not answer /ping "
                                       f"(exit code {process.poll()}):\n{output}")
                time.sleep(POLL_INTERVAL)
            return time.perf_counter() - start, _cpu_seconds(process.pid)
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
            process.wait()
    finally:
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)


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


def _figures(seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return f"{statistics.median(ms):8.1f} {min(ms):8.1f} {max(ms):8.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=_positive, default=10, help="runs of each measure (default 10)")
    parser.add_argument("--daemons", type=_daemon_list, default=list(DAEMONS),
                        help=f"comma-separated subset of: {', '.join(DAEMONS)} (default: all)")
    parser.add_argument("--bytecode-cache", action="store_true",
                        help="run the daemons with a bytecode cache of their own (see above)")
    args = parser.parse_args(argv)
    global _ENV
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
        _report(args.daemons, args.runs, bytecode, warm=args.bytecode_cache)
    finally:
        _ENV = None
        if cache_dir is not None:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return 0


def _report(daemons: list[str], runs: int, bytecode: str, warm: bool) -> None:
    print(f"{runs} runs; bytecode: {bytecode}; ms: median min max")
    print(f"{'daemon':12} {'--version':>26}   {'first /ping':>26}   {'CPU at first /ping':>26}")
    for daemon in daemons:
        if warm:  # fill the bytecode cache; not timed
            time_version(daemon)
            time_first_ping(daemon)
        versions = [time_version(daemon) for _ in range(runs)]
        pings = [time_first_ping(daemon) for _ in range(runs)]
        print(f"{daemon:12} {_figures(versions)}   {_figures([p[0] for p in pings])}"
              f"   {_figures([p[1] for p in pings])}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
