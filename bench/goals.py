"""``python -m bench.goals``: the paths of the CPU-per-request goals, ours beside Go's, one table.

    python -m bench.goals [--runs 3] [--duration 5] [--connections 8] [--tool auto|wrk|builtin]
                          [--runfor 5] [--mem-queue-size 100000000] [--lmstfy-count 20000]
                          [--go DIR [--go-clients DIR]]
                          [--lmstfy-url URL (--lmstfy-admin-url URL | --lmstfy-token T)
                           [--lmstfy-pid PID,...]] [--json FILE]

Each path is measured by the module that measures it in detail, with that module's own
driver and daemons (127.0.0.1, kernel-chosen ports, temporary data directories, stopped by
pid and removed at the end):

* ``http /pub``, ``http /lookup`` (``bench.http``): nsqd ``POST /pub`` with a 100-byte body
  and nsqlookupd ``GET /lookup`` of a topic with one producer, ``wrk -t1 -c8`` for
  ``--duration`` seconds (the built-in client where wrk is not installed, or with
  ``--tool builtin``: slower, and its figures not comparable with wrk's);
* ``tcp publish``, ``tcp consume`` (``bench.writer_reader``): two connections each a
  stop-and-wait MPUB of 200 x 100 B for ``--runfor`` seconds into a fresh nsqd whose
  ``--mem-queue-size`` holds the whole run, then one reader (RDY 2,500, one FIN per message)
  on that backlog for half the time; NSQ's own ``bench_writer`` and ``bench_reader`` as the
  clients with ``--go-clients DIR``;
* ``lmstfy publish``, ``lmstfy consume+ack`` (``bench.lmstfy``): ``--lmstfy-count`` 100-byte
  jobs, one ``PUT`` each, then ``GET ?count=100`` and a ``DELETE`` per job until the queue
  is empty, on one keep-alive connection.

``--go DIR`` gives Go's ``nsqd`` and ``nsqlookupd`` (built from nsqio/nsq): every NSQ path
then runs on ours, then on Go's, in each of the ``--runs`` runs, so that both meet the same
load on the machine. There is no lmstfy in Go's NSQ: the lmstfy paths run beside the lmstfy
at ``--lmstfy-url`` when given (as ``bench.lmstfy --url`` does), else on ours alone.

Prints, per path, the median of the runs of each figure: requests (messages, jobs) per
second, and the daemon's CPU time per request in µs (user + system from ``/proc/<pid>/stat``
over the measured window); the same for Go's (or the real lmstfy), and the ratios ours /
theirs of the CPU per request and of the rate. Then which form of our daemons ran: compiled
(extension modules) or plain Python, from the files the daemons' modules import from and the
extension modules mapped into our nsqd's process. See ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import multiprocessing
import os
import pkgutil
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import http, lmstfy, writer_reader
from .report import cell, daemons_dir, positive, render
from .scenarios import Context, RunFailed

# The packages whose code our nsqd and nsqlookupd run.
DAEMON_PACKAGES = ("nsq_common", "nsq_serving", "nsqd", "nsqlookupd")


@dataclass(frozen=True)
class GoalPath:
    key: str
    title: str
    unit: str  # of the rate
    against: str  # whose figures stand beside ours: "go" or "lmstfy"


PATHS = (
    GoalPath("http-pub", "nsqd HTTP POST /pub", "req/s", "go"),
    GoalPath("http-lookup", "nsqlookupd HTTP GET /lookup", "req/s", "go"),
    GoalPath("tcp-publish", "nsqd TCP MPUB into memory", "msg/s", "go"),
    GoalPath("tcp-consume", "nsqd TCP consume from memory", "msg/s", "go"),
    GoalPath("lmstfy-publish", "lmstfy publish", "jobs/s", "lmstfy"),
    GoalPath("lmstfy-consume", "lmstfy consume+ack", "jobs/s", "lmstfy"),
)


@dataclass
class Figure:
    """One run of one path on one side."""

    rate: float  # requests, messages or jobs a second
    cpu_us: float | None  # the daemon's CPU time per request, message or job


@dataclass
class Side:
    runs: list[Figure] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def rate(self) -> float | None:
        return statistics.median(f.rate for f in self.runs) if self.runs else None

    def cpu_us(self) -> float | None:
        cpus = [f.cpu_us for f in self.runs if f.cpu_us is not None]
        return statistics.median(cpus) if cpus else None


# -- which form ran --------------------------------------------------------------------------

def _is_extension(origin: str | None) -> bool:
    return origin is not None and origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def module_forms(packages: tuple[str, ...] = DAEMON_PACKAGES) -> dict[str, str]:
    """Every module of ``packages`` (subpackages too), by the file it is imported from here:
    ``compiled`` for an extension module, ``plain`` for Python source or bytecode. The
    daemons are this environment's, so they import the same files."""
    forms: dict[str, str] = {}
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None:
            continue
        forms[package] = "compiled" if _is_extension(spec.origin) else "plain"
        for info in pkgutil.walk_packages(spec.submodule_search_locations, prefix=package + "."):
            if info.name.rpartition(".")[2] == "__main__":
                continue
            sub = importlib.util.find_spec(info.name)
            if sub is not None:
                forms[info.name] = "compiled" if _is_extension(sub.origin) else "plain"
    return forms


