"""lmstfy's job-queue API on nsqd: jobs/s for publish, bulk publish, and consume + ack.

    python -m bench.lmstfy [--count 20000] [--connections 1,4] [--runs 3] [--json FILE]

Starts its own nsqd with lmstfy's listeners (127.0.0.1, kernel-chosen ports, data in a
temporary directory removed at the end), makes a token, then for every connection count and
run, each connection a thread on one keep-alive connection, on a fresh queue:

* ``publish``: ``--count`` 100-byte jobs, one ``PUT /api/ns/<queue>`` each;
* ``bulk``: ``--count`` more, 64 per ``PUT .../bulk``;
* ``consume+ack``: ``GET /api/ns/<queue>?count=100`` then one ``DELETE .../job/<id>`` per
  job, until the queue is empty: the pattern lmstfy's own clients use.

Each run is checked: every job consumed exactly once, and the queue ends empty. Prints jobs/s
per phase and nsqd's CPU time per job (``/proc``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .http import _cpu_seconds, _loadavg
from .server import Nsqd

BODY = b"j" * 100
PHASES = ("publish", "bulk", "consume+ack")


class Api:
    def __init__(self, address: str, token: str) -> None:
        self.conn = http.client.HTTPConnection(address, timeout=60)
        self.headers = {"X-Token": token}

    def call(self, method: str, target: str, body: bytes = b"", ok: int = 200) -> bytes:
        self.conn.request(method, target, body=body, headers=self.headers)
        answer = self.conn.getresponse()
        data = answer.read()
        if answer.status != ok:
            raise RuntimeError(f"{method} {target}: {answer.status} {data!r}")
        return data

    def close(self) -> None:
        self.conn.close()


def _publish(api: Api, queue: str, count: int) -> None:
    for _ in range(count):
        api.call("PUT", f"/api/ns/{queue}", BODY, ok=201)


def _bulk(api: Api, queue: str, count: int) -> None:
    element = json.dumps(BODY.decode()).encode()
    while count:
        n = min(count, 64)
        api.call("PUT", f"/api/ns/{queue}/bulk", b"[" + b",".join([element] * n) + b"]",
                 ok=201)
        count -= n


def _consume(api: Api, queue: str, seen: list[str]) -> None:
    while True:
        api.conn.request("GET", f"/api/ns/{queue}?count=100&ttr=600", headers=api.headers)
        answer = api.conn.getresponse()
        data = answer.read()
        if answer.status == 404:
            return
        if answer.status != 200:
            raise RuntimeError(f"consume: {answer.status} {data!r}")
        for job in json.loads(data):
            api.call("DELETE", f"/api/ns/{queue}/job/{job['job_id']}", ok=204)
            seen.append(job["job_id"])


def _timed(address: str, token: str, connections: int,
           work: Callable[[Api, int], None]) -> float:
    apis = [Api(address, token) for _ in range(connections)]
    errors: list[BaseException] = []

    def run(api: Api, index: int) -> None:
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


def run_once(address: str, pid: int, token: str, count: int, connections: int, queue: str
             ) -> dict[str, Any]:
    share = [count // connections + (i < count % connections) for i in range(connections)]
    result: dict[str, Any] = {"connections": connections, "count": count}
    seen: list[str] = []
    works: dict[str, Callable[[Api, int], None]] = {
        "publish": lambda api, i: _publish(api, queue, share[i]),
        "bulk": lambda api, i: _bulk(api, queue, share[i]),
        "consume+ack": lambda api, i: _consume(api, queue, seen),
    }
    for phase in PHASES:
        cpu = _cpu_seconds(pid)
        elapsed = _timed(address, token, connections, works[phase])
        after = _cpu_seconds(pid)
        used = after - cpu if after is not None and cpu is not None else None
        jobs = 2 * count if phase == "consume+ack" else count
        result[phase] = {"jobs_per_s": jobs / elapsed, "seconds": elapsed,
                         "nsqd_cpu_us_per_job": used / jobs * 1e6 if used is not None else None}
    result["problems"] = []
    if len(seen) != 2 * count or len(set(seen)) != len(seen):
        result["problems"].append(f"consumed {len(seen)} jobs ({len(set(seen))} distinct), "
                                  f"published {2 * count}")
    result["loadavg_1m"] = _loadavg()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lmstfy", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="jobs per publish phase")
    parser.add_argument("--connections", default="1,4",
                        help="comma-separated numbers of keep-alive connections (default 1,4)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each; the median is shown")
    parser.add_argument("--json", metavar="FILE", help="also write every run to FILE as JSON")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.connections.split(",") if c.strip()]
    nsqd = None
    results = []
    try:
        nsqd = Nsqd.start(mem_queue_size=100_000_000,
                          extra_args=["--lmstfy-http-address=127.0.0.1:0",
                                      "--lmstfy-admin-http-address=127.0.0.1:0"],
                          expect=("TCP", "HTTP", "LMSTFY", "LMSTFY_ADMIN"))
        assert nsqd.daemon is not None and nsqd.pid is not None
        addresses = nsqd.daemon.addresses
        admin = http.client.HTTPConnection(addresses["LMSTFY_ADMIN"], timeout=60)
        admin.request("POST", "/token/ns?description=bench")
        token = json.loads(admin.getresponse().read())["token"]
        admin.close()
        print(f"{'conns':>5} " + " ".join(f"{p + ' jobs/s':>18} {'µs/job':>7}" for p in PHASES)
              + "  load")
        for n in counts:
            runs = [run_once(addresses["LMSTFY"], nsqd.pid, token, args.count, n,
                             f"q{n}r{r}") for r in range(args.runs)]
            results += runs
            cells = []
            for phase in PHASES:
                rate = statistics.median(r[phase]["jobs_per_s"] for r in runs)
                cpus = [r[phase]["nsqd_cpu_us_per_job"] for r in runs
                        if r[phase]["nsqd_cpu_us_per_job"] is not None]
                cells.append(f"{rate:>18,.0f} {statistics.median(cpus) if cpus else 0:>7.0f}")
            print(f"{n:>5} " + " ".join(cells) + f"  {runs[-1]['loadavg_1m']:.2f}")
            for r in runs:
                for problem in r["problems"]:
                    print(f"  problem: {problem}", file=sys.stderr)
    finally:
        if nsqd is not None:
            nsqd.stop()
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"settings": vars(args), "runs": results}, out, indent=2)
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
