"""Start one of our daemons as a real child process and learn the ports it bound.

Every daemon prints ``TCP: listening on HOST:PORT`` / ``HTTP: listening on HOST:PORT`` on stderr
once its listeners are open, with the real port when asked for port 0, as the Go binaries do.
``start_daemon`` waits for those lines, keeps reading stderr into a list (so the pipe never
fills), and ``Daemon.stop`` ends the process it started, by its pid, and nothing else, and closes
the pipe (a ``Daemon`` is also a context manager that stops it on the way out).

A listener opens before its daemon serves (the early start answers ``/ping`` with ``500 NOK -
starting`` until the real server takes over), so ``start_daemon`` then waits, as a readiness
probe does, until ``/ping`` on the HTTP address answers anything else.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .wait import DEADLINE

if TYPE_CHECKING:
    from .forkserver import ForkedProcess, ForkServer

_LISTEN = re.compile(r"(TCP|HTTP|HTTPS|LMSTFY|LMSTFY_ADMIN): listening on (\S+)")


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.define(eq=False)  # hashable by identity: kept in a WeakSet
class Daemon:
    name: str
    process: subprocess.Popen[bytes] | ForkedProcess
    addresses: dict[str, str]
    log: list[str]
    _reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def tcp_address(self) -> str:
        return self.addresses["TCP"]

    @property
    def http_address(self) -> str:
        return self.addresses["HTTP"]

    @property
    def tcp_port(self) -> int:
        return int(self.tcp_address.rsplit(":", 1)[1])

    @property
    def http_port(self) -> int:
        return int(self.http_address.rsplit(":", 1)[1])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Signal the process and wait for it; SIGKILL if it does not exit in time."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self._reader is not None:
            self._reader.join(5)
        if self.process.stderr is not None:
            self.process.stderr.close()
        code = self.process.poll()
        assert code is not None  # (waited for above)
        return code

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def output(self) -> str:
        return "".join(self.log)


#: every Daemon started and not yet reaped, so the plugin can stop what a failing test left
_started: weakref.WeakSet[Daemon] = weakref.WeakSet()


def running_daemons() -> set[Daemon]:
    """The daemons started by ``start_daemon`` whose processes have not been reaped."""
    return {d for d in list(_started) if d.process.returncode is None}


def _executable(name: str) -> str:
    if os.sep in name:  # a path: that program
        return name
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def start_daemon(name: str, args: Sequence[str], *, cwd: str | os.PathLike[str] | None = None,
                 expect: Sequence[str] = ("TCP", "HTTP"), timeout: float = DEADLINE,
                 env: dict[str, str] | None = None, forks: ForkServer | None = None) -> Daemon:
    """Run ``name`` (an executable next to this Python) with ``args``; wait for its listeners.
    With ``forks`` (a ``ForkServer`` of ``name``'s package), forked from that server instead
    (``env`` is then the server's).

    Raises:
        RuntimeError: the process exited, or did not report every address in ``expect`` in time.
    """
    process: subprocess.Popen[bytes] | ForkedProcess
    if forks is not None:
        process = forks.start(list(args), cwd=None if cwd is None else os.fspath(cwd))
    else:
        process = subprocess.Popen(
            [_executable(name), *args], cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
        )
    log: list[str] = []
    addresses: dict[str, str] = {}
    ready = threading.Event()
    wanted = set(expect)

    def pump() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode("utf-8", "replace")
            log.append(line)
            match = _LISTEN.search(line)
            if match and match.group(1) not in addresses:
                addresses[match.group(1)] = match.group(2)
                if wanted <= addresses.keys():
                    ready.set()
        ready.set()

    reader = threading.Thread(target=pump, name=f"{name}-stderr", daemon=True)
    reader.start()
    daemon = Daemon(name, process, addresses, log, reader)
    _started.add(daemon)
    deadline = time.monotonic() + timeout
    try:
        while not ready.wait(0.05):
            if time.monotonic() > deadline:
                break
    except BaseException:  # e.g. KeyboardInterrupt: never leave the child behind
        daemon.stop(signal.SIGKILL)
        raise
    if not wanted <= addresses.keys() or ("HTTP" in wanted and not _serving(
            addresses["HTTP"], process, deadline)):
        daemon.stop(signal.SIGKILL)
        raise RuntimeError(f"{name} did not start: {''.join(log)[-4000:]}")
    return daemon


_STARTING = (500, b"NOK - starting")  # the early start's answer to /ping: not ready yet


def _serving(address: str, process: subprocess.Popen[bytes] | ForkedProcess,
             deadline: float) -> bool:
    """Whether the daemon at ``address`` came to serve before ``deadline``: its ``/ping``
    answered something other than the early start's "not yet" (OK, or its health)."""
    host, _, port = address.rpartition(":")
    while time.monotonic() < deadline and process.poll() is None:
        connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=5)
        try:
            connection.request("GET", "/ping")
            answer = connection.getresponse()
            if (answer.status, answer.read()) != _STARTING:
                return True
        except OSError:
            pass  # (not accepting yet, or reset while the real server took over)
        finally:
            connection.close()
        time.sleep(0.02)  # (polling a readiness probe, as a harness does)
    return False
