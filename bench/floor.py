"""``python -m bench.floor``: the floor under our HTTP request path, ``GET /ping`` from a bare
event loop up to Go's nsqd.

    python -m bench.floor [--runs 3] [--duration 5] [--connections 8] [--tool auto|wrk|builtin]
                          [--go DIR] [--json FILE]

How much of a request's CPU time is Python's event loop, how much our HTTP edge, how much
nsqd's own, against Go's whole ``/ping``? Each server below runs as its own process on
127.0.0.1 (a kernel-chosen port; stopped by pid at the end) and is driven as ``bench.http``
drives a route, with its driver: ``wrk -t1 -c8`` for ``--duration`` seconds over keep-alive
connections, one request in flight on each (the built-in client where wrk is not installed,
or with ``--tool builtin``: slower, and its figures not comparable with wrk's), the server's
CPU time per request from ``/proc/<pid>/stat`` (user and system) over the measured window:

* ``bare-epoll``: plain Python, its own edge-triggered ``select.epoll`` loop: accept, read
  until the socket would block, and for every read that brought bytes write one fixed
  ``HTTP/1.1 200 OK`` with ``Content-Length: 2`` and ``OK``; no parsing (one answer a read
  is one a request while each connection has one request in flight, as here). What any
  Python server pays at least: the interpreter's system calls and a loop around them;
* ``bare-trio``: the same in Trio: ``trio.serve_tcp``, one task per connection, ``os.read``
  on the socket's descriptor, ``trio.lowlevel.wait_readable`` when it would block,
  ``os.write`` of the fixed answer. Trio's scheduler and I/O manager on top of the above;
* ``nsq_serving``: our HTTP server, ``serve_http`` with a ``Router`` whose one route is
  ``GET /ping`` answering ``plain_text("OK")`` (not logged), the garbage collector tuned as
  nsqd tunes it: our edge (parsing, routing, the answer's head) without nsqd;
* ``nsqd``: our nsqd's ``GET /ping`` (started as ``bench.http`` starts it, beside its
  nsqlookupd);
* ``go``, with ``--go DIR``: Go's nsqd's ``GET /ping`` (``DIR`` holds Go's ``nsqd`` and
  ``nsqlookupd``; the same flags as ours).

The servers 1-3 are this module run again as ``python -m bench.floor --serve KIND``, which
prints the address it listens on. In each of ``--runs`` runs every server is driven in turn,
so that all meet the same load on the machine. Prints per server the medians of requests/s
and of CPU µs per request (and of its user and system parts), and the ratios of both to the
first row and to Go's. See ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from . import http
from .report import cell, daemons_dir, positive, render

#: Every read of a bare server gets this answer.
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK"
HOST = "127.0.0.1"
PING = http.ROUTES["ping"]


# -- the bare servers (run in a child: python -m bench.floor --serve KIND) ---------------------

def _listening(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(1024)
    return sock


def _ready(sock: socket.socket) -> None:
    host, port = sock.getsockname()[:2]
    print(f"listening on {host}:{port}", flush=True)


def serve_bare_epoll(port: int) -> None:
    """An edge-triggered epoll loop: one fixed answer per read, no parsing."""
    listener = _listening(port)
    listener.setblocking(False)
    epoll = select.epoll()
    epoll.register(listener.fileno(), select.EPOLLIN | select.EPOLLET)
    conns: dict[int, socket.socket] = {}
    _ready(listener)
    lfd = listener.fileno()
    while True:
        for fd, _ in epoll.poll():
            if fd == lfd:
                while True:
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        break
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    conns[conn.fileno()] = conn
                    epoll.register(conn.fileno(), select.EPOLLIN | select.EPOLLET)
                continue
            conn = conns[fd]
            while True:
                try:
                    data = conn.recv(65536)
                    if data:
                        conn.send(ANSWER)  # 38 bytes into an empty send buffer: never short
                        continue
                except BlockingIOError:
                    break
                except ConnectionError:
                    pass
                epoll.unregister(fd)  # closed by the client
                del conns[fd]
                conn.close()
                break


def serve_bare_trio(port: int) -> None:
    """One Trio task per connection: ``os.read``, ``wait_readable``, ``os.write``."""
    import trio

    async def connection(stream: trio.SocketStream) -> None:
        fd = stream.socket.fileno()
        try:
            while True:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(fd)
                    continue
                if not data:
                    return
                os.write(fd, ANSWER)  # as above: never short
        except ConnectionError:
            return
        finally:
            await stream.aclose()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, connection, port, host=HOST))
            _ready(listeners[0].socket)

    trio.run(main)


def serve_nsq_serving(port: int) -> None:
    """``nsq_serving.serve_http`` with a ``Router`` answering only ``GET /ping``."""
    import trio
    from nsq_serving import Router, plain_text, serve_http
    from starlette.requests import Request
    from starlette.responses import Response

    async def ping(request: Request) -> Response:
        return plain_text("OK")

    router = Router()
    router.add("GET", "/ping", ping, logged=False)
    listener = _listening(port)
    from nsqd.__main__ import tune_gc

    tune_gc()  # nsqd's collector settings, once the server's modules are loaded, as nsqd does

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_http, router, [listener])
            _ready(listener)

    trio.run(main)


SERVE: dict[str, Callable[[int], None]] = {
    "bare-epoll": serve_bare_epoll,
    "bare-trio": serve_bare_trio,
    "nsq_serving": serve_nsq_serving,
}


# -- the servers as the parent sees them --------------------------------------------------------

class Child:
    """``python -m bench.floor --serve KIND`` on a kernel-chosen port."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.floor", "--serve", kind, "--port", "0"],
            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
        try:
            self.address = self._address(deadline=time.monotonic() + 60)
        except BaseException:
            self.stop()
            raise

    def _address(self, deadline: float) -> str:
        assert self.process.stdout is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.kind}: no address within 60 s")
            if select.select([self.process.stdout], [], [], left)[0]:
                line = self.process.stdout.readline()
                if line.startswith("listening on "):
                    return line.split()[-1]
                if not line:
                    raise RuntimeError(f"{self.kind} exited ({self.process.wait()})")

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process.stdout is not None:
            self.process.stdout.close()


