"""Run a Topology as child processes: start in order, tail the logs, stop in reverse order.

One thread does everything: a selector reads every child's output (stdout and stderr merged),
prints each line prefixed with the service's name, and spots the ``TCP: listening on H:P`` /
``HTTP: listening on H:P`` lines (and nsqd-1's ``LMSTFY``/``LMSTFY_ADMIN`` ones) the daemons
print once they listen. Signal handlers only count
signals; the loop notices them within a tenth of a second.

The children run in their own process group, so a Ctrl-C in the terminal reaches this process
alone and the services stop in order: nsqadmin, then the nsqds (which write every queued and
in-flight message to disk), then nsqlookupd. On Linux each child also gets SIGTERM if this
process dies without stopping it (``PR_SET_PDEATHSIG``), so no daemon outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from nsq_common import join_host_port

from .topology import (
    ETCD_CLIENT,
    LMSTFY,
    LMSTFY_ADMIN,
    Service,
    Topology,
    local_address,
    with_lookupd,
)

_LISTEN = re.compile(rb"\b(TCP|HTTP|LMSTFY|LMSTFY_ADMIN): listening on (\S+)")
_SELF = "nsq-cluster"
_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

try:
    _LIBC: Any = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:  # pragma: no cover - no C library to load
    _LIBC = None


class Failure(Exception):
    """The cluster cannot start or keep running; the text says why, for the user."""


class _StopRequested(Exception):
    """A signal asked the cluster to stop."""


ETCD_MISSING = "--replicas needs etcd, which is not installed (Debian: apt-get install etcd-server)"


def etcd_binary() -> str | None:
    """The etcd server's path (on PATH, or Debian's), if installed."""
    return shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


def etcd_replicas(topology: Topology) -> int:
    """The nsqds' ``--default-replicas`` (1 when not given)."""
    for arg in topology.nsqds[0].args:
        if arg.startswith("--default-replicas="):
            return int(arg.partition("=")[2])
    return 1


def find_executable(program: str) -> str:
    """``program`` next to this Python (the same virtualenv), else on PATH (etcd: also
    Debian's).

    Raises:
        Failure: it is nowhere.
    """
    if program == "etcd":
        found = etcd_binary()
        if found is None:
            raise Failure(ETCD_MISSING)
        return found
    candidate = Path(sys.executable).with_name(program)
    if candidate.exists():
        return str(candidate)
    found = shutil.which(program)
    if found is None:
        raise Failure(f"cannot find the {program} executable next to {sys.executable} or on PATH; "
                      "install the nsqd, nsqlookupd and nsqadmin packages")
    return found


