"""Consuming over HTTP: messages/s through ``/channel/consume`` and ``/message/fin``.

    python -m bench.pull [--count 200000] [--batch 100] [--pullers 1,4] [--runs 3] [--json FILE]

Starts its own nsqd (127.0.0.1, kernel-chosen ports, data in a temporary directory removed at
the end, ``--mem-queue-size`` large enough for a run), then for every puller count and run:
fills a fresh channel with ``--count`` 100-byte messages (untimed, ``/mpub``), and lets
``--pullers`` threads, each on one keep-alive connection, repeat
``POST /channel/consume?n=<batch>`` and ``POST /message/fin`` with the ids of what it got in
the body, until the channel is empty. Timed from the first consume to the last FIN answered.
Each run is checked: every message received exactly once, and the channel ends with depth 0
and nothing in flight. Prints messages/s and nsqd's CPU time per message (``/proc``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from typing import Any

from .http import _cpu_seconds, _loadavg
from .server import Nsqd

TOPIC = "bench_pull"
MESSAGE = b"m" * 100


def _request(conn: http.client.HTTPConnection, method: str, target: str, body: bytes = b""
             ) -> bytes:
    conn.request(method, target, body=body)
    answer = conn.getresponse()
    data = answer.read()
    if answer.status != 200:
        raise RuntimeError(f"{method} {target}: {answer.status} {data!r}")
    return data


def _fill(address: str, count: int) -> None:
    conn = http.client.HTTPConnection(address, timeout=60)
    try:
        _request(conn, "POST", f"/topic/create?topic={TOPIC}")
        _request(conn, "POST", f"/channel/create?topic={TOPIC}&channel=c")
        left = count
        while left:
            n = min(left, 1000)
            _request(conn, "POST", f"/mpub?topic={TOPIC}", b"\n".join([MESSAGE] * n))
            left -= n
    finally:
        conn.close()


def _pull(address: str, batch: int, seen: list[str], errors: list[str]) -> None:
    conn = http.client.HTTPConnection(address, timeout=60)
    consume = f"/channel/consume?topic={TOPIC}&channel=c&n={batch}"
    fin = f"/message/fin?topic={TOPIC}&channel=c"
    try:
        while True:
            messages = json.loads(_request(conn, "POST", consume))["messages"]
            if not messages:
                return
            ids = [m["id"] for m in messages]
            _request(conn, "POST", fin, "\n".join(ids).encode())
            seen.extend(ids)
    except Exception as exc:  # reported with the run
        errors.append(repr(exc))
    finally:
        conn.close()


def _channel(address: str) -> dict[str, Any]:
    conn = http.client.HTTPConnection(address, timeout=60)
    try:
        doc = json.loads(_request(conn, "GET", f"/stats?format=json&topic={TOPIC}"))
    finally:
        conn.close()
    channel: dict[str, Any] = doc["topics"][0]["channels"][0]
    return channel


def run_once(address: str, pid: int, count: int, batch: int, pullers: int) -> dict[str, Any]:
    _fill(address, count)
    seen: list[list[str]] = [[] for _ in range(pullers)]
    errors: list[str] = []
    threads = [threading.Thread(target=_pull, args=(address, batch, seen[i], errors))
               for i in range(pullers)]
    cpu = _cpu_seconds(pid)
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    cpu_after = _cpu_seconds(pid)
    everything = [i for ids in seen for i in ids]
    channel = _channel(address)
    problems = list(errors)
    if len(everything) != count or len(set(everything)) != count:
        problems.append(f"received {len(everything)} ({len(set(everything))} distinct) of {count}")
    if channel["depth"] or channel["in_flight_count"]:
        problems.append(f"left: depth {channel['depth']}, in flight {channel['in_flight_count']}")
    conn = http.client.HTTPConnection(address, timeout=60)
    try:
        _request(conn, "POST", f"/topic/delete?topic={TOPIC}")
    finally:
        conn.close()
    return {"pullers": pullers, "batch": batch, "count": count, "seconds": elapsed,
            "messages_per_s": count / elapsed,
            "nsqd_cpu_us_per_message": (None if cpu is None or cpu_after is None
                                        else (cpu_after - cpu) / count * 1e6),
            "loadavg_1m": _loadavg(), "problems": problems}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pull", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000, help="messages per run")
    parser.add_argument("--batch", type=int, default=100, help="n of each /channel/consume")
    parser.add_argument("--pullers", default="1,4",
                        help="comma-separated numbers of pulling connections (default 1,4)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each; the median is shown")
    parser.add_argument("--json", metavar="FILE", help="also write every run to FILE as JSON")
    args = parser.parse_args(argv)
    pullers = [int(p) for p in args.pullers.split(",") if p.strip()]
    nsqd = None
    results = []
    try:
        nsqd = Nsqd.start(mem_queue_size=100_000_000)
        assert nsqd.pid is not None
        print(f"{'pullers':>7} {'batch':>5} {'msg/s':>10} {'nsqd CPU µs/msg':>16} "
              f"{'runs (msg/s)':<30} load")
        for n in pullers:
            runs = [run_once(nsqd.http_address, nsqd.pid, args.count, args.batch, n)
                    for _ in range(args.runs)]
            results += runs
            rates = [r["messages_per_s"] for r in runs]
            cpus = [r["nsqd_cpu_us_per_message"] for r in runs
                    if r["nsqd_cpu_us_per_message"] is not None]
            print(f"{n:>7} {args.batch:>5} {statistics.median(rates):>10,.0f} "
                  f"{statistics.median(cpus) if cpus else float('nan'):>16.1f} "
                  f"{', '.join(f'{r:,.0f}' for r in rates):<30} {runs[-1]['loadavg_1m']:.2f}")
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
