"""Where the time of one stop-and-wait MPUB goes: raw socket client against the library.

    python -m bench.cycle [--mpubs 3000] [--batch 200] [--size 100] [--runs 3]

Starts its own nsqd (memory queue), then alternates a raw-socket client and the library's
``Producer.mpub``, each sending ``--mpubs`` MPUBs one after the other (after 200 not timed),
and prints per client the medians of one cycle:

* ``answer->write``: from the read that brought the ``OK`` to the start of the next MPUB's
  write (the client's own time, during which nsqd has nothing to do);
* ``write``: the write system call of the MPUB;
* ``write->answer``: from the end of that write to the read that brought its ``OK``.

The library's reads and writes are timed by replacing the ``os`` module its connection
uses (``os.read`` / ``os.write``) with timing wrappers, for this process only; the raw client
is timed around ``sendall`` and ``recv``. The wrappers add well under a microsecond.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any
from unittest.mock import patch

import trio
from nsq_common import commands, encode_response

from .server import Nsqd
from .workers import connect, identify

TOPIC = "bench_cycle"
OK_FRAME = encode_response(b"OK")


class _TimedOs:
    """Stands in for ``os`` in ``nsq_client._fdstream``: records each read and write."""

    def __init__(self, events: list[tuple[str, int, int]]) -> None:
        self._events = events

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def read(self, fd: int, n: int) -> bytes:
        data = os.read(fd, n)
        now = time.perf_counter_ns()
        self._events.append(("r", now, now))
        return data

    def write(self, fd: int, data: Any) -> int:
        start = time.perf_counter_ns()
        sent = os.write(fd, data)
        self._events.append(("w", start, time.perf_counter_ns()))
        return sent


def _cycles(events: list[tuple[str, int, int]]) -> dict[str, float]:
    """Medians (µs) of the three parts of a cycle, from a sequence of reads and writes."""
    gaps, writes, waits = [], [], []
    last_read: int | None = None
    last_write_end: int | None = None
    for kind, start, end in events:
        if kind == "r":
            if last_write_end is not None:
                waits.append(end - last_write_end)
                last_write_end = None
            last_read = end
        else:
            if last_read is not None:
                gaps.append(start - last_read)
                last_read = None
            writes.append(end - start)
            last_write_end = end
    return {name: statistics.median(values) / 1000
            for name, values in (("answer->write", gaps), ("write", writes),
                                 ("write->answer", waits))}


def run_raw(address: str, bodies: list[bytes], mpubs: int) -> tuple[float, dict[str, float]]:
    events: list[tuple[str, int, int]] = []
    cmd = commands.mpub(TOPIC, bodies)
    with connect(address) as sock:
        identify(sock, "cycle")

        def one(record: bool) -> None:
            start = time.perf_counter_ns()
            sock.sendall(cmd)
            if record:
                events.append(("w", start, time.perf_counter_ns()))
            data = b""
            while len(data) < 10:  # the OK frame (a heartbeat is not expected in a run)
                data += sock.recv(65536)
            if record:
                now = time.perf_counter_ns()
                events.append(("r", now, now))
            if data != OK_FRAME:
                raise RuntimeError(f"unexpected answer {data[:100]!r}")

        for _ in range(200):
            one(False)
        begin = time.perf_counter()
        for _ in range(mpubs):
            one(True)
        elapsed = time.perf_counter() - begin
    return mpubs * len(bodies) / elapsed, _cycles(events)


def run_library(address: str, bodies: list[bytes], mpubs: int) -> tuple[float, dict[str, float]]:
    import nsq_client._fdstream as fdstream
    from nsq_client import Producer

    events: list[tuple[str, int, int]] = []

    async def main() -> float:
        async with Producer(address) as producer:
            for _ in range(200):
                await producer.mpub(TOPIC, bodies)
            with patch.object(fdstream, "os", _TimedOs(events)):
                begin = time.perf_counter()
                for _ in range(mpubs):
                    await producer.mpub(TOPIC, bodies)
                return time.perf_counter() - begin

    elapsed = trio.run(main)
    return mpubs * len(bodies) / elapsed, _cycles(events)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cycle", description=__doc__.split("\n")[0])
    parser.add_argument("--mpubs", type=int, default=3000, help="timed MPUBs per run")
    parser.add_argument("--batch", type=int, default=200, help="messages per MPUB")
    parser.add_argument("--size", type=int, default=100, help="message size in bytes")
    parser.add_argument("--runs", type=int, default=3, help="runs of each client")
    args = parser.parse_args(argv)
    bodies = [b"x" * args.size] * args.batch
    nsqd = Nsqd.start(mem_queue_size=(args.runs * 2 * (args.mpubs + 200) + 1) * args.batch)
    try:
        print("client    msgs/s   answer->write  write  write->answer  (µs, medians per cycle)")
        for _ in range(args.runs):
            for name, run in (("raw", run_raw), ("library", run_library)):
                rate, parts = run(nsqd.tcp_address, bodies, args.mpubs)
                print(f"{name:8} {rate:9,.0f}  {parts['answer->write']:13.1f}"
                      f"  {parts['write']:5.1f}  {parts['write->answer']:13.1f}")
                nsqd.delete_topic(TOPIC)
    finally:
        nsqd.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