def port_problem(host: str, port: int) -> OSError | None:
    """Why ``host:port`` cannot be listened on now, or None when it can.

    Binds as the daemons do (SO_REUSEADDR), so a port held only by closed connections in
    TIME_WAIT counts as free, and one that anything listens on, on this address or on all
    addresses, counts as taken.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(1)
        except OSError as exc:
            return exc
    return None


def check_ports(topology: Topology) -> list[str]:
    """One message for each port of ``topology`` that cannot be listened on (none: all free)."""
    problems = []
    for service in topology.services:
        for port in service.ports:
            if not port.number:
                continue
            exc = port_problem(topology.host, port.number)
            if exc is None:
                continue
            where = f"{service.name} {port.label}"
            if exc.errno == errno.EADDRINUSE:
                problems.append(f"port {port.number} on {topology.host} ({where}) is already in use")
            else:
                problems.append(f"cannot listen on {join_host_port(topology.host, port.number)} ({where}): "
                                f"{exc.strerror or exc}")
    return problems


def _child_setup(parent_pid: int) -> None:  # pragma: no cover - runs in the child, before exec
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl
            os.kill(os.getpid(), signal.SIGTERM)


class Child:
    """One running service."""

    def __init__(self, service: Service, process: subprocess.Popen[bytes]) -> None:
        self.service = service
        self.process = process
        self.reported: dict[str, str] = {}  # "TCP", "HTTP", ... -> where it said it listens
        self.partial = b""
        self.output_open = True
        self.stopping = False

    @property
    def name(self) -> str:
        return self.service.name

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def listening(self) -> bool:
        return {p.kind for p in self.service.ports} <= self.reported.keys()

    def port(self, kind: str) -> int:
        return int(self.reported[kind].rsplit(":", 1)[1])


class Runner:
    """Starts a Topology, tails it until a signal or a death, then stops it."""

    def __init__(self, topology: Topology, *, out: TextIO | None = None,
                 start_timeout: float = 30.0, stop_timeout: float = 30.0) -> None:
        self.topology = topology
        self.out = out if out is not None else sys.stdout
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.children: list[Child] = []
        self.signals: list[int] = []
        self._signals_at_stop = 0
        self.local = local_address(topology.host)
        self.width = max(len(_SELF), *(len(s.name) for s in topology.services))
        self._selector = selectors.DefaultSelector()
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- output ---------------------------------------------------------------------------

    def write(self, prefix: str, text: str) -> None:
        self.out.write(f"{prefix:<{self.width}} | {text}\n")
        self.out.flush()

    def say(self, text: str) -> None:
        self.write(_SELF, text)

    def _line(self, child: Child, raw: bytes) -> None:
        match = _LISTEN.search(raw)
        if match:
            child.reported.setdefault(match.group(1).decode(), match.group(2).decode())
        self.write(child.name, raw.decode("utf-8", "replace").rstrip("\r"))

    def pump(self, timeout: float) -> None:
        """Print whatever the children wrote, waiting at most ``timeout`` seconds for it."""
        if not self._selector.get_map():
            time.sleep(timeout)
            return
        for key, _ in self._selector.select(timeout):
            child: Child = key.data
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                self._selector.unregister(key.fileobj)
                child.output_open = False
                if child.partial:
                    self._line(child, child.partial)
                    child.partial = b""
                continue
            lines = (child.partial + data).split(b"\n")
            child.partial = lines.pop()
            for line in lines:
                self._line(child, line)

    # -- signals --------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)

    @contextlib.contextmanager
    def _signals_caught(self) -> Any:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- starting -------------------------------------------------------------------------

    def _start(self, service: Service) -> Child:
        argv = [find_executable(service.program), *service.args]
        if service.data_path is not None:
            service.data_path.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=env, process_group=0,
            preexec_fn=functools.partial(_child_setup, os.getpid()) if _LIBC is not None else None)
        assert process.stdout is not None
        os.set_blocking(process.stdout.fileno(), False)
        child = Child(service, process)
        self.children.append(child)
        self._selector.register(process.stdout, selectors.EVENT_READ, child)
        return child

    def _check(self, children: Iterable[Child]) -> None:
        if self.signals:
            raise _StopRequested
        for child in children:
            if not child.running():
                self._drain([child], 2.0)
                raise Failure(f"{child.name} exited with status {child.process.returncode}"
                              f"{_signal_note(child.process.returncode)}; see its lines above")

    def _wait_until(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            self._check(self.children)
            if time.monotonic() > deadline:
                raise Failure(f"{what} within {self.start_timeout:g} s; see the lines above")
            self.pump(0.1)

    def _ping(self, child: Child) -> bool:
        url = f"http://{join_host_port(self.local, child.port('HTTP'))}/ping"
        try:
            with self._opener.open(url, timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _start_stage(self, services: Sequence[Service]) -> list[Child]:
        children = [self._start(service) for service in services]
        names = ", ".join(c.name for c in children)
        self._wait_until(lambda: all(c.listening() for c in children),
                         f"{names} did not report listening")
        self._wait_until(lambda: all(self._ping(c) for c in children),
                         f"{names} did not answer GET /ping")
        return children

    def _healthy(self, child: Child) -> bool:
        """etcd's readiness: ``GET /health`` says so."""
        url = f"http://{join_host_port(self.local, child.service.port(ETCD_CLIENT))}/health"
        try:
            with self._opener.open(url, timeout=1) as response:
                return bool(json.load(response).get("health") == "true")
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _start_etcd(self, service: Service) -> None:
        child = self._start(service)
        self._wait_until(lambda: self._healthy(child), "etcd did not become healthy")
        for port in service.ports:  # it prints no "listening on" line: its ports are set
            child.reported[port.kind] = join_host_port(self.local, port.number)

    def _start_all(self) -> None:
        (lookupd,) = self._start_stage([self.topology.lookupd])
        if self.topology.etcd is not None:
            self._start_etcd(self.topology.etcd)
        tcp = join_host_port(self.local, lookupd.port("TCP"))
        http = join_host_port(self.local, lookupd.port("HTTP"))
        self._start_stage([with_lookupd(s, tcp, http) for s in self.topology.nsqds])
        self._start_stage([with_lookupd(self.topology.admin, tcp, http)])

    # -- running --------------------------------------------------------------------------

    def banner(self) -> list[str]:
        """The lines that tell where everything is."""
        etcd = self.topology.etcd
        lines = [f"NSQ cluster up: 1 nsqlookupd, {len(self.topology.nsqds)} nsqd, 1 nsqadmin"
                 f"{', 1 etcd' if etcd is not None else ''} (Ctrl-C stops them all)"]
        daemons = [c for c in self.children if c.service is not etcd]
        order = [daemons[-1], daemons[0], *daemons[1:-1]]
        for child in order:
            http = f"http://{join_host_port(self.local, child.port('HTTP'))}/"
            parts = [f"  {child.name:<{self.width}}", f"HTTP {http:<24}"]
            tcp = f"TCP {join_host_port(self.local, child.port('TCP'))}" if "TCP" in child.reported else ""
            parts.append(f"{tcp:<20}")
            parts.append(f"pid {child.pid:<8}")
            if child.service.data_path is not None:
                parts.append(f"data {child.service.data_path}")
            lines.append(" ".join(parts).rstrip())
        for child in self.children:
            if LMSTFY in child.reported:
                jobs = f"http://{join_host_port(self.local, child.port(LMSTFY))}/"
                admin = f"http://{join_host_port(self.local, child.port(LMSTFY_ADMIN))}/"
                lines.append(f"  {'lmstfy':<{self.width}} HTTP {jobs:<24} admin {admin:<24} "
                             f"(lmstfy's job API, in {child.name})")
        for child in self.children:
            if child.service is etcd:
                client = f"http://{join_host_port(self.local, child.port(ETCD_CLIENT))}"
                lines.append(f"  {child.name:<{self.width}} {client:<29} "
                             f"pid {child.pid:<8} data {child.service.data_path} (topics "
                             f"replicated on {etcd_replicas(self.topology)} nsqd by default)")
        nsqd_http = join_host_port(self.local, daemons[1].port("HTTP"))
        lines.append(f"Dashboard: http://{join_host_port(self.local, self.children[-1].port('HTTP'))}/")
        lines.append(f"Try:       curl -d hello 'http://{nsqd_http}/pub?topic=test'")
        return lines

    def _wait_for_end(self) -> None:
        while True:
            self._check(self.children)
            self.pump(0.25)

    # -- stopping -------------------------------------------------------------------------

    def _drain(self, children: Sequence[Child], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(c.output_open for c in children) and time.monotonic() < deadline:
            self.pump(0.05)

    def _stop_group(self, children: Sequence[Child]) -> bool:
        """SIGTERM to each, wait for all (SIGKILL after the stop timeout or a second signal).

        Returns:
            whether every one of them exited with status 0.
        """
        for child in children:
            if child.running():
                child.stopping = True
                self.say(f"stopping {child.name} (pid {child.pid})")
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while any(c.running() for c in children):
            forced = len(self.signals) > self._signals_at_stop
            if forced or time.monotonic() > deadline:
                for child in children:
                    if child.running():
                        why = "a second signal" if forced else f"{self.stop_timeout:g} s"
                        self.say(f"killing {child.name} (pid {child.pid}) after {why}")
                        child.process.kill()
                for child in children:
                    child.process.wait()
                break
            self.pump(0.05)
        self._drain(children, 2.0)
        clean = True
        for child in children:
            code = child.process.returncode
            # etcd ends a clean stop by raising the signal again on itself
            clean_codes = (0, -signal.SIGTERM) if child.service.program == "etcd" else (0,)
            if child.stopping and code not in clean_codes:
                self.say(f"{child.name} exited with status {code}{_signal_note(code)}")
                clean = False
        return clean

    def _stop_all(self) -> bool:
        if not self.children:
            return True
        self._signals_at_stop = len(self.signals)  # one more from here on: kill, do not wait
        lookupd = [c for c in self.children if c.service is self.topology.lookupd]
        admin = [c for c in self.children if c.service.program == "nsqadmin"]
        # etcd last: the nsqds give their leases back on the way out
        etcd = [c for c in self.children if c.service is self.topology.etcd]
        nsqds = [c for c in self.children if c not in lookupd + admin + etcd]
        clean = True
        for group in (admin, nsqds, lookupd, etcd):
            if group:
                clean = self._stop_group(group) and clean
        self._selector.close()
        for child in self.children:
            if child.process.stdout is not None:
                child.process.stdout.close()
        return clean

    # -- the whole life -------------------------------------------------------------------

    def run(self) -> int:
        """Start, tail until a signal (exit 0) or a failure (exit 1), stop everything."""
        problem = None
        with self._signals_caught():
            try:
                self._start_all()
                self.out.write("\n" + "\n".join(self.banner()) + "\n\n")
                self.out.flush()
                self._wait_for_end()
            except _StopRequested:
                name = signal.Signals(self.signals[0]).name
                self.say(f"{name} received, stopping nsqadmin, the nsqds, then nsqlookupd")
            except Failure as exc:
                problem = str(exc)
                self.say(f"{problem}; stopping the others")
            finally:
                clean = self._stop_all()
        if problem is not None:
            return 1
        data_dirs = {str(s.data_path.parent) for s in self.topology.nsqds if s.data_path}
        self.say(f"stopped{'' if clean else ' (not cleanly, see above)'}; "
                 f"nsqd data kept in {', '.join(sorted(data_dirs))}")
        return 0 if clean else 1


def _signal_note(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f" (killed by {signal.Signals(-code).name})"
    return ""
