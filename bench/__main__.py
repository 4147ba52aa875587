"""``python -m bench``: start nsqd, run the scenarios, print the median msgs/s and MB/s.

Run from the repository root with the workspace's Python (``make bench-tcp``). See
``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import signal
import statistics
import sys
import time
from dataclasses import asdict
from typing import Any, cast

from .report import render
from .scenarios import CLIENTS, SCENARIOS, Context, RunFailed, RunResult, Settings, run_once
from .server import Nsqd

MIB = 1024 * 1024
REQUIRED_RATIO = 0.8  # library figures within 20% of the raw clients'


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _scenario_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown scenario(s) {', '.join(unknown) or text!r}; choose from {', '.join(SCENARIOS)}")
    return names


def _client_list(text: str) -> list[str]:
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(CLIENTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown client(s) {', '.join(unknown) or text!r}; choose from {', '.join(CLIENTS)}")
    return [c for c in CLIENTS if c in names]  # raw first, whatever the order given


def _sizes(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("give one or more sizes >= 0")
    return values


def _queue_label(size: int | None) -> str:
    if size is None:
        return "external"
    return "disk" if size == 0 else f"memory ({size:,})"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="nsqd throughput benchmark (publish via MPUB / pipelined PUB; consume with "
                    "1 and 4 consumers). Prints the median of --runs runs per scenario.",
    )
    p.add_argument("--scenarios", type=_scenario_list, default=None,
                   help=f"comma-separated subset of: {', '.join(SCENARIOS)} (default: all)")
    p.add_argument("--runs", type=_positive, default=3, help="runs per scenario (default 3)")
    p.add_argument("--client", type=_client_list, default=["raw"],
                   help="comma-separated clients to run every scenario with: 'raw' (plain "
                        "sockets), 'library' (the nsq_client library); 'raw,library' runs "
                        "both, alternating run by run, and compares them (default raw)")
    p.add_argument("--count", type=_positive, default=None,
                   help="messages per run, for every scenario (default: "
                   + ", ".join(f"{s.name} {s.default_count:,}" for s in SCENARIOS.values()) + ")")
    p.add_argument("--size", type=_positive, default=100, help="message body bytes (default 100)")
    p.add_argument("--batch", type=_positive, default=200,
                   help="messages per MPUB; also PUB commands per send (default 200)")
    p.add_argument("--publishers", type=_positive, default=1,
                   help="publisher connections (processes) in mpub and pub (default 1)")
    p.add_argument("--pub-window", type=_positive, default=2000,
                   help="pub: most PUBs sent but not yet answered per connection (default 2000)")
    p.add_argument("--mpub-window", type=_positive, default=1,
                   help="mpub: MPUBs in flight per connection (default 1: wait for each OK, "
                        "as bench_writer does)")
    p.add_argument("--rdy", type=_positive, default=2500, help="consumers' RDY (default 2500)")
    p.add_argument("--output-buffer-timeout", type=int, default=25, metavar="MS",
                   help="consumers' IDENTIFY output_buffer_timeout in ms (default 25, nsqd's "
                        "minimum; 0 = nsqd's default of 250, -1 = none)")
    p.add_argument("--mem-queue-size", type=_sizes, default=[10_000_000, 0],
                   help="comma-separated --mem-queue-size values; every scenario runs against a "
                        "fresh nsqd for each (default 10000000,0: the memory path, where every "
                        "message of a run fits in memory, then the disk path)")
    p.add_argument("--nsqd-tcp-address", default=None,
                   help="benchmark this running nsqd instead of starting one")
    p.add_argument("--nsqd-http-address", default=None,
                   help="its HTTP address (default: TCP port + 1)")
    p.add_argument("--json", dest="json_path", metavar="FILE", default=None,
                   help="also write the results to FILE as JSON")
    p.add_argument("--profile", metavar="OUT.svg", default=None,
                   help="run nsqd under 'py-spy record -o OUT.svg' for one scenario "
                        "(--scenarios NAME; default mpub)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds a run may take before it is abandoned (default 300)")
    p.add_argument("--start-method", choices=["spawn", "forkserver", "fork"], default="spawn",
                   help="multiprocessing start method for the client processes (default spawn)")
    return p


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def _share(cpu: float | None, seconds: float) -> float | None:
    return None if cpu is None or seconds <= 0 else cpu / seconds


def _bytes(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _summary(name: str, runs: list[RunResult], size: int) -> dict[str, Any]:
    median = statistics.median(r.rate for r in runs)
    client = [_share(r.client_cpu, r.seconds) for r in runs]
    server = [_share(r.nsqd_cpu, r.seconds) for r in runs]
    written = [r.written_per_message for r in runs]
    return {
        "scenario": name,
        "messages": runs[0].messages,
        "median_msgs_per_s": median,
        "median_mb_per_s": median * size / MIB,
        "median_client_cpu": statistics.median(c for c in client if c is not None),
        "median_nsqd_cpu": (statistics.median(c for c in server if c is not None)
                            if all(c is not None for c in server) else None),
        "median_written_per_msg": (statistics.median(w for w in written if w is not None)
                                   if all(w is not None for w in written) else None),
        "runs": [{"messages": r.messages, "seconds": r.seconds, "msgs_per_s": r.rate,
                  "mb_per_s": r.rate * size / MIB, "client_cpu_seconds": r.client_cpu,
                  "nsqd_cpu_seconds": r.nsqd_cpu, "nsqd_written_bytes": r.nsqd_written}
                 for r in runs],
    }


def comparisons(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Library against raw for every (queue, scenario) that has both: the ratio of the
    medians, and the ratio within each pair of runs (raw run i and library run i ran one
    after the other)."""
    raw = {(s["queue"], s["scenario"]): s for s in summaries if s["client"] == "raw"}
    out = []
    for lib in summaries:
        base = raw.get((lib["queue"], lib["scenario"]))
        if lib["client"] != "library" or base is None:
            continue
        pairs = [b["msgs_per_s"] and a["msgs_per_s"] / b["msgs_per_s"]
                 for a, b in zip(lib["runs"], base["runs"], strict=False)]
        out.append({
            "queue": lib["queue"], "scenario": lib["scenario"],
            "raw_msgs_per_s": base["median_msgs_per_s"],
            "library_msgs_per_s": lib["median_msgs_per_s"],
            "ratio": (lib["median_msgs_per_s"] / base["median_msgs_per_s"]
                      if base["median_msgs_per_s"] else None),
            "run_ratios": pairs,
            "raw_client_cpu": base["median_client_cpu"],
            "library_client_cpu": lib["median_client_cpu"],
        })
    return out


