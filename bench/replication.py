"""``python -m bench.replication``: publishing to replicated topics, and a leader's failover.

Starts a real etcd (``etcd`` on the PATH, as the tests do) and ``--nodes`` nsqd with
``--etcd-endpoints`` on loopback, plus one nsqd without etcd, and measures (see
docs/design/replication.md and docs/performance.md, "Replication"):

- publishing to a fresh topic per run, in each setup: ``none`` (the nsqd without etcd: no
  replication at all), then ``replicas 1``, ``2`` and ``3`` (created with
  ``/topic/create?replicas=N`` on the first node, which leads it; a publish is acknowledged once
  every member of the in-sync set holds it). Two modes: ``pub`` (one connection, at most
  ``--pub-window`` PUBs sent but not answered) and ``mpub`` (MPUBs of ``--batch``, at most
  ``--mpub-window`` in flight). Per run: msgs/s, each command's latency (sent to its ``OK``),
  every nsqd's CPU (user + system, ``/proc/<pid>/stat``) per message, and the time the main
  threads of the topic's nsqd and of the producer spent runnable but waiting for a CPU (the
  run queue, ``/proc/<pid>/schedstat``). Runs alternate between the setups (run 1 of each,
  then run 2, ...); the table shows the medians of the runs' rates and CPU, and the p50, p99
  and maximum of every command of the setup's runs together, with their number: with the
  defaults an ``mpub`` run is 300 MPUBs, 4 in flight, so its own p99 would be its slowest
  stall (the 4 MPUBs that wait through it), whatever its cause. The run-queue wait says how
  much of a tail is the machine's: a process that waits for a CPU holds every
  acknowledgement that needs it.
- ``--nsqd LABEL=PATH``: another nsqd without etcd (an older checkout's), published to as
  ``none`` is, as the setup ``none LABEL``, alternated with the others: the unreplicated
  path before and after, in the same session.
- failover, for each replicated setup of 2 or more replicas: a fresh cluster of that many
  nodes, a consumer connected to every node (as NSQ consumers are, through nsqlookupd) and a
  producer publishing over HTTP to the nodes still alive; the leader is killed with SIGKILL,
  and the time is taken from the kill to the first message delivered by another node. Its
  lease has to lapse first (``LEASE_TTL``, 6 s, renewed every 2 s: 4 to 6 s after the kill),
  so that is the floor.

The producer and consumers are plain sockets in this process. The load average is printed
beside the figures: on a shared machine it says how far to trust them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsq_common import commands
from nsq_testing import Etcd

from . import workers
from .server import Nsqd

CHANNEL = "ch"
MODES = ("pub", "mpub")
NONE = 0  # the setup without etcd


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _replica_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("give one or more replica counts >= 1")
    return values


def _labelled(spec: str, parser: argparse.ArgumentParser) -> tuple[str, str]:
    label, sep, binary = spec.partition("=")
    if not sep or not label or not binary:
        parser.error(f"--nsqd: give LABEL=PATH, not {spec!r}")
    return label, binary


def setup_label(replicas: int) -> str:
    return "none (no etcd)" if replicas == NONE else f"replicas {replicas}"


# -- the cluster -----------------------------------------------------------------------------

@dataclass
class Cluster:
    """etcd and its nsqd nodes; the first node leads what is created through it."""

    etcd: Etcd
    directory: str
    nodes: list[Nsqd] = field(default_factory=list)

    @classmethod
    def start(cls, count: int, extra: Sequence[str] = ()) -> Cluster:
        directory = tempfile.mkdtemp(prefix="nsq-bench-etcd-")
        cluster = cls(Etcd(Path(directory)), directory)
        try:
            cluster.etcd.start()
            for _ in range(count):
                cluster.nodes.append(Nsqd.start(extra_args=[
                    "--broadcast-address=127.0.0.1", f"--etcd-endpoints={cluster.etcd.endpoint}",
                    *extra]))
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def stop(self) -> None:
        try:
            for node in self.nodes:
                node.stop()
            self.etcd.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def node_id(nsqd: Nsqd) -> str:
    return nsqd.tcp_address  # 127.0.0.1:<tcp port>, its --broadcast-address and port


def replicated(nsqd: Nsqd, topic: str, replicas: int, timeout: float = 120.0) -> list[str]:
    """Create ``topic`` with ``replicas`` through ``nsqd`` and wait until it leads it with the
    whole set in sync (so that a run measures the steady state, not the catching up); the
    nodes it was placed on."""
    deadline = time.monotonic() + timeout
    while True:  # INVALID_REPLICAS until enough nodes have joined
        try:
            nsqd.post("/topic/create", topic=topic, replicas=str(replicas))
            break
        except urllib.error.HTTPError as exc:
            if exc.code not in (400, 503) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)

    def ready(stats: dict[str, Any] | None) -> bool:
        repl = (stats or {}).get("replication") or {}
        return bool(repl.get("leader") == node_id(nsqd) and len(repl.get("isr") or ()) == replicas)

    stats = nsqd.wait_for(topic, ready, timeout)
    if not ready(stats):
        raise RuntimeError(f"{topic} not led by {node_id(nsqd)} with {replicas} in sync "
                           f"after {timeout:.0f}s: {stats and stats.get('replication')}\n"
                           f"{nsqd.log()[-3000:]}")
    assert stats is not None
    return [str(node) for node in stats["replication"]["replicas"]]


# -- publishing ------------------------------------------------------------------------------

def publish(address: str, cmd: bytes, per_command: int, commands_: int,
            window: int) -> tuple[float, list[float]]:
    """Send ``commands_`` copies of ``cmd``, at most ``window`` unanswered; (seconds, each
    command's latency in seconds). Raises BenchError on anything but ``OK``."""
    sock = workers.connect(address)
    try:
        workers.identify(sock, "publish")
        buf = bytearray(workers.RESPONSE_BUFFER)
        view = memoryview(buf)
        sent_at: deque[float] = deque()
        latencies: list[float] = []
        filled = sent = 0
        now = time.monotonic
        start = now()
        while len(latencies) < commands_:
            room = min(window - len(sent_at), commands_ - sent)
            if room > 0:
                t = now()
                sock.sendall(cmd * room)
                sent_at.extend([t] * room)
                sent += room
            nread = sock.recv_into(view[filled:])
            if not nread:
                raise workers.BenchError("nsqd closed the connection")
            filled += nread
            pos = 0
            while filled - pos >= 8:
                size, frame_type = workers.FRAME.unpack_from(buf, pos)
                if filled - pos < 4 + size:
                    break
                if frame_type == workers.TYPE_RESPONSE and size == workers.OK_SIZE:
                    latencies.append(now() - sent_at.popleft())
                elif frame_type == workers.TYPE_RESPONSE and size == workers.HEARTBEAT_SIZE:
                    sock.sendall(workers.NOP)
                else:
                    raise workers.BenchError(workers._unexpected(
                        frame_type, workers._frame_text(buf, pos, pos + 4 + size)))
                pos += 4 + size
            buf[: filled - pos] = buf[pos:filled]
            filled -= pos
        return now() - start, latencies
    finally:
        sock.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_queue_seconds(pid: int | None, tid: int | None = None) -> float | None:
    """The time a process's main thread (or thread ``tid`` of it) has spent runnable but
    waiting for a CPU so far (Linux ``/proc/<pid>/schedstat``, nanoseconds; None where it
    cannot be read)."""
    if pid is None:
        return None
    path = f"/proc/{pid}/schedstat" if tid is None else f"/proc/{pid}/task/{tid}/schedstat"
    try:
        return int(Path(path).read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _waits(pids: list[int | None]) -> list[float | None]:
    return [*(run_queue_seconds(p) for p in pids),
            run_queue_seconds(os.getpid(), threading.get_native_id())]  # the producer


def publish_run(leader: Nsqd, nodes: list[Nsqd], replicas: int, mode: str,
                args: argparse.Namespace) -> dict[str, Any]:
    """One run: a fresh topic on ``leader`` (placed with ``replicas``, unless NONE), published
    to through it; the figures."""
    topic = f"bench_{secrets.token_hex(4)}"
    if replicas == NONE:
        leader.post("/topic/create", topic=topic)
        placed = [node_id(leader)]
    else:
        placed = replicated(leader, topic, replicas)
    body = b"x" * args.size
    if mode == "pub":
        cmd, per, window = commands.pub(topic, body), 1, args.pub_window
    else:
        cmd, per, window = commands.mpub(topic, [body] * args.batch), args.batch, args.mpub_window
    count = max(1, args.count // per)
    # the topic's nodes, the leader first, then the producer: their run-queue waits
    waited_by = [n.pid for n in nodes if node_id(n) in placed]
    before = [n.cpu_seconds() for n in nodes]
    waits_before = _waits(waited_by)
    seconds, latencies = publish(leader.tcp_address, cmd, per, count, window)
    waits_after = _waits(waited_by)
    after = [n.cpu_seconds() for n in nodes]
    messages = count * per
    leader.delete_topic(topic)  # the cluster's copies too; the next run starts clean
    us = [None if b is None or a is None else (a - b) / messages * 1e6
          for b, a in zip(before, after, strict=True)]
    followers = [u for n, u in zip(nodes, us, strict=True)
                 if n is not leader and node_id(n) in placed]
    waits = [None if b is None or a is None else (a - b) * 1e3
             for b, a in zip(waits_before, waits_after, strict=True)]
    return {
        "messages": messages, "seconds": seconds, "msgs_per_s": messages / seconds,
        "commands": count,
        "p50_ms": percentile(latencies, 0.5) * 1e3, "p99_ms": percentile(latencies, 0.99) * 1e3,
        "max_ms": max(latencies) * 1e3,
        # not written to --json (a figure per command); the table pools them over the runs
        "latencies_ms": [x * 1e3 for x in latencies],
        # ms each of the topic's nodes (the leader first) and the producer spent waiting
        # for a CPU during the run
        "run_queue_ms": waits,
        "run_queue_pct": (None if None in waits
                          else sum(w for w in waits if w is not None) / seconds / 10),
        "nsqd_us_per_msg": us,  # every node, the leader first
        "leader_us_per_msg": us[0],
        "follower_us_per_msg": (None if not followers or None in followers
                                else sum(f for f in followers if f is not None) / len(followers)),
        "all_us_per_msg": None if None in us else sum(u for u in us if u is not None),
    }


# -- failover --------------------------------------------------------------------------------

class Consumer(threading.Thread):
    """SUB to one node, RDY, FIN what comes; the monotonic time and node of each delivery."""

    def __init__(self, nsqd: Nsqd, topic: str, deliveries: list[tuple[float, str]],
                 lock: threading.Lock) -> None:
        super().__init__(daemon=True, name=f"consume-{nsqd.tcp_address}")
        self.node = node_id(nsqd)
        self.sock = workers.connect(nsqd.tcp_address)
        workers.identify(self.sock, "consume")
        workers.subscribe(self.sock, topic, CHANNEL)
        self.sock.sendall(commands.rdy(100))
        self.deliveries = deliveries
        self.lock = lock

    def run(self) -> None:
        pending = b""
        try:
            while True:
                frame_type, data, pending = workers.next_frame(self.sock, pending, "closed")
                if frame_type == workers.TYPE_MESSAGE:
                    with self.lock:
                        self.deliveries.append((time.monotonic(), self.node))
                    self.sock.sendall(b"FIN " + data[10:26] + b"\n")
                elif frame_type == workers.TYPE_RESPONSE and data == b"_heartbeat_":
                    self.sock.sendall(workers.NOP)
        except (OSError, workers.BenchError):
            return  # the node was killed, or we closed the socket

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def http_pub(nsqd: Nsqd, topic: str, body: bytes) -> bool:
    req = urllib.request.Request(f"http://{nsqd.http_address}/pub?topic={topic}", data=body,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return bool(resp.read() == b"OK")
    except (OSError, urllib.error.URLError):
        return False


def failover_run(replicas: int, timeout: float) -> dict[str, Any]:
    """A fresh cluster of ``replicas`` nodes; the leader killed; seconds from the kill to the
    first publish accepted again and to the first delivery by another node."""
    # one survivor may acknowledge alone: what is timed is the change of leader, not the
    # in-sync minimum (with 2 replicas and the default minimum of 2, a survivor refuses
    # every publish until the lost node is back, as the design says)
    cluster = Cluster.start(replicas, ["--min-insync-replicas=1"])
    consumers: list[Consumer] = []
    try:
        leader, survivors = cluster.nodes[0], cluster.nodes[1:]
        topic = f"failover_{secrets.token_hex(4)}"
        replicated(leader, topic, replicas)
        deliveries: list[tuple[float, str]] = []
        lock = threading.Lock()
        consumers = [Consumer(n, topic, deliveries, lock) for n in cluster.nodes]
        for c in consumers:
            c.start()
        # the path works before the kill: one message published and delivered by the leader
        if not http_pub(leader, topic, b"before"):
            raise RuntimeError("the leader refused a publish before the kill")
        deadline = time.monotonic() + timeout
        while not deliveries:
            if time.monotonic() > deadline:
                raise RuntimeError("nothing delivered before the kill")
            time.sleep(0.01)
        assert leader.daemon is not None
        killed_at = time.monotonic()
        leader.daemon.kill()
        accepted_at: float | None = None
        i = 0
        while True:
            now = time.monotonic()
            with lock:
                first = next((t for t, node in deliveries
                              if t > killed_at and node != node_id(leader)), None)
            if first is not None:
                break
            if now > killed_at + timeout:
                raise RuntimeError(f"no delivery {timeout:.0f}s after the kill")
            if http_pub(survivors[i % len(survivors)], topic, b"after") and accepted_at is None:
                accepted_at = time.monotonic()
            i += 1
            time.sleep(0.02)
        return {"replicas": replicas, "first_publish_s": (accepted_at or first) - killed_at,
                "first_delivery_s": first - killed_at}
    finally:
        for c in consumers:
            c.close()
        for c in consumers:
            c.join(5)
        cluster.stop()


# -- the command -----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.replication", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=_replica_list, default=[1, 2, 3],
                   help="replica counts to publish with, beside 'none' (no etcd) "
                        "(default 1,2,3); --nodes is at least the largest")
    p.add_argument("--nodes", type=_positive, default=None,
                   help="nsqd nodes in the cluster (default: the largest of --replicas)")
    p.add_argument("--modes", default="pub,mpub",
                   help="comma-separated subset of: pub, mpub (default both)")
    p.add_argument("--runs", type=_positive, default=3, help="runs per setup (default 3)")
    p.add_argument("--count", type=_positive, default=20_000,
                   help="messages per publishing run (default 20,000)")
    p.add_argument("--size", type=_positive, default=100, help="message bytes (default 100)")
    p.add_argument("--batch", type=_positive, default=100, help="messages per MPUB (default 100)")
    p.add_argument("--pub-window", type=_positive, default=100,
                   help="PUBs sent but not yet answered (default 100)")
    p.add_argument("--mpub-window", type=_positive, default=4,
                   help="MPUBs sent but not yet answered (default 4)")
    p.add_argument("--nsqd", action="append", default=None, metavar="LABEL=PATH",
                   help="another nsqd to publish to without etcd, beside this environment's "
                        "('none'), as the setup 'none LABEL' (repeat for more): an older "
                        "checkout's .venv/bin/nsqd, to compare the unreplicated path in the "
                        "same session")
    p.add_argument("--failover-runs", type=int, default=None,
                   help="failovers per replicated setup of 2 or more (default --runs; 0: none)")
    p.add_argument("--failover-timeout", type=float, default=120.0,
                   help="seconds a failover may take before the run fails (default 120)")
    p.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    return p


def _pct(rs: list[dict[str, Any]]) -> str:
    values = [r["run_queue_pct"] for r in rs if r["run_queue_pct"] is not None]
    return f"{statistics.median(values):.0f}%" if values else "-"


def _us(rs: list[dict[str, Any]], name: str) -> str:
    values = [r[name] for r in rs if r[name] is not None]
    return f"{statistics.median(values):.1f}" if values else "-"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    nodes_count = args.nodes or max(args.replicas)
    if nodes_count < max(args.replicas):
        parser.error("--nodes must be at least the largest of --replicas")
    failover_runs = args.runs if args.failover_runs is None else args.failover_runs
    others = [_labelled(spec, parser) for spec in args.nsqd or ()]
    load = [os.getloadavg()]
    runs: dict[str, list[dict[str, Any]]] = {}
    failovers: dict[int, list[dict[str, Any]]] = {}

    singles: dict[str, Nsqd] = {}
    cluster: Cluster | None = None
    try:
        # without etcd: this environment's nsqd ("none"), then each --nsqd
        singles[setup_label(NONE)] = Nsqd.start()
        for label, binary in others:
            singles[f"{setup_label(NONE)} {label}"] = Nsqd.start(binary=binary)
        cluster = Cluster.start(nodes_count)
        print(f"bench: etcd at {cluster.etcd.endpoint}, {nodes_count} nodes; nsqd without etcd "
              f"at {', '.join(n.tcp_address for n in singles.values())}; {args.runs} run(s) "
              "per setup", flush=True)
        setups: list[tuple[str, int, Nsqd, list[Nsqd]]] = [
            *((label, NONE, n, [n]) for label, n in singles.items()),
            *((setup_label(r), r, cluster.nodes[0], cluster.nodes) for r in args.replicas)]
        for i in range(args.runs):
            for mode in modes:
                # alternated, so that they share the machine's mood
                for label, replicas, leader, nodes in setups:
                    result = publish_run(leader, nodes, replicas, mode, args)
                    load.append(os.getloadavg())
                    key = f"{mode} {label}"
                    runs.setdefault(key, []).append(result)
                    print(f"  {key} run {i + 1}/{args.runs}: {result['msgs_per_s']:,.0f} msg/s, "
                          f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms",
                          flush=True)
    finally:
        try:
            if cluster is not None:
                cluster.stop()
        finally:
            for n in singles.values():
                n.stop()
    for i in range(failover_runs):
        for replicas in (r for r in args.replicas if r >= 2):
            result = failover_run(replicas, args.failover_timeout)
            load.append(os.getloadavg())
            failovers.setdefault(replicas, []).append(result)
            print(f"  failover replicas {replicas} run {i + 1}/{failover_runs}: first publish "
                  f"{result['first_publish_s']:.2f} s, first delivery "
                  f"{result['first_delivery_s']:.2f} s after the kill", flush=True)

    lows, highs = min(x[0] for x in load), max(x[0] for x in load)
    print(f"\n# {args.size} B messages; pub: window {args.pub_window}; mpub: {args.batch} per "
          f"MPUB, window {args.mpub_window}; {args.count:,} msgs per run; {args.runs} runs; "
          f"load average (1 min) {lows:.2f}-{highs:.2f} on {os.cpu_count()} CPUs")
    print("# msg/s and CPU: the runs' medians; latency (ms): p50, p99 and max of every command "
          "of the runs together (n: how many)")
    print("# nsqd CPU in us per message: the leader's, each follower's (the mean of the "
          "topic's other replicas), every node's together; wait: the time the topic's nsqd and "
          "the producer waited for a CPU, summed, in % of the run's (median)")
    print(f"{'mode, setup':<24} {'msg/s':>9} {'p50':>6} {'p99':>7} {'max':>7} {'n':>6} "
          f"{'leader':>7} {'follower':>8} {'all':>6} {'wait':>5}  {'runs (msg/s)'}")
    for key, rs in runs.items():
        pooled = [x for r in rs for x in r["latencies_ms"]]
        print(f"{key:<24} {statistics.median(r['msgs_per_s'] for r in rs):>9,.0f} "
              f"{percentile(pooled, 0.5):>6.1f} {percentile(pooled, 0.99):>7.1f} "
              f"{max(pooled):>7.1f} {len(pooled):>6} "
              f"{_us(rs, 'leader_us_per_msg'):>7} {_us(rs, 'follower_us_per_msg'):>8} "
              f"{_us(rs, 'all_us_per_msg'):>6} {_pct(rs):>5}  "
              f"{' '.join(format(r['msgs_per_s'], ',.0f') for r in rs)}")
    if failovers:
        print("\n# failover: SIGKILL of the leader to the first publish accepted by a survivor "
              "and to the first delivery by the new leader (s; median, runs)")
        for replicas, fs in failovers.items():
            print(f"replicas {replicas:<15} first publish "
                  f"{statistics.median(f['first_publish_s'] for f in fs):.2f} "
                  f"({' '.join(format(f['first_publish_s'], '.2f') for f in fs)}), first delivery "
                  f"{statistics.median(f['first_delivery_s'] for f in fs):.2f} "
                  f"({' '.join(format(f['first_delivery_s'], '.2f') for f in fs)})")
    if args.json:
        args.json.write_text(json.dumps({
            "command": "python -m bench.replication "
                       + " ".join(sys.argv[1:] if argv is None else argv),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                        "load": load},
            "runs": {k: [{n: v for n, v in r.items() if n != "latencies_ms"} for r in rs]
                     for k, rs in runs.items()},
            "failovers": {str(k): v for k, v in failovers.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