@dataclass
class Server:
    name: str
    pid: int
    address: str
    stop: Callable[[], None]


def start_servers(go: str | None) -> list[Server]:
    """Every server, in the table's order; stopped again if one fails to start."""
    servers: list[Server] = []
    try:
        for kind in SERVE:
            child = Child(kind)
            servers.append(Server(kind, child.pid, child.address, child.stop))
        sides = [("nsqd", http.Daemons())]
        if go:
            sides.append(("go", http.Daemons("go", go)))
        for name, daemons in sides:
            servers.append(Server(name, daemons.daemon("nsqd").pid,
                                  daemons.daemon("nsqd").http_address, daemons.stop))
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: list[Server]) -> None:
    for server in servers:
        try:
            server.stop()
        except Exception as exc:  # the others are stopped all the same
            print(f"stopping {server.name}: {exc!r}", file=sys.stderr)


# -- runs and the table ------------------------------------------------------------------------

@dataclass
class Run:
    requests_per_s: float
    requests: int
    errors: int
    user_us: float | None  # the server's CPU time per request
    system_us: float | None

    @property
    def cpu_us(self) -> float | None:
        if self.user_us is None or self.system_us is None:
            return None
        return self.user_us + self.system_us


@dataclass
class Row:
    name: str
    runs: list[Run] = field(default_factory=list)

    def median(self, figure: str) -> float | None:
        values = [v for v in (getattr(r, figure) for r in self.runs) if v is not None]
        return statistics.median(values) if values else None


def measure(server: Server, tool: str, connections: int, duration: float,
            work_dir: str) -> Run:
    before = http.cpu_times(server.pid)
    load = http.run_load(tool, server.address, PING, connections, duration, work_dir)
    after = http.cpu_times(server.pid)
    user = system = None
    if before is not None and after is not None and load.requests:
        user = (after[0] - before[0]) / load.requests * 1e6
        system = (after[1] - before[1]) / load.requests * 1e6
    rate = load.requests / load.seconds if load.seconds > 0 else 0.0
    return Run(rate, load.requests, load.errors, user, system)


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