def mapped_extensions(pid: int, packages: tuple[str, ...] = DAEMON_PACKAGES) -> list[str] | None:
    """The extension modules of ``packages`` that process ``pid`` has mapped
    (``/proc/<pid>/maps``: what it really loaded): files in the packages' directories, and
    the libraries mypyc puts beside them (``*__mypyc*``); None where that cannot be read."""
    inside, beside = set(), set()
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                inside.add(os.path.join(location, ""))
                beside.add(os.path.join(os.path.dirname(location), ""))
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    found = set()
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not _is_extension(parts[5]):
            continue
        name = parts[5]
        if name.startswith(tuple(inside)) or (
                os.path.join(os.path.dirname(name), "") in beside
                and "__mypyc" in os.path.basename(name)):
            found.add(name)
    return sorted(found)


def form_line(forms: dict[str, str], mapped: list[str] | None) -> str:
    compiled = sorted(name for name, form in forms.items() if form == "compiled")
    packages = ", ".join(name for name in forms if "." not in name)
    if compiled:
        text = (f"form: compiled: {len(compiled)} of the {len(forms)} modules of {packages} "
                f"are extension modules ({', '.join(compiled)})")
    else:
        text = (f"form: plain Python: all {len(forms)} modules of {packages} import from "
                "Python source, none from an extension module")
    if mapped is None:
        return text + "; our nsqd's /proc/<pid>/maps could not be read"
    return text + f"; extension modules of theirs loaded in our nsqd's process: {len(mapped)}"


# -- the paths -------------------------------------------------------------------------------

def _failed(side: Side, what: str, exc: BaseException) -> None:
    text = f"{what}: {exc!r}"
    side.failures.append(text)
    print(f"  {text}", file=sys.stderr, flush=True)
    if not isinstance(exc, (RuntimeError, RunFailed, OSError)):
        traceback.print_exc()


