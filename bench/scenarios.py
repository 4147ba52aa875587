"""The scenarios, and running one of them once: fresh topic, client processes, checks, clean-up.

Each run starts its client processes, lets them connect and set up, then releases them all at
once; every client times itself from its first send to its last ``OK`` (publishers) or last
message (consumers). A run's time is the latest end minus the earliest start over its clients.
After each run the figures are checked against nsqd's /stats, and the topic is deleted.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from typing import Any

from . import workers
from .server import Nsqd

# The context of a start method (typeshed's BaseContext does not declare Process).
Context = SpawnContext | ForkServerContext | ForkContext
CHANNEL = "bench"


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    role: str  # "mpub", "pub" or "sub"
    default_count: int
    consumers: int = 0


SCENARIOS = {
    s.name: s for s in (
        Scenario("mpub", "publish, MPUB", "mpub", 1_000_000),
        Scenario("pub", "publish, pipelined PUB", "pub", 300_000),
        Scenario("sub", "consume, 1 consumer", "sub", 500_000, consumers=1),
        Scenario("sub4", "consume, 4 consumers", "sub", 500_000, consumers=4),
    )
}


# Who does the clients' work: plain blocking sockets (``workers``) or the client library
# ``nsq_client`` (``library``), with the same counts, batches, windows and RDY.
CLIENTS = ("raw", "library")


@dataclass(frozen=True)
class Settings:
    size: int = 100
    batch: int = 200
    publishers: int = 1
    pub_window: int = 2000
    mpub_window: int = 1
    rdy: int = 2500
    output_buffer_timeout: int = 25  # ms, consumers' IDENTIFY (0: nsqd's default, 250)
    count: int | None = None  # None: each scenario's default
    timeout: float = 300.0

    def count_for(self, scenario: Scenario) -> int:
        return self.count if self.count is not None else scenario.default_count

    def describe(self, scenario: Scenario) -> str:
        if scenario.role == "mpub":
            window = "" if self.mpub_window == 1 else f", {self.mpub_window} in flight"
            return f"{self.publishers} conn, {self.batch} msgs per MPUB{window}"
        if scenario.role == "pub":
            return (f"{self.publishers} conn, {self.batch} PUBs per send, "
                    f"<= {self.pub_window} unanswered")
        return f"{scenario.consumers} conn, RDY {self.rdy}, flush {self.output_buffer_timeout}ms"


@dataclass(frozen=True)
class RunResult:
    messages: int
    seconds: float
    client_cpu: float  # CPU seconds of every client process during the run
    nsqd_cpu: float | None  # CPU seconds nsqd used from the start signal to the last result
    nsqd_written: int | None = None  # bytes nsqd wrote to storage during the run

    @property
    def written_per_message(self) -> float | None:
        if self.nsqd_written is None or not self.messages:
            return None
        return self.nsqd_written / self.messages

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


class RunFailed(Exception):
    """A client failed, timed out, or nsqd's figures do not match what the clients saw."""


