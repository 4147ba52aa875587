"""The ``nsq-cluster`` command: ``nsq-cluster up`` runs a whole NSQ cluster on this machine."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .runner import ETCD_MISSING, Runner, check_ports, etcd_binary
from .topology import DEFAULT_BASE_PORT, DEFAULT_HOST, MAX_NSQD, check_base_port, plan

_DESCRIPTION = """\
Start nsqlookupd, N nsqd registered with it (data under --data-dir) and nsqadmin as child
processes, print where they listen, show their logs prefixed with each service's name, and
stop them all gracefully on Ctrl-C (SIGINT) or SIGTERM: nsqadmin, then the nsqds (which write
every queued and in-flight message to disk), then nsqlookupd. Exits 0 after such a stop, 1 if
a port is taken, a service fails to start or one exits on its own (the others are stopped).
"""

PORT_LAYOUT = """\
  nsqd-1       TCP P          HTTP P+1          (4150, 4151)
    lmstfy                    HTTP P+3627       (7777: lmstfy's job-queue API, in nsqd-1)
    lmstfy admin              HTTP P+3628       (7778: its admin API)
  nsqd-2       TCP P+100      HTTP P+101        (4250, 4251)
  nsqd-N       TCP P+100(N-1) HTTP P+100(N-1)+1
  nsqlookupd   TCP P+10       HTTP P+11         (4160, 4161)
  nsqadmin                    HTTP P+21         (4171)
  etcd         client P+29    peer P+30         (4179, 4180; with --replicas only)
"""

_EPILOG = f"""\
ports, from the base port P (default {DEFAULT_BASE_PORT}, NSQ's own defaults):
{PORT_LAYOUT}Every one of these ports is checked before anything starts; if one is taken, nothing is
started. --base-port 0 lets the kernel choose them all. The banner shows every port.

examples:
  nsq-cluster up --nsqd 3 --data-dir /tmp/nsq --nsqd-arg=--mem-queue-size=0
  nsq-cluster up --replicas 3      an etcd, and 3 nsqd replicating each topic 3 times
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    # a fixed width, so the help reads the same in any terminal
    return argparse.RawDescriptionHelpFormatter(prog, width=96, max_help_position=30)


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def up_parser() -> argparse.ArgumentParser:
    """The parser of ``nsq-cluster up``."""
    return _build()[1]


def _build() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog="nsq-cluster", formatter_class=_formatter,
        description="Run a whole NSQ cluster on this machine.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = commands.add_parser(
        "up", help="start the cluster and run it until Ctrl-C", formatter_class=_formatter,
        description=_DESCRIPTION, epilog=_EPILOG)
    up.add_argument("--nsqd", type=int, default=2, metavar="N",
                    help=f"how many nsqd to run, 1 to {MAX_NSQD} (default: 2)")
    up.add_argument("--replicas", type=int, default=0, metavar="N",
                    help="replicate topics: start an etcd (Debian's etcd-server) and at least N "
                         "nsqd with --etcd-endpoints and --default-replicas=N "
                         "(default: no replication)")
    up.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT, metavar="P",
                    help=f"first port of the layout below; 0 = any free ports "
                         f"(default: {DEFAULT_BASE_PORT})")
    up.add_argument("--host", default=DEFAULT_HOST,
                    help=f"address every service listens on (default: {DEFAULT_HOST})")
    up.add_argument("--broadcast-address", metavar="ADDR",
                    help="address nsqlookupd and the nsqds announce (registered with "
                         "nsqlookupd, given to consumers); --host unless that is 0.0.0.0, "
                         "then 127.0.0.1")
    up.add_argument("--data-dir", type=Path, default=Path("data"), metavar="DIR",
                    help="nsqd-1, nsqd-2, ... keep their data in DIR/nsqd-1, ... (default: ./data)")
    up.add_argument("--nsqd-arg", action="append", default=[], metavar="FLAG",
                    help="extra flag for every nsqd, e.g. --nsqd-arg=--mem-queue-size=0 "
                         "(repeatable)")
    up.add_argument("--lookupd-arg", action="append", default=[], metavar="FLAG",
                    help="extra flag for nsqlookupd (repeatable)")
    up.add_argument("--nsqadmin-arg", action="append", default=[], metavar="FLAG",
                    help="extra flag for nsqadmin (repeatable)")
    up.add_argument("--start-timeout", type=float, default=30.0, metavar="S",
                    help="seconds each service has to start listening (default: 30)")
    up.add_argument("--stop-timeout", type=float, default=30.0, metavar="S",
                    help="seconds each service has to stop after SIGTERM before it is killed "
                         "(default: 30)")
    return parser, up


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.replicas < 0:
        parser.error("--replicas must be at least 1")
    nsqd_count = max(args.nsqd, args.replicas)
    try:
        check_base_port(args.base_port, nsqd_count)
    except ValueError as exc:
        parser.error(str(exc))
    if args.replicas and etcd_binary() is None:
        sys.stderr.write(f"nsq-cluster: {ETCD_MISSING}\n")
        raise SystemExit(1)
    topology = plan(nsqd_count=nsqd_count, base_port=args.base_port, host=args.host,
                    data_dir=args.data_dir, broadcast_address=args.broadcast_address,
                    nsqd_args=tuple(args.nsqd_arg), lookupd_args=tuple(args.lookupd_arg),
                    admin_args=tuple(args.nsqadmin_arg), replicas=args.replicas)
    problems = check_ports(topology)
    if problems:
        sys.stderr.write("nsq-cluster: cannot start, nothing was started:\n")
        for problem in problems:
            sys.stderr.write(f"  {problem}\n")
        sys.stderr.write("Stop what uses these ports (perhaps another cluster), or choose other "
                         "ports with --base-port P (0 for any free ports).\n")
        raise SystemExit(1)
    runner = Runner(topology, start_timeout=args.start_timeout, stop_timeout=args.stop_timeout)
    raise SystemExit(runner.run())


if __name__ == "__main__":
    main()
