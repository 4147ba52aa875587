"""HTTP API throughput: requests/s of nsqd and nsqlookupd routes over keep-alive connections.

    python -m bench.http [--duration 5] [--connections 1,8] [--routes ping,pub,pubttl,mpub,lookup]
                         [--tool auto|wrk|builtin] [--daemons LABEL=DIR ...] [--runs 1]
                         [--json FILE]

Starts its own nsqlookupd and an nsqd registered with it (127.0.0.1, kernel-chosen ports,
nsqd's data in a temporary directory; both stopped by pid and the directory removed at the
end), creates a topic on nsqd so that nsqlookupd's ``/lookup`` gives a real answer, then for
every route and every connection count drives the route for ``--duration`` seconds:

* ``ping``: nsqd ``GET /ping``;
* ``pub``: nsqd ``POST /pub?topic=...`` with a 100-byte body;
* ``pubttl``: the same with ``&ttl=3600`` (messages with an expiry);
* ``mpub``: nsqd ``POST /mpub?topic=...`` with 100 newline-separated 100-byte messages;
* ``lookup``: nsqlookupd ``GET /lookup?topic=...`` (the topic has one producer).

The published topic is deleted after each run (nsqd keeps the messages in memory:
``--mem-queue-size`` is 10,000,000; not more, because Go's nsqd allocates its memory queue,
8 bytes a message, whenever a topic is made). Each connection sends one request at a time and waits for
its answer (keep-alive, no pipelining).

The load generator is ``wrk -t1 -c<connections> -d<duration>s`` when wrk is installed
(POST bodies from a generated Lua script in a temporary directory), else a client of its own:
one selectors loop in this process over raw sockets, with the request bytes computed once,
reading each answer by its Content-Length. It is slower than wrk, so the two tools' figures
are not comparable.

``--daemons LABEL=DIR`` (repeatable) also starts the ``nsqd`` and ``nsqlookupd`` in ``DIR``
(Go's, say, as ``go=DIR``, or an older checkout's; the same flags, the same topic) and drives
every row on ours, then on each of them, in turn (``--runs`` times), so that all meet the
same load on the machine. Prints requests/s (messages/s for mpub), the daemon's CPU time per
request (user + system from ``/proc/<pid>/stat`` before and after the run), the daemon's and
the load generator's CPU use, and the 1-minute load average at the end of the run. See
``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nsq_testing import start_daemon
from nsq_testing.daemon import Daemon

LOOKUP_TOPIC = "bench_http_lookup"  # created once, so nsqd registers it with nsqlookupd
PUB_TOPIC = "bench_http"  # published to; deleted after each run
MESSAGE = b"m" * 100
MPUB_BODY = b"\n".join([MESSAGE] * 100)


@dataclass(frozen=True)
class Route:
    daemon: str  # "nsqd" or "nsqlookupd"
    method: str
    target: str
    body: bytes | None
    messages: int  # messages published per request

    @property
    def label(self) -> str:
        return f"{self.daemon} {self.method} {self.target.split('?')[0]}"


ROUTES = {
    "ping": Route("nsqd", "GET", "/ping", None, 0),
    "pub": Route("nsqd", "POST", f"/pub?topic={PUB_TOPIC}", MESSAGE, 1),
    "pubttl": Route("nsqd", "POST", f"/pub?topic={PUB_TOPIC}&ttl=3600", MESSAGE, 1),
    "mpub": Route("nsqd", "POST", f"/mpub?topic={PUB_TOPIC}", MPUB_BODY, 100),
    "lookup": Route("nsqlookupd", "GET", f"/lookup?topic={LOOKUP_TOPIC}", None, 0),
}


@dataclass
class Result:
    label: str  # whose daemons: "ours", or a --daemons label
    route: str
    daemon: str
    connections: int
    tool: str
    seconds: float
    requests: int
    errors: int  # answers other than 200, and socket errors
    requests_per_s: float
    messages_per_s: float | None
    daemon_cpu_us_per_request: float | None
    daemon_cpu_share: float | None  # of one core
    client_cpu_share: float | None
    loadavg_1m: float


# -- helpers --------------------------------------------------------------------------------
def cpu_times(pid: int) -> tuple[float, float] | None:
    """User and system CPU time of a process so far, in seconds (Linux ``/proc``: whole clock
    ticks, 10 ms here), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux /proc), None elsewhere."""
    times = cpu_times(pid)
    return None if times is None else times[0] + times[1]


def _loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _request_bytes(route: Route, host: str) -> bytes:
    head = f"{route.method} {route.target} HTTP/1.1\r\nHost: {host}\r\n"
    if route.body is not None:
        head += f"Content-Length: {len(route.body)}\r\n"
    return (head + "\r\n").encode() + (route.body or b"")


def _http(method: str, address: str, target: str) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{address}{target}", method=method,
                                 data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# -- load generators ------------------------------------------------------------------------
@dataclass
class Load:
    requests: int
    errors: int
    seconds: float
    client_cpu: float | None


class _Conn:
    __slots__ = ("buf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()


_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close", re.IGNORECASE)


def run_builtin(address: str, route: Route, connections: int, duration: float) -> Load:
    """Keep ``connections`` keep-alive connections busy for ``duration`` seconds, one request
    in flight on each; count the answers. A connection the server closes (``Connection:
    close``, as Hypercorn answers every 1,000th request of a connection) is opened again, as
    wrk does; one closed without an answer counts as an error."""
    host, port = address.rsplit(":", 1)
    request = _request_bytes(route, address)
    sel = selectors.DefaultSelector()
    conns: set[_Conn] = set()

    def connect() -> None:
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock)
        conns.add(conn)
        sel.register(sock, selectors.EVENT_READ, conn)
        sock.sendall(request)

    def drop(conn: _Conn) -> None:
        sel.unregister(conn.sock)
        conn.sock.close()
        conns.discard(conn)

    try:
        cpu_before = time.process_time()
        start = time.perf_counter()
        deadline = start + duration
        done = errors = 0
        for _ in range(connections):
            connect()
        now = start
        while now < deadline:
            for key, _ in sel.select(deadline - now):
                conn = key.data
                chunk = conn.sock.recv(65536)
                if not chunk:
                    errors += 1
                    drop(conn)
                    connect()
                    continue
                buf = conn.buf
                buf += chunk
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    continue
                match = _CONTENT_LENGTH.search(buf, 0, end + 2)
                if match is None:
                    raise RuntimeError(f"answer without Content-Length: {bytes(buf[:200])!r}")
                total = end + 4 + int(match.group(1))
                if len(buf) < total:
                    continue
                if buf[9:12] != b"200":
                    errors += 1
                closing = _CLOSE.search(buf, 0, end + 2) is not None
                del buf[:total]
                if buf:
                    raise RuntimeError("more than one answer to one request")
                done += 1
                if closing:
                    drop(conn)
                    connect()
                else:
                    conn.sock.sendall(request)
            now = time.perf_counter()
        return Load(done, errors, now - start, time.process_time() - cpu_before)
    finally:
        sel.close()
        for conn in conns:
            conn.sock.close()


def _lua_string(data: bytes) -> str:
    return '"' + "".join(c if c.isalnum() else f"\\{ord(c)}" for c in data.decode("ascii")) + '"'


def run_wrk(address: str, route: Route, connections: int, duration: float, work_dir: str) -> Load:
    """The same with ``wrk -t1 -c<connections> -d<seconds>s`` (whole seconds, at least 1)."""
    seconds = max(1, round(duration))
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s"]
    if route.method != "GET" or route.body is not None:
        script = Path(work_dir, f"{route.method}-{len(route.body or b'')}.lua")
        script.write_text(f'wrk.method = "{route.method}"\n'
                          f"wrk.body = {_lua_string(route.body or b'')}\n")
        cmd += ["-s", str(script)]
    cmd.append(f"http://{address}{route.target}")
    cpu_before = _children_cpu()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    client_cpu = _children_cpu() - cpu_before
    out = done.stdout
    total = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)\b", out)
    if done.returncode != 0 or total is None:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{out}{done.stderr}")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[total.group(3)]
    errors = 0
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non_2xx:
        errors += int(non_2xx.group(1))
    sock_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                            out)
    if sock_errors:
        errors += sum(int(n) for n in sock_errors.groups())
    return Load(int(total.group(1)), errors, float(total.group(2)) * scale, client_cpu)


# -- the daemons ----------------------------------------------------------------------------
class Daemons:
    """nsqlookupd, and nsqd registered with it, with the topic of ``/lookup`` created."""

    def __init__(self, label: str = "ours", bin_dir: str | None = None) -> None:
        """``bin_dir``: where another build's ``nsqd`` and ``nsqlookupd`` are (Go's)."""
        self.label = label
        self.data_dir = tempfile.mkdtemp(prefix="nsq-bench-http-")
        self.lookupd: Daemon | None = None
        self.nsqd: Daemon | None = None
        nsqd, lookupd = (("nsqd", "nsqlookupd") if bin_dir is None
                         else (os.path.join(bin_dir, "nsqd"), os.path.join(bin_dir, "nsqlookupd")))
        try:
            self.lookupd = start_daemon(
                lookupd, ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
                cwd=self.data_dir)
            self.nsqd = start_daemon(
                nsqd, ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                         f"--data-path={self.data_dir}", "--mem-queue-size=10000000",
                         f"--lookupd-tcp-address={self.lookupd.tcp_address}"],
                cwd=self.data_dir)
            self._register()
        except BaseException:
            self.stop()
            raise

    def _register(self) -> None:
        assert self.nsqd is not None and self.lookupd is not None
        status, body = _http("POST", self.nsqd.http_address, f"/topic/create?topic={LOOKUP_TOPIC}")
        if status != 200:
            raise RuntimeError(f"/topic/create: {status} {body!r}")
        deadline = time.monotonic() + 30
        while True:
            status, body = _http("GET", self.lookupd.http_address, ROUTES["lookup"].target)
            if status == 200 and json.loads(body).get("producers"):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"nsqd did not register {LOOKUP_TOPIC}: {status} {body!r}")
            time.sleep(0.05)

    def daemon(self, name: str) -> Daemon:
        daemon = self.nsqd if name == "nsqd" else self.lookupd
        assert daemon is not None
        return daemon

    def after_run(self, route: Route) -> None:
        if route.messages:
            assert self.nsqd is not None
            _http("POST", self.nsqd.http_address, f"/topic/delete?topic={PUB_TOPIC}")

    def stop(self) -> None:
        try:
            for daemon in (self.nsqd, self.lookupd):
                if daemon is not None:
                    daemon.stop(signal.SIGTERM)
        finally:
            shutil.rmtree(self.data_dir, ignore_errors=True)


# -- command line ---------------------------------------------------------------------------
def _list(choices: Any, convert: Any = str) -> Any:
    def parse(text: str) -> list[Any]:
        try:
            values = [convert(part.strip()) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a list: {text!r}") from None
        bad = [v for v in values if choices is not None and v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(map(str, bad)) or text!r}"
                + (f"; choose from {', '.join(choices)}" if choices else ""))
        return values
    return parse


def _connections(text: str) -> list[int]:
    values: list[int] = _list(None, int)(text)
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("connections must be positive")
    return values


def _labelled(text: str) -> tuple[str, str]:
    label, sep, directory = text.partition("=")
    if not (sep and label and directory):
        raise argparse.ArgumentTypeError(f"not LABEL=DIR: {text!r}")
    if not all(Path(directory, name).is_file() for name in ("nsqd", "nsqlookupd")):
        raise argparse.ArgumentTypeError(f"no nsqd and nsqlookupd in {directory}")
    return label, directory


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _duration(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.http", description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=_duration, default=5.0,
                   help="seconds per route and connection count (default 5; wrk: whole seconds)")
    p.add_argument("--connections", type=_connections, default=[1, 8],
                   help="comma-separated keep-alive connection counts (default 1,8)")
    p.add_argument("--routes", type=_list(ROUTES), default=list(ROUTES),
                   help=f"comma-separated subset of: {', '.join(ROUTES)} (default: all)")
    p.add_argument("--tool", choices=["auto", "wrk", "builtin"], default="auto",
                   help="load generator: wrk, the built-in client, or wrk if installed (default)")
    p.add_argument("--daemons", metavar="LABEL=DIR", action="append", default=[],
                   type=_labelled,
                   help="also run the nsqd and nsqlookupd in DIR (Go's: go=DIR), alternated "
                        "with ours row by row; repeatable")
    p.add_argument("--runs", type=_positive, default=1, metavar="N",
                   help="times every row is driven (default 1)")
    p.add_argument("--json", dest="json_path", metavar="FILE", default=None,
                   help="also write the results to FILE as JSON")
    return p


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def run_load(tool: str, address: str, route: Route, connections: int, duration: float,
             work_dir: str) -> Load:
    """``route`` at ``address`` driven by ``tool`` ("wrk" or "builtin"; ``work_dir`` for wrk's
    scripts) for ``duration`` seconds over ``connections`` connections."""
    if tool == "wrk":
        return run_wrk(address, route, connections, duration, work_dir)
    return run_builtin(address, route, connections, duration)


def drive(daemons: Daemons, name: str, connections: int, tool: str, duration: float,
          work_dir: str) -> Result:
    """Drive route ``name`` of ``daemons`` with ``tool`` ("wrk" or "builtin") for
    ``duration`` seconds over ``connections`` connections; the figures of that run."""
    route = ROUTES[name]
    daemon = daemons.daemon(route.daemon)
    cpu_before = _cpu_seconds(daemon.pid)
    load = run_load(tool, daemon.http_address, route, connections, duration, work_dir)
    cpu_after = _cpu_seconds(daemon.pid)
    daemons.after_run(route)
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    rate = load.requests / load.seconds if load.seconds > 0 else 0.0
    return Result(
        label=daemons.label, route=name, daemon=route.daemon, connections=connections,
        tool=tool, seconds=load.seconds, requests=load.requests, errors=load.errors,
        requests_per_s=rate,
        messages_per_s=rate * route.messages if route.messages > 1 else None,
        daemon_cpu_us_per_request=(cpu / load.requests * 1e6
                                   if cpu is not None and load.requests else None),
        daemon_cpu_share=cpu / load.seconds if cpu is not None and load.seconds else None,
        client_cpu_share=(load.client_cpu / load.seconds
                          if load.client_cpu is not None and load.seconds else None),
        loadavg_1m=_loadavg())


def _print(r: Result) -> None:
    print(f"{r.route:7} {r.daemon:10} {r.connections:5d} {r.requests_per_s:9,.0f} "
          f"{_fmt(r.messages_per_s, '10,.0f'):>10} "
          f"{_fmt(r.daemon_cpu_us_per_request, '10.0f'):>10} "
          f"{_fmt(r.daemon_cpu_share and r.daemon_cpu_share * 100, '9.0f'):>9}% "
          f"{_fmt(r.client_cpu_share and r.client_cpu_share * 100, '9.0f'):>9}% "
          f"{r.errors:6d} {r.loadavg_1m:5.2f} {r.label}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tool = args.tool
    if tool == "auto":
        tool = "wrk" if shutil.which("wrk") else "builtin"
    elif tool == "wrk" and not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk), use --tool builtin")
    results: list[Result] = []
    sets: list[Daemons] = []
    work_dir = tempfile.mkdtemp(prefix="nsq-bench-http-wrk-")
    try:
        sets.append(Daemons())
        for label, directory in args.daemons:
            sets.append(Daemons(label, directory))
        print(f"tool: {tool}; {args.duration:g} s per row; load average at start "
              f"{_loadavg():.2f}", flush=True)
        print(f"{'route':7} {'daemon':10} {'conns':>5} {'req/s':>9} {'msg/s':>10} "
              f"{'CPU µs/req':>10} {'daemon CPU':>10} {'client CPU':>10} {'errors':>6} {'load':>5}"
              f" {'whose'}")
        for _ in range(args.runs):
            for name in args.routes:
                for connections in args.connections:
                    for daemons in sets:
                        result = drive(daemons, name, connections, tool, args.duration, work_dir)
                        results.append(result)
                        _print(result)
    finally:
        for daemons in sets:
            daemons.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    if args.json_path:
        doc = {
            "settings": {"duration": args.duration, "connections": args.connections,
                         "routes": args.routes, "tool": tool,
                         "daemons": dict(args.daemons),
                         "runs": args.runs},
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpus": os.cpu_count()},
            "results": [asdict(r) for r in results],
        }
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
        print(f"results written to {args.json_path}")
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