class Session:
    """The daemons of the whole session and every figure taken."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.sides: dict[tuple[str, str], Side] = {
            (p.key, side): Side() for p in PATHS for side in ("ours", "theirs")}
        self.http_sets: list[http.Daemons] = []
        self.lmstfy_targets: list[lmstfy.Target] = []
        self.work_dir = tempfile.mkdtemp(prefix="nsq-bench-goals-")
        self.ctx: Context = multiprocessing.get_context("spawn")
        self.session = f"{os.getpid():x}{int(time.time()) % 100_000:x}"
        self.loads: list[float] = [os.getloadavg()[0]]
        self.our_nsqd_pid: int | None = None

    def start(self) -> None:
        args = self.args
        self.http_sets.append(http.Daemons())
        if args.go:
            self.http_sets.append(http.Daemons("go", args.go))
        nsqd = self.http_sets[0].nsqd
        self.our_nsqd_pid = nsqd.pid if nsqd is not None else None
        self.lmstfy_targets.append(lmstfy.start_ours(""))
        if args.lmstfy_url:
            self.lmstfy_targets.append(lmstfy.external(
                args.lmstfy_url, args.lmstfy_admin_url, args.lmstfy_token, args.lmstfy_pid))

    def stop(self) -> None:
        try:
            for daemons in self.http_sets:
                daemons.stop()
            for target in self.lmstfy_targets:
                if target.nsqd is not None:
                    target.nsqd.stop()
        finally:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _note(self, key: str, side: str, figure: Figure) -> None:
        self.sides[(key, side)].runs.append(figure)
        cpu = "-" if figure.cpu_us is None else f"{figure.cpu_us:.2f}"
        print(f"  {key} ({side}): {figure.rate:,.0f}/s, {cpu} µs CPU each", flush=True)

    def _sides(self, items: list[Any]) -> list[tuple[str, Any]]:
        return list(zip(("ours", "theirs"), items, strict=False))

    def http_paths(self) -> None:
        args = self.args
        for key, route in (("http-pub", "pub"), ("http-lookup", "lookup")):
            for side, daemons in self._sides(self.http_sets):
                try:
                    result = http.drive(daemons, route, args.connections, args.tool,
                                        args.duration, self.work_dir)
                except Exception as exc:
                    _failed(self.sides[(key, side)], f"{key} ({side})", exc)
                    continue
                if result.errors:
                    self.sides[(key, side)].failures.append(f"{result.errors} error answers")
                self._note(key, side, Figure(result.requests_per_s,
                                             result.daemon_cpu_us_per_request))

    def tcp_paths(self) -> None:
        args = self.args
        argv = ["--runfor", str(args.runfor), "--pause", str(args.pause)]
        if args.go_clients:
            argv += ["--go-clients", args.go_clients]
        settings = writer_reader.parse_args(argv)
        binaries: list[str | None] = [None]
        if args.go:
            binaries.append(os.path.join(args.go, "nsqd"))
        for side, binary in self._sides(binaries):
            try:
                run = writer_reader.one_run(self.ctx, settings, args.mem_queue_size, None,
                                            nsqd_label=side, binary=binary)
            except Exception as exc:
                for key in ("tcp-publish", "tcp-consume"):
                    _failed(self.sides[(key, side)], f"{key} ({side})", exc)
                continue
            for key, phase in (("tcp-publish", "write"), ("tcp-consume", "read")):
                figures = run[phase]
                if figures.get("drained"):
                    self.sides[(key, side)].failures.append("the reader drained the backlog")
                self._note(key, side, Figure(figures["msgs_per_s"], figures["nsqd_us_per_msg"]))

    def lmstfy_paths(self, run: int) -> None:
        args = self.args
        for i, (side, target) in enumerate(self._sides(self.lmstfy_targets)):
            queue = f"g{self.session}t{i}r{run}"
            try:
                result = lmstfy.run_once(target, args.lmstfy_count, 1, queue,
                                         ("publish", "consume+ack"))
            except Exception as exc:
                for key in ("lmstfy-publish", "lmstfy-consume"):
                    _failed(self.sides[(key, side)], f"{key} ({side})", exc)
                continue
            for key, phase in (("lmstfy-publish", "publish"), ("lmstfy-consume", "consume+ack")):
                self.sides[(key, side)].failures.extend(result["problems"])
                self._note(key, side, Figure(result[phase]["jobs_per_s"],
                                             result[phase]["cpu_us_per_job"]))

    def run(self) -> None:
        for i in range(self.args.runs):
            print(f"run {i + 1}/{self.args.runs}", flush=True)
            self.http_paths()
            self.tcp_paths()
            self.lmstfy_paths(i)
            self.loads.append(os.getloadavg()[0])


# -- the table -------------------------------------------------------------------------------

def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return None if ours is None or not theirs else ours / theirs


def summary(session: Session) -> list[dict[str, Any]]:
    rows = []
    for path in PATHS:
        ours, theirs = session.sides[(path.key, "ours")], session.sides[(path.key, "theirs")]
        against = None
        if path.against == "go" and session.args.go:
            against = "Go"
        elif path.against == "lmstfy" and session.args.lmstfy_url:
            against = "lmstfy"
        rows.append({
            "path": path.key, "title": path.title, "unit": path.unit, "against": against,
            "ours_rate": ours.rate(), "ours_cpu_us": ours.cpu_us(),
            "theirs_rate": theirs.rate(), "theirs_cpu_us": theirs.cpu_us(),
            "cpu_ratio": _ratio(ours.cpu_us(), theirs.cpu_us()),
            "rate_ratio": _ratio(ours.rate(), theirs.rate()),
            "ours_runs": [asdict(f) for f in ours.runs],
            "theirs_runs": [asdict(f) for f in theirs.runs],
            "failures": ours.failures + theirs.failures,
        })
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    headers = ("path", "unit", "ours rate", "ours µs", "against", "their rate", "their µs",
               "µs ours/theirs", "rate ours/theirs")
    cells = [(r["title"], r["unit"], cell(r["ours_rate"], ",.0f"), cell(r["ours_cpu_us"], ".2f"),
              r["against"] or "-", cell(r["theirs_rate"], ",.0f"),
              cell(r["theirs_cpu_us"], ".2f"), cell(r["cpu_ratio"], ".2f"),
              cell(r["rate_ratio"], ".2f")) for r in rows]
    render(headers, cells, set(range(len(headers))) - {0, 1, 4})


# -- command line ----------------------------------------------------------------------------

def _clients_dir(text: str) -> str:
    if not all(Path(text, name).is_file() for name in ("bench_writer", "bench_reader")):
        raise argparse.ArgumentTypeError(f"no bench_writer and bench_reader in {text}")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.goals", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=positive(int), default=3,
                   help="runs of every path, ours and theirs alternated (default 3); medians")
    p.add_argument("--duration", type=positive(float), default=5.0,
                   help="seconds per HTTP path and side (default 5; wrk: whole seconds)")
    p.add_argument("--connections", type=positive(int), default=8,
                   help="HTTP keep-alive connections (default 8)")
    p.add_argument("--tool", choices=["auto", "wrk", "builtin"], default="auto",
                   help="HTTP load generator: wrk, the built-in client, or wrk if installed "
                        "(default)")
    p.add_argument("--runfor", type=positive(float), default=5.0,
                   help="TCP writer seconds; the reader runs half as long (default 5)")
    p.add_argument("--pause", type=float, default=1.0,
                   help="seconds between the TCP writer and reader (default 1)")
    p.add_argument("--mem-queue-size", type=positive(int), default=100_000_000,
                   help="the TCP paths' nsqd --mem-queue-size (default 100000000: memory)")
    p.add_argument("--lmstfy-count", type=positive(int), default=20_000,
                   help="jobs per lmstfy run (default 20000)")
    p.add_argument("--go", type=daemons_dir, default=None, metavar="DIR",
                   help="Go's nsqd and nsqlookupd in DIR, alternated with ours")
    p.add_argument("--go-clients", type=_clients_dir, default=None, metavar="DIR",
                   help="NSQ's bench_writer and bench_reader from DIR as the TCP paths' clients "
                        "(for both nsqds)")
    p.add_argument("--lmstfy-url", default=None, metavar="URL",
                   help="a real lmstfy's data API (loopback), beside ours")
    p.add_argument("--lmstfy-admin-url", default=None, metavar="URL",
                   help="its admin API, http://user:password@host:port (for a token)")
    p.add_argument("--lmstfy-token", default=None, help="a token of namespace 'ns' on it")
    p.add_argument("--lmstfy-pid", default="", metavar="PID,...",
                   help="comma-separated pids whose CPU time counts for it (lmstfy, Redis)")
    p.add_argument("--json", dest="json_path", metavar="FILE", default=None,
                   help="also write the results to FILE as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.lmstfy_url and not (args.lmstfy_admin_url or args.lmstfy_token):
        parser.error("--lmstfy-url needs --lmstfy-admin-url or --lmstfy-token")
    if args.tool == "auto":
        args.tool = "wrk" if shutil.which("wrk") else "builtin"
    elif args.tool == "wrk" and not shutil.which("wrk"):
        parser.error("wrk is not installed (apt-get install wrk), use --tool builtin")
    session = Session(args)
    interrupted = False
    mapped: list[str] | None = None
    try:
        session.start()
        if session.our_nsqd_pid is not None:
            mapped = mapped_extensions(session.our_nsqd_pid)
        print(f"bench.goals: {args.runs} run(s); HTTP {args.tool} -c{args.connections} "
              f"{args.duration:g} s; TCP MPUB 200 x 100 B for {args.runfor:g} s, "
              f"--mem-queue-size {args.mem_queue_size}; lmstfy {args.lmstfy_count:,} jobs; "
              f"against {'Go: ' + args.go if args.go else 'nothing (no --go)'}", flush=True)
        session.run()
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted", file=sys.stderr)
    finally:
        session.stop()
    rows = summary(session)
    forms = module_forms()
    form = form_line(forms, mapped)
    loads = f"{min(session.loads):.2f}-{max(session.loads):.2f}"
    print()
    print(f"median of {args.runs} run(s); µs = the daemon's CPU time per request, message or "
          f"job; theirs: Go's nsqd/nsqlookupd (--go) or the real lmstfy (--lmstfy-url); "
          f"load average (1 min) {loads}")
    print_table(rows)
    print(form)
    failures = [f"{r['path']}: {f}" for r in rows for f in r["failures"]]
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    if args.json_path:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpus": os.cpu_count(), "load": session.loads},
            "command": "python -m bench.goals " + " ".join(
                sys.argv[1:] if argv is None else argv),
            "settings": vars(args),
            "form": {"line": form,
                     "compiled": sorted(n for n, f in forms.items() if f == "compiled"),
                     "modules": len(forms), "nsqd_mapped_extensions": mapped},
            "interrupted": interrupted,
            "results": rows,
        }
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        print(f"results written to {args.json_path}")
    return 1 if failures or interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
