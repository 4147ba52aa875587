"""lmstfy's job-queue API: jobs/s for publish, bulk publish, and consume + ack, on our nsqd and
on any other lmstfy (the real one, say), alternated in one session.

    python -m bench.lmstfy [--count 20000] [--connections 1,4] [--runs 3]
                           [--phases publish,bulk,consume+ack]
                           [--nsqd-args ARGS ...] [--url URL (--admin-url URL | --token T)
                           [--pid PID,...]] [--json FILE]

The targets: one nsqd of ours per ``--nsqd-args`` (a string of extra nsqd flags, ``""`` for
nsqd's defaults; several may be given), and the lmstfy at ``--url`` when given. With neither,
one nsqd with its defaults. Each nsqd of ours is started here with lmstfy's listeners
(127.0.0.1, kernel-chosen ports, data in a temporary directory removed at the end) and its
token made through its admin listener. For ``--url`` (an lmstfy's data API, on loopback) the
token is made through ``--admin-url`` (lmstfy's admin API: ``POST /token/<namespace>``, with
the URL's ``user:password@`` as basic auth) or given with ``--token``; ``--pid`` names the
processes whose CPU time counts for it (lmstfy and its Redis, say).

Then for every connection count and run, each target in turn (so that a machine whose load
changes is shared fairly), each connection a thread on one keep-alive connection, on a fresh
queue:

* ``publish``: ``--count`` 100-byte jobs, one ``PUT /api/ns/<queue>`` each;
* ``bulk``: ``--count`` more, 64 per ``PUT .../bulk``;
* ``consume+ack``: ``GET /api/ns/<queue>?count=100`` then one ``DELETE .../job/<id>`` per
  job, until the queue is empty: the pattern lmstfy's own clients use.

Each run is checked: every job consumed exactly once, and the queue ends empty. Prints, per
target, the median jobs/s of each phase (with the runs' range) and the target's CPU time per
job (``/proc``).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import shlex
import socket
import statistics
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .http import _cpu_seconds, _loadavg
from .server import Nsqd

BODY = b"j" * 100
PHASES = ("publish", "bulk", "consume+ack")
NAMESPACE = "ns"


@dataclass
class Target:
    """Where an lmstfy API listens, its token, and the processes whose CPU counts for it."""

    label: str
    address: str
    token: str
    pids: list[int]
    nsqd: Nsqd | None = None

    def cpu_seconds(self) -> float | None:
        used = [_cpu_seconds(pid) for pid in self.pids]
        return None if not used or None in used else sum(u for u in used if u is not None)


class Api:
    """One keep-alive connection through ``http.client`` (what lmstfy's Python users have)."""

    def __init__(self, address: str, token: str) -> None:
        self.conn = http.client.HTTPConnection(address, timeout=60)
        self.headers = {"X-Token": token}

    def request(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        self.conn.request(method, target, body=body, headers=self.headers)
        answer = self.conn.getresponse()
        return answer.status, answer.read()

    def close(self) -> None:
        self.conn.close()


_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:[ \t]*chunked", re.IGNORECASE)


class RawApi:
    """One keep-alive connection on a plain socket: each request's bytes written at once, the
    answer read by its ``Content-Length`` (or chunks), one request at a time. It costs a
    fraction of ``http.client``'s CPU per request, so that the server is what is measured."""

    def __init__(self, address: str, token: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = f"Host: {address}\r\nX-Token: {token}\r\n".encode()
        self.buffer = b""

    def request(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        self.sock.sendall(b"%s %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            method.encode(), target.encode(), self.head, len(body), body))
        return self._answer()

    def _answer(self) -> tuple[int, bytes]:
        end = self.buffer.find(b"\r\n\r\n")
        while end < 0:
            self._receive()
            end = self.buffer.find(b"\r\n\r\n")
        head, self.buffer = self.buffer[:end + 2], self.buffer[end + 4:]
        status = int(head[9:12])
        length = _LENGTH.search(head)
        if length is not None:
            return status, self._take(int(length.group(1)))
        if _CHUNKED.search(head) is None:
            return status, b""  # 204, 304: no body
        chunks = []
        while True:
            size = int(self._line(), 16)
            chunks.append(self._take(size))
            self._line()
            if not size:
                return status, b"".join(chunks)

    def _line(self) -> bytes:
        end = self.buffer.find(b"\r\n")
        while end < 0:
            self._receive()
            end = self.buffer.find(b"\r\n")
        line, self.buffer = self.buffer[:end], self.buffer[end + 2:]
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._receive()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _receive(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


Client = Api | RawApi


def _call(api: Client, method: str, target: str, body: bytes = b"", ok: int = 200) -> bytes:
    status, data = api.request(method, target, body)
    if status != ok:
        raise RuntimeError(f"{method} {target}: {status} {data!r}")
    return data
CLIENTS: dict[str, Callable[[str, str], Client]] = {"raw": RawApi, "http.client": Api}


def _publish(api: Client, queue: str, count: int) -> None:
    for _ in range(count):
        _call(api, "PUT", f"/api/{NAMESPACE}/{queue}", BODY, ok=201)


def _bulk(api: Client, queue: str, count: int) -> None:
    element = json.dumps(BODY.decode()).encode()
    while count:
        n = min(count, 64)
        _call(api, "PUT", f"/api/{NAMESPACE}/{queue}/bulk",
                 b"[" + b",".join([element] * n) + b"]", ok=201)
        count -= n


def _consume(api: Client, queue: str, seen: list[str]) -> None:
    while True:
        status, data = api.request("GET", f"/api/{NAMESPACE}/{queue}?count=100&ttr=600")
        if status == 404:  # the queue is empty
            return
        if status != 200:
            raise RuntimeError(f"consume: {status} {data!r}")
        for job in json.loads(data):
            _call(api, "DELETE", f"/api/{NAMESPACE}/{queue}/job/{job['job_id']}", ok=204)
            seen.append(job["job_id"])


def _timed(client: Callable[[str, str], Client], address: str, token: str, connections: int,
           work: Callable[[Client, int], None]) -> float:
    apis = [client(address, token) for _ in range(connections)]
    errors: list[BaseException] = []

    def run(api: Client, index: int) -> None:
        try:
            work(api, index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(api, i)) for i, api in enumerate(apis)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for api in apis:
        api.close()
    if errors:
        raise errors[0]
    return elapsed


def run_once(target: Target, count: int, connections: int, queue: str,
             phases: tuple[str, ...] = PHASES, client: str = "raw") -> dict[str, Any]:
    share = [count // connections + (i < count % connections) for i in range(connections)]
    result: dict[str, Any] = {"target": target.label, "connections": connections,
                              "count": count}
    seen: list[str] = []
    works: dict[str, Callable[[Client, int], None]] = {
        "publish": lambda api, i: _publish(api, queue, share[i]),
        "bulk": lambda api, i: _bulk(api, queue, share[i]),
        "consume+ack": lambda api, i: _consume(api, queue, seen),
    }
    published = count * sum(1 for p in phases if p in ("publish", "bulk"))
    for phase in phases:
        cpu = target.cpu_seconds()
        elapsed = _timed(CLIENTS[client], target.address, target.token, connections,
                         works[phase])
        after = target.cpu_seconds()
        used = after - cpu if after is not None and cpu is not None else None
        jobs = published if phase == "consume+ack" else count
        result[phase] = {"jobs_per_s": jobs / elapsed if jobs else 0.0, "seconds": elapsed,
                         "cpu_us_per_job": used / jobs * 1e6 if used is not None and jobs
                         else None}
    result["problems"] = []
    if "consume+ack" in phases and (len(seen) != published or len(set(seen)) != len(seen)):
        result["problems"].append(f"{target.label}: consumed {len(seen)} jobs "
                                  f"({len(set(seen))} distinct), published {published}")
    result["loadavg_1m"] = _loadavg()
    return result


def _admin_token(admin_url: str) -> str:
    """A fresh token for NAMESPACE from an lmstfy's admin API (basic auth from the URL)."""
    parts = urllib.parse.urlsplit(admin_url)
    headers = {}
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"{user}:{password}".encode()).decode()
    admin = http.client.HTTPConnection(parts.netloc.rpartition("@")[2], timeout=60)
    try:
        admin.request("POST", f"{parts.path.rstrip('/')}/token/{NAMESPACE}?description=bench",
                      headers=headers)
        answer = admin.getresponse()
        data = answer.read()
    finally:
        admin.close()
    if answer.status != 201:
        raise RuntimeError(f"token: {answer.status} {data!r}")
    token: str = json.loads(data)["token"]
    return token


def start_ours(args: str) -> Target:
    """An nsqd of ours with lmstfy's listeners and the extra flags ``args``, its token made
    through its admin listener."""
    nsqd = Nsqd.start(extra_args=["--lmstfy-http-address=127.0.0.1:0",
                                  "--lmstfy-admin-http-address=127.0.0.1:0",
                                  *shlex.split(args)],
                      expect=("TCP", "HTTP", "LMSTFY", "LMSTFY_ADMIN"))
    try:
        assert nsqd.daemon is not None and nsqd.pid is not None
        addresses = nsqd.daemon.addresses
        token = _admin_token(f"http://{addresses['LMSTFY_ADMIN']}")
    except BaseException:
        nsqd.stop()
        raise
    return Target(f"nsqd {args}".strip(), addresses["LMSTFY"], token, [nsqd.pid], nsqd)


def external(url: str, admin_url: str | None, token: str | None, pids: str) -> Target:
    """The lmstfy at ``url``; its token given, or made through ``admin_url``; ``pids``
    (comma-separated) the processes whose CPU time counts for it."""
    parts = urllib.parse.urlsplit(url)
    if token is None:
        if admin_url is None:
            raise SystemExit("--url needs --admin-url or --token")
        token = _admin_token(admin_url)
    return Target(f"lmstfy {parts.netloc}", parts.netloc, token,
                  [int(p) for p in pids.split(",") if p.strip()])


def _summary(target: Target, n: int, runs: list[dict[str, Any]],
             phases: tuple[str, ...]) -> str:
    cells = []
    for phase in phases:
        rates = [r[phase]["jobs_per_s"] for r in runs]
        cpus = [r[phase]["cpu_us_per_job"] for r in runs
                if r[phase]["cpu_us_per_job"] is not None]
        cpu = f"{statistics.median(cpus):>5.0f}" if cpus else f"{'-':>5}"
        cells.append(f"{statistics.median(rates):>9,.0f} ({min(rates):>7,.0f}-"
                     f"{max(rates):>7,.0f}) {cpu}")
    loads = ",".join(f"{r['loadavg_1m']:.1f}" for r in runs)
    return f"{target.label[:28]:<28} {n:>5} " + " ".join(cells) + f"  {loads}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lmstfy", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="jobs per publish phase")
    parser.add_argument("--connections", default="1,4",
                        help="comma-separated numbers of keep-alive connections (default 1,4)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each; the median is shown")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated phases, in order (default {','.join(PHASES)})")
    parser.add_argument("--nsqd-args", action="append", metavar="ARGS",
                        help='an nsqd of ours with these extra flags ("" for its defaults); '
                             "repeat for more")
    parser.add_argument("--url", help="also an lmstfy's data API at this URL (loopback)")
    parser.add_argument("--admin-url",
                        help="that lmstfy's admin API, http://user:password@host:port")
    parser.add_argument("--token", help="a token of namespace 'ns' on that lmstfy")
    parser.add_argument("--pid", default="",
                        help="comma-separated pids whose CPU time counts for that lmstfy")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="raw",
                        help="raw: requests written on a plain socket (default); http.client: "
                             "the standard library's client, which costs about as much CPU per "
                             "request as the server")
    parser.add_argument("--json", metavar="FILE", help="also write every run to FILE as JSON")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.connections.split(",") if c.strip()]
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    if not phases or any(p not in PHASES for p in phases):
        parser.error(f"--phases: each one of {', '.join(PHASES)}")
    ours = args.nsqd_args if args.nsqd_args is not None else ([] if args.url else [""])
    session = f"{os.getpid():x}{int(time.time()) % 100_000:x}"  # fresh queues every time
    targets: list[Target] = []
    results: list[dict[str, Any]] = []
    try:
        targets += [start_ours(a) for a in ours]
        if args.url:
            targets.append(external(args.url, args.admin_url, args.token, args.pid))
        print(f"{'target':<28} {'conns':>5} "
              + " ".join(f"{p + ' jobs/s (range)':>28} {'µs/j':>5}" for p in phases)
              + "  load")
        for n in counts:
            runs: dict[str, list[dict[str, Any]]] = {t.label: [] for t in targets}
            for r in range(args.runs):
                for i, target in enumerate(targets):
                    result = run_once(target, args.count, n, f"b{session}t{i}c{n}r{r}", phases,
                                      args.client)
                    runs[target.label].append(result)
                    results.append(result)
                    for problem in result["problems"]:
                        print(f"  problem: {problem}", file=sys.stderr)
            for target in targets:
                print(_summary(target, n, runs[target.label], phases))
    finally:
        for target in targets:
            if target.nsqd is not None:
                target.nsqd.stop()
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"settings": vars(args), "runs": results}, out, indent=2)
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