def _split(total: int, parts: int) -> list[int]:
    base, rest = divmod(total, parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


def run_once(ctx: Context, nsqd: Nsqd, scenario: Scenario, settings: Settings,
             client: str = "raw") -> RunResult:
    """One run of ``scenario`` with ``client`` ("raw" sockets or the "library") workers."""
    topic = f"bench_{scenario.name}_{secrets.token_hex(4)}"
    try:
        if scenario.role == "sub":
            return _consume(ctx, nsqd, scenario, settings, topic, client)
        return _publish(ctx, nsqd, scenario, settings, topic, client)
    except (workers.BenchError, OSError) as exc:  # set-up and checks; OSError covers HTTP
        raise RunFailed(f"{type(exc).__name__}: {exc}") from exc
    finally:
        try:
            nsqd.delete_topic(topic)
        except OSError:
            pass


def _publish(ctx: Context, nsqd: Nsqd, scenario: Scenario, s: Settings,
             topic: str, client: str) -> RunResult:
    count = s.count_for(scenario)
    params = []
    for share in _split(count, s.publishers):
        if share == 0:
            continue
        common = {"role": scenario.role, "client": client, "address": nsqd.tcp_address,
                  "topic": topic, "size": s.size, "batch": s.batch}
        if scenario.role == "mpub":
            # Whole MPUBs only: a share is rounded up to a multiple of the batch.
            units = -(-share // s.batch)
            common.update(units=units, per_unit=s.batch, per_send=1, window=s.mpub_window)
        else:
            common.update(units=share, per_unit=1, per_send=s.batch, window=s.pub_window)
        params.append(common)
    results, nsqd_usage = run_clients(ctx, nsqd, params, None, s.timeout)
    messages = sum(r["messages"] for r in results)
    item = nsqd.wait_for(topic, lambda t: t is not None and t["message_count"] >= messages, 10)
    got = None if item is None else item["message_count"]
    if got != messages:
        raise RunFailed(f"published {messages} messages but nsqd counts {got}")
    return _combine(results, messages, nsqd_usage)


def _consume(ctx: Context, nsqd: Nsqd, scenario: Scenario, s: Settings,
             topic: str, client: str) -> RunResult:
    count = s.count_for(scenario)
    nsqd.create_channel(topic, CHANNEL)
    workers.prefill(nsqd.tcp_address, topic, count, s.size, s.batch)

    def filled(t: dict[str, Any] | None) -> bool:
        return t is not None and bool(t["channels"]) and t["channels"][0]["depth"] >= count

    item = nsqd.wait_for(topic, filled, 60)
    if not filled(item):
        raise RunFailed(f"pre-fill of {count} messages did not reach the channel: {item}")
    counter = ctx.Value("q", 0) if scenario.consumers > 1 else None
    params = [{"role": "sub", "client": client, "address": nsqd.tcp_address, "topic": topic,
               "channel": CHANNEL, "size": s.size, "rdy": s.rdy, "target": count,
               "output_buffer_timeout": s.output_buffer_timeout}
              for _ in range(scenario.consumers)]
    results, nsqd_usage = run_clients(ctx, nsqd, params, counter, s.timeout)
    received = sum(r["messages"] for r in results)
    extra = sum(r["extra"] for r in results)
    if received != count or extra:
        raise RunFailed(f"published {count} messages, consumers received {received} "
                        f"(+{extra} after the last)")

    def drained(t: dict[str, Any] | None) -> bool:
        if t is None or t["depth"] or len(t["channels"]) != 1:
            return False
        ch = t["channels"][0]
        return not (ch["depth"] or ch["in_flight_count"] or ch["deferred_count"])

    item = nsqd.wait_for(topic, drained, 10)
    if not drained(item):
        raise RunFailed(f"channel not drained after consuming {count} messages: {item}")
    assert item is not None
    ch = item["channels"][0]
    if (ch["message_count"], ch["requeue_count"], ch["timeout_count"]) != (count, 0, 0):
        raise RunFailed(f"unexpected channel counters after consuming {count} messages: {ch}")
    return _combine(results, received, nsqd_usage)


def _combine(results: list[dict[str, Any]], messages: int,
             nsqd_usage: tuple[float | None, int | None]) -> RunResult:
    start = min(r["start"] for r in results)
    end = max(r["end"] for r in results)
    cpu, written = nsqd_usage
    return RunResult(messages, end - start, sum(r["cpu"] for r in results), cpu, written)


def run_clients(ctx: Context, nsqd: Nsqd, params: list[dict[str, Any]], counter: Any,
                timeout: float) -> tuple[list[dict[str, Any]], tuple[float | None, int | None]]:
    """One process per client; start them together; their results and nsqd's CPU seconds
    and bytes written to storage during the run.

    Raises:
        RunFailed: a client failed, exited, or did not finish within ``timeout``.
    """
    go = ctx.Event()
    procs = []
    readers = []
    finished = False
    try:
        for p in params:
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=workers.worker_main, args=(writer, go, p, counter),
                               name=f"bench-{p['role']}", daemon=True)
            proc.start()
            writer.close()
            procs.append(proc)
            readers.append(reader)
        deadline = time.monotonic() + 60
        for proc, reader in zip(procs, readers, strict=True):
            _receive(proc, reader, "ready", deadline)
        cpu_before = nsqd.cpu_seconds()
        written_before = nsqd.written_bytes()
        go.set()
        deadline = time.monotonic() + timeout
        results = [_receive(proc, reader, "done", deadline)
                   for proc, reader in zip(procs, readers, strict=True)]
        cpu_after = nsqd.cpu_seconds()
        written_after = nsqd.written_bytes()
        cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
        written = (None if written_before is None or written_after is None
                   else written_after - written_before)
        finished = True
        return results, (cpu, written)
    finally:
        go.set()
        for proc in procs:
            if finished:
                proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        for reader in readers:
            reader.close()


def _receive(proc: Any, reader: Any, expected: str, deadline: float) -> Any:
    while not reader.poll(0.1):
        if not proc.is_alive() and not reader.poll():
            raise RunFailed(f"client process {proc.name} exited ({proc.exitcode})")
        if time.monotonic() > deadline:
            raise RunFailed(f"client process {proc.name} timed out waiting for {expected!r}")
    try:
        kind, value = reader.recv()
    except EOFError:
        raise RunFailed(f"client process {proc.name} exited ({proc.exitcode})") from None
    if kind == "error":
        raise RunFailed(f"client process failed: {value}")
    if kind != expected:
        raise RunFailed(f"client process {proc.name} said {kind!r}, expected {expected!r}")
    return value
