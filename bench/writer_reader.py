"""``python -m bench.writer_reader``: NSQ's bench_writer then bench_reader, for fixed times.

The pattern of NSQ's ``bench/bench.sh``: a writer phase (``--writers`` connections, each a
stop-and-wait MPUB of ``--batch`` messages of ``--size`` bytes, for ``--runfor`` seconds),
then a reader phase on the backlog it left (one connection, RDY ``--rdy``, one FIN per
message, for ``--reader-runfor`` seconds, shorter than the writer's so that it never drains the
backlog: a consume figure from a drained channel would measure the writer, and is flagged).
Each run starts a fresh nsqd per ``--mem-queue-size`` value: with nsqd's default (10,000) the
backlog is almost all on disk, with a large one it is all in memory. Per phase it reports:

- msgs/s: messages acknowledged (writer: MPUB ``OK``s; reader: messages received before the
  end of its time) divided by the phase's time (latest client end - earliest client start);
- nsqd CPU in us per message: user + system time of nsqd's process (``/proc/<pid>/stat``) over
  the phase, divided by its messages;
- client CPU in us per message (the client processes' own ``process_time``), so that a client
  that starves nsqd on a 2-core machine shows;
- for the writer, nsqd's memory per queued message: growth of its RSS (``/proc/<pid>/status``
  ``VmRSS``) over the phase divided by the messages published (meaningful for the memory
  queue; with the disk queue it is the memory queue's share plus buffers).

The clients are the raw-socket ones of ``bench.workers`` (commands encoded once, frames parsed
by offset in one big buffer, the FINs of one received chunk in one send), one process per
connection. ``--profile DIR`` attaches ``py-spy record --nonblocking --format raw`` to nsqd for
each phase of the first run and prints the top frames (see docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import secrets
import socket
import statistics
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from nsq_common import commands

from . import workers
from .scenarios import Context, RunFailed, _receive
from .server import Nsqd

CHANNEL = "ch"
_LINE = re.compile(r":\d+\)$")
PHASES = ("write", "read")


# -- the client processes --------------------------------------------------------------------

def timed_writer(sock: socket.socket, cmd: bytes, per_command: int,
                 runfor: float) -> dict[str, Any]:
    """bench_writer: send ``cmd`` (one MPUB) and wait for its ``OK``, again until ``runfor``
    seconds have passed; the messages acknowledged."""
    buf = bytearray(workers.RESPONSE_BUFFER)
    view = memoryview(buf)
    sendall = sock.sendall
    recv_into = sock.recv_into
    unpack = workers._unpack_frame
    count = 0
    cpu = time.process_time()
    start = now = time.monotonic()
    stop_at = start + runfor
    while now < stop_at:
        sendall(cmd)
        filled = 0
        while True:  # one OK, perhaps after heartbeats
            nread = recv_into(view[filled:])
            if not nread:
                raise workers.BenchError("nsqd closed the connection")
            filled += nread
            if filled < 8:
                continue
            size, frame_type = unpack(buf, 0)
            if filled < 4 + size:
                continue
            if frame_type == workers.TYPE_RESPONSE and size == workers.OK_SIZE:
                break
            if frame_type == workers.TYPE_RESPONSE and size == workers.HEARTBEAT_SIZE:
                sendall(workers.NOP)
                buf[: filled - 4 - size] = buf[4 + size : filled]
                filled -= 4 + size
                continue
            raise workers.BenchError(workers._unexpected(
                frame_type, workers._frame_text(buf, 0, 4 + size)))
        count += per_command
        now = time.monotonic()
    return {"start": start, "end": now, "messages": count, "extra": 0,
            "cpu": time.process_time() - cpu}


def timed_reader(sock: socket.socket, rdy: int, runfor: float, size: int) -> dict[str, Any]:
    """bench_reader: RDY ``rdy``, FIN every message, for ``runfor`` seconds; then CLS (the
    messages that arrive before CLOSE_WAIT are FINed too and counted as ``extra``)."""
    buf = bytearray(max(workers.MESSAGE_BUFFER, 4 * (workers.MIN_MESSAGE_FRAME + size)))
    view = memoryview(buf)
    max_frames = len(buf) // workers.MIN_MESSAGE_FRAME + 1
    fins = bytearray(b"FIN 0123456789abcdef\n" * max_frames)
    fins_view = memoryview(fins)
    sendall = sock.sendall
    recv_into = sock.recv_into
    fin_len = workers.FIN_LEN
    count = filled = 0
    cpu = time.process_time()
    start = now = time.monotonic()
    stop_at = start + runfor
    sendall(commands.rdy(rdy))
    while now < stop_at:
        nread = recv_into(view[filled:])
        if not nread:
            raise workers.BenchError("nsqd closed the connection")
        end = filled + nread
        pos, k = workers.collect_fins(buf, end, fins, sock)
        filled = end - pos
        if filled:
            buf[:filled] = buf[pos:end]
        if k:
            sendall(fins_view[: k * fin_len])
            count += k
        now = time.monotonic()
    used = time.process_time() - cpu
    extra = workers.close(sock, buf, filled)
    return {"start": start, "end": now, "messages": count, "extra": extra, "cpu": used}


def client_main(conn: Any, go: Any, params: dict[str, Any]) -> None:
    """One client process: connect and set up, say ready, wait for ``go``, run, report."""
    sock: socket.socket | None = None
    try:
        sock = workers.connect(params["address"])
        workers.identify(sock, params["role"])
        if params["role"] == "write":
            per = params["batch"]
            cmd = commands.mpub(params["topic"], [b"x" * params["size"]] * per)
        else:
            workers.subscribe(sock, params["topic"], CHANNEL)
        conn.send(("ready", None))
        if not go.wait(workers.START_TIMEOUT):
            raise workers.BenchError("no start signal")
        if params["role"] == "write":
            result = timed_writer(sock, cmd, per, params["runfor"])
        else:
            result = timed_reader(sock, params["rdy"], params["runfor"], params["size"])
        conn.send(("done", result))
    except BaseException as exc:
        said = workers.nsqd_said(sock) if isinstance(exc, OSError) and sock is not None else ""
        text = f"nsqd said {said} ({exc!r})" if said else f"{exc!r}\n{traceback.format_exc()}"
        conn.send(("error", f"{params.get('role')}: {text}"))
    finally:
        if sock is not None:
            sock.close()
        conn.close()


# -- the parent ------------------------------------------------------------------------------

def rss_bytes(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run_phase(ctx: Context, nsqd: Nsqd, params: list[dict[str, Any]],
              profile: Path | None) -> dict[str, Any]:
    """Start the clients, release them together, wait for them; the phase's figures."""
    go = ctx.Event()
    procs, readers = [], []
    spy: subprocess.Popen[bytes] | None = None
    try:
        for p in params:
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=client_main, args=(writer, go, p),
                               name=f"bench-{p['role']}", daemon=True)
            proc.start()
            writer.close()
            procs.append(proc)
            readers.append(reader)
        deadline = time.monotonic() + 60
        for proc, reader in zip(procs, readers, strict=True):
            _receive(proc, reader, "ready", deadline)
        if profile is not None and nsqd.pid is not None:
            spy = subprocess.Popen(
                [workers_bin("py-spy"), "record", "--nonblocking", "--format", "raw",
                 "--rate", "250", "--pid", str(nsqd.pid), "--output", str(profile)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # py-spy attaches
        rss_before = rss_bytes(nsqd.pid)
        cpu_before = nsqd.cpu_seconds()
        written_before = nsqd.written_bytes()
        go.set()
        deadline = time.monotonic() + params[0]["runfor"] + 120
        results = [_receive(proc, reader, "done", deadline)
                   for proc, reader in zip(procs, readers, strict=True)]
        cpu_after = nsqd.cpu_seconds()
        written_after = nsqd.written_bytes()
        rss_after = rss_bytes(nsqd.pid)
    finally:
        go.set()
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes what it has and exits
            spy.wait(30)
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        for reader in readers:
            reader.close()
    messages = sum(r["messages"] for r in results)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return figures(nsqd, messages, seconds, cpu_before, cpu_after, written_before,
                   written_after, rss_before, rss_after, results)


def figures(nsqd: Nsqd, messages: int, seconds: float, cpu_before: float | None,
            cpu_after: float | None, written_before: int | None, written_after: int | None,
            rss_before: int | None, rss_after: int | None,
            results: list[dict[str, Any]]) -> dict[str, Any]:
    """A phase's figures from what was read of nsqd before and after it."""
    nsqd_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    written = (None if written_before is None or written_after is None
               else written_after - written_before)
    return {
        "messages": messages, "extra": sum(r["extra"] for r in results), "seconds": seconds,
        "msgs_per_s": messages / seconds if seconds > 0 else 0.0,
        "nsqd_cpu_s": nsqd_cpu,
        "nsqd_us_per_msg": nsqd_cpu / messages * 1e6 if nsqd_cpu is not None and messages else None,
        "written_bytes": written,
        "written_bytes_per_msg": written / messages if written is not None and messages else None,
        "client_cpu_s": sum(r["cpu"] for r in results),
        "client_us_per_msg": sum(r["cpu"] for r in results) / messages * 1e6 if messages else None,
        "rss_before": rss_before, "rss_after": rss_after,
        "rss_bytes_per_msg": ((rss_after - rss_before) / messages
                              if rss_before is not None and rss_after is not None and messages
                              else None),
    }


def workers_bin(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


_GO_DURATION = re.compile(r"duration: ([0-9.]+)(µs|us|ms|s)\b")
_GO_UNITS = {"µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def channel_counts(nsqd: Nsqd, topic: str) -> tuple[int, int, int]:
    """The topic's message count, its first channel's depth and in-flight count."""
    stats = nsqd.stats(topic)
    if not stats:
        return 0, 0, 0
    first = next((c for c in stats["channels"] if c["channel_name"] == CHANNEL), None)
    return (stats["message_count"], first["depth"] if first else 0,
            first["in_flight_count"] if first else 0)


def run_go_phase(nsqd: Nsqd, role: str, topic: str, args: argparse.Namespace
                 ) -> dict[str, Any]:
    """NSQ's own bench_writer or bench_reader (``--go-clients DIR``: built from NSQ's
    repository, GOMAXPROCS connections each) for one phase; messages counted from /stats
    (published, or finished: the depth that went), time as the tool reports it."""
    tool = Path(args.go_clients) / {"write": "bench_writer", "read": "bench_reader"}[role]
    common = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={topic}",
              f"--size={args.size}"]
    if role == "write":
        cmd = [str(tool), f"--runfor={args.runfor}s", f"--batch-size={args.batch}", *common]
    else:
        cmd = [str(tool), f"--runfor={args.reader_runfor}s", f"--channel={CHANNEL}",
               f"--rdy={args.rdy}", *common]
    published, depth, _ = channel_counts(nsqd, topic)
    rss_before, cpu_before = rss_bytes(nsqd.pid), nsqd.cpu_seconds()
    written_before = nsqd.written_bytes()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.runfor + 120,
                          check=False)
    cpu_after, written_after = nsqd.cpu_seconds(), nsqd.written_bytes()
    rss_after = rss_bytes(nsqd.pid)
    match = _GO_DURATION.search(done.stderr)
    if done.returncode or match is None:
        raise RunFailed(f"{tool.name} failed ({done.returncode}): {done.stderr[-2000:]}")
    seconds = float(match.group(1)) * _GO_UNITS[match.group(2)]
    if role == "write":
        messages = channel_counts(nsqd, topic)[0] - published
    else:  # what was FINished: messages in flight when it closed come back to the depth
        stats = nsqd.wait_for(topic, lambda t: t is not None and not next(
            c for c in t["channels"] if c["channel_name"] == CHANNEL)["in_flight_count"], 30)
        assert stats is not None
        messages = depth - channel_counts(nsqd, topic)[1]
    return figures(nsqd, messages, seconds, cpu_before, cpu_after, written_before,
                   written_after, rss_before, rss_after, [])


def one_run(ctx: Context, args: argparse.Namespace, mem_queue_size: int,
            profile_dir: Path | None, *, nsqd_label: str = "ours", binary: str | None = None,
            channels: int = 1) -> dict[str, dict[str, Any]]:
    """A fresh nsqd (``binary``, or this environment's) with a topic of ``channels``
    channels; the writer phase, then the reader phase (on the first channel) on its
    backlog."""
    nsqd = Nsqd.start(mem_queue_size, binary=binary)
    label = f"{nsqd_label}-{queue_label(mem_queue_size)}-{channels}ch"
    try:
        topic = f"bench_{secrets.token_hex(4)}"
        nsqd.create_channel(topic, CHANNEL)
        for i in range(2, channels + 1):
            nsqd.post("/channel/create", topic=topic, channel=f"{CHANNEL}{i}")
        common = {"address": nsqd.tcp_address, "topic": topic, "size": args.size}
        spy = (lambda phase: profile_dir / f"{label}-{phase}.txt") if profile_dir else (
            lambda phase: None)
        if args.go_clients:
            write = run_go_phase(nsqd, "write", topic, args)
        else:
            write = run_phase(ctx, nsqd, [
                {**common, "role": "write", "batch": args.batch, "runfor": args.runfor}
                for _ in range(args.writers)], spy("write"))
        deadline = time.monotonic() + 30
        while (channel_counts(nsqd, topic)[1] < write["messages"]
               and time.monotonic() < deadline):
            time.sleep(0.05)
        time.sleep(args.pause)
        if args.go_clients:
            read = run_go_phase(nsqd, "read", topic, args)
        else:
            read = run_phase(ctx, nsqd, [
                {**common, "role": "read", "rdy": args.rdy, "runfor": args.reader_runfor}],
                spy("read"))
        depth = channel_counts(nsqd, topic)[1]
        read["depth_left"] = depth
        read["drained"] = depth == 0
        if not args.go_clients and read["messages"] + read["extra"] + depth != write["messages"]:
            raise RunFailed(f"published {write['messages']}, read {read['messages']} "
                            f"+ {read['extra']}, {depth} left")
        nsqd.delete_topic(topic)  # so that stopping nsqd has no backlog to save
        return {"write": write, "read": read}
    finally:
        nsqd.stop()


def queue_label(size: int) -> str:
    """``memory`` (a queue that holds a whole run), ``disk`` (nsqd's default, 10,000: mostly
    disk), ``mem0`` (everything written before it is acknowledged), else ``mem<N>``."""
    if size >= 10_000_000:
        return "memory"
    return "disk" if size == 10_000 else f"mem{size}"


def top_frames(path: Path, n: int = 15) -> list[tuple[str, float, float]]:
    """The ``n`` functions with the most samples on their own (self), with their total share:
    (frame, self %, total %), from py-spy's raw (collapsed) output; idle samples excluded."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        # by function: "name (file.py:123)" -> "name (file.py)"
        frames = [_LINE.sub(")", frame) for frame in stack.split(";")]
        count = int(count_text)
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    if not samples:
        return []
    return [(frame, 100 * c / samples, 100 * total[frame] / samples)
            for frame, c in own.most_common(n)]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.writer_reader", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="runs (default 3); medians are shown")
    p.add_argument("--runfor", type=float, default=5.0, help="writer seconds (default 5)")
    p.add_argument("--reader-runfor", type=float, default=None,
                   help="reader seconds (default half of --runfor)")
    p.add_argument("--writers", type=int, default=2, help="writer connections (default 2)")
    p.add_argument("--batch", type=int, default=200, help="messages per MPUB (default 200)")
    p.add_argument("--size", type=int, default=100, help="message bytes (default 100)")
    p.add_argument("--rdy", type=int, default=2500, help="reader's RDY (default 2500)")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between the phases")
    p.add_argument("--mem-queue-size", default="10000,100000000",
                   help="nsqd's --mem-queue-size, one block per value (default: nsqd's "
                        "default 10000, i.e. mostly disk, and 100000000, all memory)")
    p.add_argument("--channels", default="1",
                   help="channels of the topic, one block per value (default 1; e.g. 1,4); "
                        "the reader reads the first")
    p.add_argument("--nsqd", action="append", default=None, metavar="LABEL=PATH",
                   help="an nsqd to run (repeat to compare: an older checkout's "
                        ".venv/bin/nsqd, Go's nsqd), alternated run by run; default: this "
                        "environment's, as 'ours'")
    p.add_argument("--go-clients", default=None, metavar="DIR",
                   help="NSQ's own bench_writer and bench_reader from DIR as the clients")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="py-spy (raw format) of nsqd in each phase of the first run, into DIR")
    p.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    return p


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's settings, as ``one_run`` takes them."""
    args = build_parser().parse_args(argv)
    if args.reader_runfor is None:
        args.reader_runfor = args.runfor / 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [int(v) for v in args.mem_queue_size.split(",") if v]
    channel_counts_ = [int(v) for v in args.channels.split(",") if v]
    nsqds = [tuple(spec.split("=", 1)) for spec in args.nsqd or ["ours="]]
    ctx: Context = multiprocessing.get_context("spawn")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {}
    load = [os.getloadavg()]
    for i in range(args.runs):
        for size in sizes:
            for channels in channel_counts_:
                for name, binary in nsqds:  # alternated, so that they share the machine's mood
                    profile_dir = args.profile if i == 0 else None
                    key = f"{name} {queue_label(size)} {channels}ch"
                    runs.setdefault(key, []).append(one_run(
                        ctx, args, size, profile_dir, nsqd_label=name, binary=binary or None,
                        channels=channels))
                    load.append(os.getloadavg())
    clients = "NSQ's bench_writer/bench_reader" if args.go_clients else (
        f"{args.writers} writers x MPUB {args.batch} x {args.size} B; 1 reader")
    print(f"# {clients}, MPUB {args.batch} x {args.size} B for {args.runfor:g} s; RDY "
          f"{args.rdy}, for {args.reader_runfor:g} s; {args.runs} runs, medians;"
          f" load average (1 min) {min(x[0] for x in load):.2f}-{max(x[0] for x in load):.2f}")
    print(f"{'nsqd, queue, channels':<22} {'phase':<6} {'msgs/s':>9} {'(runs)':<26} "
          f"{'nsqd us/msg':>11} {'(runs)':<18} {'disk B/msg':>10} {'client us/msg':>13} "
          f"{'RSS B/msg':>9}")
    for label, rs in runs.items():
        for phase in PHASES:
            figs = [r[phase] for r in rs]
            rate = statistics.median(f["msgs_per_s"] for f in figs)
            cpus = [f["nsqd_us_per_msg"] for f in figs if f["nsqd_us_per_msg"] is not None]
            client = statistics.median(f["client_us_per_msg"] or 0 for f in figs)
            rss = [f["rss_bytes_per_msg"] for f in figs if f["rss_bytes_per_msg"] is not None]
            disk = [f["written_bytes_per_msg"] for f in figs
                    if f["written_bytes_per_msg"] is not None]
            drained = " DRAINED" if any(f.get("drained") for f in figs) else ""
            print(f"{label:<22} {phase:<6} {rate:>9,.0f} "
                  f"{' '.join(format(f['msgs_per_s'], ',.0f') for f in figs):<26} "
                  f"{fmt(statistics.median(cpus) if cpus else None, '.2f'):>11} "
                  f"{' '.join(f'{c:.2f}' for c in cpus):<18} "
                  f"{fmt(statistics.median(disk) if disk else None, '.1f'):>10} "
                  f"{client:>13.2f} "
                  f"{fmt(statistics.median(rss) if rss and phase == 'write' else None, '.0f'):>9}"
                  f"{drained}")
    if args.profile:
        for path in sorted(args.profile.glob("*.txt")):
            print(f"\n## top frames (self %, total %): {path.name}")
            for frame, own, tot in top_frames(path):
                print(f"{own:5.1f} {tot:5.1f}  {frame}")
    if args.json:
        args.json.write_text(json.dumps({
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                        "load": load},
            "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