def print_table(summaries: list[dict[str, Any]], settings: Settings, runs: int) -> None:
    headers = ("queue", "scenario", "client", "setup", "msgs/run", "msgs/s", "MB/s", "client CPU",
               "nsqd CPU", "disk B/msg", "runs (msgs/s)")
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        sc = SCENARIOS[s["scenario"]]
        rows.append((
            s.get("queue", ""), f"{sc.name}: {sc.title}", s["client"], settings.describe(sc),
            f"{s['messages']:,}", _fmt_rate(s["median_msgs_per_s"]),
            f"{s['median_mb_per_s']:.2f}", _pct(s["median_client_cpu"]),
            _pct(s["median_nsqd_cpu"]), _bytes(s["median_written_per_msg"]),
            " ".join(_fmt_rate(r["msgs_per_s"]) for r in s["runs"]),
        ))
    print()
    print(f"{settings.size}-byte messages; median of {runs} run(s); MB/s = msgs/s x size / 2^20; "
          "CPU = CPU time / run time (clients: all client processes together)")
    render(headers, rows, {4, 5, 6, 7, 8, 9})
    compared = comparisons(summaries)
    if not compared:
        return
    print()
    print("library (nsq_client) against raw sockets, same nsqd, runs alternating; "
          f"the requirement is library/raw >= {REQUIRED_RATIO:.0%}")
    pairs = [(c["queue"], c["scenario"], _fmt_rate(c["raw_msgs_per_s"]),
             _fmt_rate(c["library_msgs_per_s"]), _pct(c["ratio"]),
             "yes" if c["ratio"] is not None and c["ratio"] >= REQUIRED_RATIO else "NO",
             " ".join(_pct(r) for r in c["run_ratios"]),
             f"{_pct(c['raw_client_cpu'])} / {_pct(c['library_client_cpu'])}")
            for c in compared]
    render(("queue", "scenario", "raw msgs/s", "library msgs/s", "library/raw", ">= 80%",
             "per run pair", "client CPU raw / library"), pairs, {2, 3, 4, 5, 6, 7})


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    # SIGTERM cleans up like Ctrl-C: client processes, nsqd and its data directory.
    signal.signal(signal.SIGTERM, _interrupt)
    parser = build_parser()
    args = parser.parse_args(argv)
    names: list[str] = args.scenarios or list(SCENARIOS)
    if args.profile:
        if args.nsqd_tcp_address:
            parser.error("--profile starts its own nsqd; it cannot be used with --nsqd-tcp-address")
        names = args.scenarios or ["mpub"]
        if len(names) != 1:
            parser.error("--profile runs one scenario: give --scenarios NAME")
    settings = Settings(size=args.size, batch=args.batch, publishers=args.publishers,
                        pub_window=args.pub_window, mpub_window=args.mpub_window, rdy=args.rdy,
                        output_buffer_timeout=args.output_buffer_timeout,
                        count=args.count, timeout=args.timeout)
    ctx = cast(Context, multiprocessing.get_context(args.start_method))  # one of --start-method's
    sizes: list[int | None] = [None] if args.nsqd_tcp_address else list(args.mem_queue_size)
    if args.profile:
        sizes = sizes[:1]

    clients: list[str] = args.client
    stopped: set[str] = set()  # clients that failed a run of the current scenario
    summaries: list[dict[str, Any]] = []
    failed = interrupted = False
    for size in sizes:
        if args.nsqd_tcp_address:
            nsqd = Nsqd.external(args.nsqd_tcp_address, args.nsqd_http_address)
            where = f"nsqd at {nsqd.tcp_address}"
        else:
            nsqd = Nsqd.start(size, profile=args.profile)
            where = f"nsqd started at {nsqd.tcp_address} (mem-queue-size {size})"
            if args.profile:
                where += f", under py-spy -> {args.profile}"
        print(f"bench: {where}; scenarios {', '.join(names)}; {args.runs} run(s) each; "
              f"client {', '.join(clients)}", flush=True)
        try:
            for name in names:
                scenario = SCENARIOS[name]
                # Runs alternate between the clients (raw 1, library 1, raw 2, ...), so that
                # both see the same machine and the same nsqd state as far as possible.
                results: dict[str, list[RunResult]] = {c: [] for c in clients}
                for i in range(args.runs):
                    for client in clients:
                        if client in stopped:
                            continue
                        label = f"{name} ({client})" if len(clients) > 1 else name
                        try:
                            result = run_once(ctx, nsqd, scenario, settings, client)
                        except RunFailed as exc:
                            print(f"  {label} run {i + 1}: FAILED: {exc}", file=sys.stderr,
                                  flush=True)
                            failed = True
                            stopped.add(client)
                            continue
                        results[client].append(result)
                        print(f"  {label} run {i + 1}/{args.runs}: {result.messages:,} msgs in "
                              f"{result.seconds:.3f}s = {_fmt_rate(result.rate)} msgs/s, "
                              f"{result.rate * settings.size / MIB:.2f} MB/s; CPU: clients "
                              f"{_pct(_share(result.client_cpu, result.seconds))}, nsqd "
                              f"{_pct(_share(result.nsqd_cpu, result.seconds))}", flush=True)
                stopped.clear()
                for client in clients:
                    if results[client]:
                        summary = _summary(name, results[client], settings.size)
                        summary["client"] = client
                        summary["queue"] = _queue_label(size)
                        summary["mem_queue_size"] = size
                        summaries.append(summary)
        except KeyboardInterrupt:
            interrupted = True
            print("interrupted", file=sys.stderr)
        finally:
            nsqd.stop()
        if failed and not interrupted and nsqd.daemon is not None:
            tail = nsqd.log()[-3000:]
            if tail:
                print(f"--- nsqd log (tail) ---\n{tail}", file=sys.stderr)
        if interrupted:
            break

    if summaries:
        print_table(summaries, settings, args.runs)
    if args.profile and not args.nsqd_tcp_address:
        if os.path.exists(args.profile):
            print(f"\nprofile written to {args.profile}")
        else:
            print(f"\nprofile {args.profile} was not written", file=sys.stderr)
            failed = True
    if args.json_path:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpus": os.cpu_count()},
            "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
            "settings": asdict(settings),
            "runs": args.runs,
            "mem_queue_sizes": sizes,
            "failed": failed,
            "interrupted": interrupted,
            "clients": clients,
            "results": summaries,
            "library_vs_raw": comparisons(summaries),
        }
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        print(f"results written to {args.json_path}")
    return 1 if failed or interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