def summary(rows: list[Row]) -> list[dict[str, Any]]:
    first = rows[0]
    go = next((r for r in rows if r.name == "go"), None)
    table = []
    for row in rows:
        rate, cpu = row.median("requests_per_s"), row.median("cpu_us")
        table.append({
            "server": row.name, "requests_per_s": rate, "cpu_us": cpu,
            "user_us": row.median("user_us"), "system_us": row.median("system_us"),
            "cpu_to_first": _ratio(cpu, first.median("cpu_us")),
            "rate_to_first": _ratio(rate, first.median("requests_per_s")),
            "cpu_to_go": None if go is None else _ratio(cpu, go.median("cpu_us")),
            "rate_to_go": None if go is None else _ratio(rate, go.median("requests_per_s")),
            "runs": [asdict(r) | {"cpu_us": r.cpu_us} for r in row.runs],
        })
    return table


def print_table(table: list[dict[str, Any]]) -> None:
    first = table[0]["server"]
    headers = ("server", "req/s", "CPU µs/req", "user µs", "system µs", f"µs/{first}",
               f"req/s/{first}", "µs/go", "req/s/go")
    cells = [(r["server"], cell(r["requests_per_s"], ",.0f"), cell(r["cpu_us"], ".2f"),
              cell(r["user_us"], ".2f"), cell(r["system_us"], ".2f"),
              cell(r["cpu_to_first"], ".2f"), cell(r["rate_to_first"], ".2f"),
              cell(r["cpu_to_go"], ".2f"), cell(r["rate_to_go"], ".2f")) for r in table]
    render(headers, cells, set(range(1, len(headers))))


# -- command line ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=positive(int), default=3,
                   help="runs of every server, alternated (default 3); medians")
    p.add_argument("--duration", type=positive(float), default=5.0,
                   help="seconds per server and run (default 5; wrk: whole seconds)")
    p.add_argument("--connections", type=positive(int), default=8,
                   help="keep-alive connections, one request in flight on each (default 8)")
    p.add_argument("--tool", choices=["auto", "wrk", "builtin"], default="auto",
                   help="load generator: wrk, the built-in client, or wrk if installed "
                        "(default)")
    p.add_argument("--go", type=daemons_dir, default=None, metavar="DIR",
                   help="Go's nsqd (and nsqlookupd) in DIR: its /ping as the last row")
    p.add_argument("--json", dest="json_path", metavar="FILE", default=None,
                   help="also write the results to FILE as JSON")
    p.add_argument("--serve", choices=list(SERVE), default=None, metavar="KIND",
                   help=f"be one of the servers ({', '.join(SERVE)}) on --port and print its "
                        "address; the benchmark runs itself so")
    p.add_argument("--port", type=int, default=0, help="with --serve (default 0: any free one)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.serve:
        SERVE[args.serve](args.port)
        return 0
    if args.tool == "auto":
        args.tool = "wrk" if shutil.which("wrk") else "builtin"
    elif args.tool == "wrk" and not shutil.which("wrk"):
        parser.error("wrk is not installed (apt-get install wrk), use --tool builtin")
    work_dir = tempfile.mkdtemp(prefix="nsq-bench-floor-")
    servers: list[Server] = []
    rows: list[Row] = []
    loads = [os.getloadavg()[0]]
    try:
        servers = start_servers(args.go)
        rows = [Row(s.name) for s in servers]
        print(f"bench.floor: {args.runs} run(s) of GET /ping, {args.tool} -c{args.connections} "
              f"{args.duration:g} s per server; against "
              f"{'Go: ' + args.go if args.go else 'nothing (no --go)'}", flush=True)
        for i in range(args.runs):
            for server, row in zip(servers, rows, strict=True):
                run = measure(server, args.tool, args.connections, args.duration, work_dir)
                row.runs.append(run)
                print(f"  run {i + 1} {server.name}: {run.requests_per_s:,.0f} req/s, "
                      f"{cell(run.cpu_us, '.2f')} µs CPU each, {run.errors} errors", flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        stop_servers(servers)
        shutil.rmtree(work_dir, ignore_errors=True)
    table = summary(rows)
    print()
    print(f"median of {args.runs} run(s); µs = the server's CPU time per request (user + "
          f"system; their medians apart); load average (1 min) {min(loads):.2f}-{max(loads):.2f}")
    print_table(table)
    errors = sum(run.errors for row in rows for run in row.runs)
    if errors:
        print(f"FAILED: {errors} error answers", file=sys.stderr)
    if args.json_path:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpus": os.cpu_count(), "load": loads},
            "command": "python -m bench.floor " + " ".join(
                sys.argv[1:] if argv is None else argv),
            "settings": vars(args),
            "results": table,
        }
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        print(f"results written to {args.json_path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
