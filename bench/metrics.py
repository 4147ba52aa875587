"""Does scraping ``/metrics`` slow publishing? Publish at a fixed rate, with and without a
concurrent scrape loop.

    python -m bench.metrics [--rate 10000] [--duration 10] [--pairs 3]
                            [--scrape-interval 1.0] [--topics 50] [--json FILE]

Starts its own nsqd (127.0.0.1, kernel-chosen ports, data in a temporary directory removed at
the end), makes ``--topics`` topics with two channels each (so that a scrape has about
``30 * 3 * topics`` samples to write), then runs ``--pairs`` pairs of phases of
``--duration`` seconds, alternating which goes first: one without scrapes, one while another
process GETs ``/metrics`` every ``--scrape-interval`` seconds (0: back to back; the phase
starts once that process is up and runs until it has made a scrape, however long that takes
on a busy machine, so a short phase still has one). In both, one
TCP connection publishes 100-byte messages to a topic with one channel at ``--rate``
messages/s: every millisecond it sends the PUBs due by then (pipelined) and waits for their
OKs. Reported per phase (median over the pairs): messages/s achieved, the latency of each
millisecond's batch (first PUB sent to last OK read; p50 and p99), nsqd's CPU time per
message, and the scrapes made with their median duration.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import struct
import sys
import time
import urllib.request
from typing import Any

from nsq_common import commands

from .server import Nsqd

TOPIC = "bench_metrics"
BODY = b"m" * 100
TICK = 0.001


def _api(nsqd: Nsqd, path: str) -> None:
    request = urllib.request.Request(f"http://{nsqd.http_address}{path}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def _scrape_loop(address: str, interval: float, ready: Any, stop: Any, durations: Any) -> None:
    ready.set()
    while not stop.is_set():
        start = time.perf_counter()
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
            answer.read()
        durations.append(time.perf_counter() - start)
        if interval:
            stop.wait(interval)


def _wait_for(event: Any, scraper: Any, what: str) -> None:
    """Until ``event`` is set; the scraper process ending first is an error."""
    while not event.wait(0.1):
        if not scraper.is_alive():
            raise RuntimeError(f"the scraper process ended (exit {scraper.exitcode}) {what}")


def _scraped(durations: Any, scraper: Any) -> bool:
    """Has the scraper made a scrape yet (the phase goes on until it has)?"""
    if len(durations):
        return True
    if not scraper.is_alive():
        raise RuntimeError(f"the scraper process ended (exit {scraper.exitcode}) before a scrape")
    return False


class Publisher:
    """One pipelined TCP connection: PUBs out, OK frames (and heartbeats) in."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(b"  V2")
        self.buffer = b""
        self.pub = commands.pub(TOPIC, BODY)

    def batch(self, n: int) -> None:
        self.sock.sendall(self.pub * n)
        oks = 0
        while oks < n:
            while len(self.buffer) < 8 or len(self.buffer) < 4 + struct.unpack(
                    ">I", self.buffer[:4])[0]:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise RuntimeError("nsqd closed the connection")
                self.buffer += chunk
            size, frame_type = struct.unpack(">II", self.buffer[:8])
            data, self.buffer = self.buffer[8:4 + size], self.buffer[4 + size:]
            if frame_type != 0:
                raise RuntimeError(f"nsqd answered {data!r}")
            if data == b"_heartbeat_":
                self.sock.sendall(commands.nop())
            elif data == b"OK":
                oks += 1

    def close(self) -> None:
        self.sock.close()


def _phase(nsqd: Nsqd, rate: int, duration: float, scrape: float | None) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager()
    ready, stop, durations = manager.Event(), manager.Event(), manager.list()
    scraper = None
    if scrape is not None:
        scraper = ctx.Process(target=_scrape_loop, args=(nsqd.http_address, scrape, ready, stop,
                                                         durations))
        scraper.start()
        _wait_for(ready, scraper, "before it started")
    publisher = Publisher(nsqd.tcp_address)
    latencies: list[float] = []
    sent = 0
    cpu_before = nsqd.cpu_seconds()
    start = time.perf_counter()
    try:
        while ((now := time.perf_counter()) - start < duration
               or (scraper is not None and not _scraped(durations, scraper))):
            due = int((now - start) * rate) - sent
            if due > 0:
                publisher.batch(due)
                latencies.append(time.perf_counter() - now)
                sent += due
            else:
                time.sleep(max(0.0, start + (sent + 1) / rate - time.perf_counter()))
        elapsed = time.perf_counter() - start
    finally:
        publisher.close()
        stop.set()
        if scraper is not None:
            scraper.join(30)
    cpu_after = nsqd.cpu_seconds()
    scrapes = list(durations)
    manager.shutdown()
    latencies.sort()
    return {
        "scraping": scrape is not None,
        "messages": sent,
        "messages_per_s": sent / elapsed,
        "batch_latency_p50_ms": latencies[len(latencies) // 2] * 1e3,
        "batch_latency_p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "nsqd_cpu_us_per_message": ((cpu_after - cpu_before) / sent * 1e6
                                    if cpu_before is not None and cpu_after is not None
                                    else None),
        "scrapes": len(scrapes),
        "scrape_median_ms": statistics.median(scrapes) * 1e3 if scrapes else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=10_000, help="messages/s to publish")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--pairs", type=int, default=3, help="pairs of phases")
    parser.add_argument("--scrape-interval", type=float, default=1.0,
                        help="seconds between scrapes (0: back to back)")
    parser.add_argument("--topics", type=int, default=50, help="extra topics, two channels each")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    pairs = args.pairs * 2 * args.duration * args.rate
    nsqd = Nsqd.start(mem_queue_size=int(pairs) + 1000,
                      extra_args=["--e2e-processing-latency-percentile=0.5,0.99"])
    try:
        _api(nsqd, f"/topic/create?topic={TOPIC}")
        _api(nsqd, f"/channel/create?topic={TOPIC}&channel=sink")
        for i in range(args.topics):
            _api(nsqd, f"/topic/create?topic=t{i}")
            for channel in ("a", "b"):
                _api(nsqd, f"/channel/create?topic=t{i}&channel={channel}")
        runs: list[dict[str, Any]] = []
        for pair in range(args.pairs):
            order = (None, args.scrape_interval) if pair % 2 == 0 else (args.scrape_interval, None)
            for scrape in order:
                result = _phase(nsqd, args.rate, args.duration, scrape)
                runs.append(result)
                print(json.dumps(result), file=sys.stderr)
    finally:
        nsqd.stop()
    summary = {}
    for scraping in (False, True):
        phase = [r for r in runs if r["scraping"] is scraping]
        summary["with scrapes" if scraping else "without"] = {
            key: statistics.median(r[key] for r in phase)
            for key in ("messages_per_s", "batch_latency_p50_ms", "batch_latency_p99_ms",
                        "nsqd_cpu_us_per_message", "scrapes")
            if all(r[key] is not None for r in phase)}
    base, loaded = summary["without"], summary["with scrapes"]
    print(f"{'':14} {'msgs/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/msg':>10} {'scrapes':>8}")
    for name, row in summary.items():
        print(f"{name:14} {row['messages_per_s']:>10,.0f} {row['batch_latency_p50_ms']:>8.3f} "
              f"{row['batch_latency_p99_ms']:>8.3f} {row.get('nsqd_cpu_us_per_message', 0):>10.2f} "
              f"{row['scrapes']:>8.0f}")
    change = (loaded["messages_per_s"] / base["messages_per_s"] - 1) * 100
    print(f"publish rate with scrapes: {change:+.2f}%")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"settings": vars(args), "runs": runs, "summary": summary}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
