"""Start a daemon as a fork of a process that imported it already (a fork server, as
multiprocessing's ``forkserver`` start method does): the same program and the same ``main``
with its command line, in a process of its own, with its own sockets and files, which
``kill -9`` ends as it ends any other; only the interpreter's start and the imports (about
half a second of CPU for nsqd) are done once instead of at every start.

For tests that start a daemon hundreds of times (the model-based crash test's soak). The
server is a child of the test's process; each daemon is the server's child, so the server
reaps it and answers for its exit status (``ForkedProcess`` stands for ``subprocess.Popen``
in a ``Daemon``).

The server imports every module of the daemon's package before it forks (nothing is run:
no thread, no event loop, no socket), so what a module makes at import is shared by every
daemon it forks: a random generator of its own must be reseeded in the child
(``os.register_at_fork``), as Python's ``random`` does for its own.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import signal
import socket
import subprocess
import sys
import time
from typing import IO, Any

#: Exit status not known yet.
_RUNNING = None


class ForkServer:
    """A process that imported ``package`` (each of its modules) and forks a daemon that
    runs ``<package>.__main__``'s ``main`` on request."""

    def __init__(self, package: str) -> None:
        ours, theirs = socket.socketpair()
        self.package = package
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, package, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        self._sock = ours
        self._file = ours.makefile("rb")
        self._ask({"op": "ready"})  # every module imported

    def _ask(self, request: dict[str, Any], fds: list[int] | None = None) -> Any:
        data = json.dumps(request).encode() + b"\n"
        if fds:
            socket.send_fds(self._sock, [data], fds)
        else:
            self._sock.sendall(data)
        line = self._file.readline()
        if not line:
            raise RuntimeError(f"the fork server of {self.package} exited")
        return json.loads(line)

    def start(self, args: list[str], *, cwd: str | None = None) -> ForkedProcess:
        """A daemon started with ``args``, its stderr a pipe (as ``start_daemon`` makes)."""
        read, write = os.pipe()
        try:
            pid = self._ask({"op": "start", "args": args, "cwd": cwd}, [write])
        finally:
            os.close(write)
        return ForkedProcess(self, int(pid), [self.package, *args], os.fdopen(read, "rb"))

    def status(self, pid: int) -> int | None:
        """The exit status of ``pid`` (as ``Popen.returncode``: minus the signal that ended
        it), None while it runs."""
        answer = self._ask({"op": "status", "pid": pid})
        return None if answer is _RUNNING else int(answer)

    def close(self) -> None:
        """Stop the server (its daemons are the caller's to stop first)."""
        with contextlib.suppress(OSError):
            self._sock.close()
        self._file.close()
        self.process.wait(10)


class ForkedProcess:
    """A daemon forked by a ``ForkServer``: what ``Daemon`` uses of ``subprocess.Popen``."""

    def __init__(self, server: ForkServer, pid: int, args: list[str], stderr: IO[bytes]
                 ) -> None:
        self.server = server
        self.pid = pid
        self.args = args
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.01)  # (polling a child's exit through its parent)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# -- the server's side -----------------------------------------------------------------------


def _import_all(package: str) -> None:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        importlib.import_module(info.name)


def _run_child(package: str, args: list[str], cwd: str | None, stderr: int) -> None:
    """In the forked child: the daemon's ``main`` with ``args``; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(stderr, 2)
        os.close(devnull)
        os.close(stderr)
        if cwd:
            os.chdir(cwd)
        sys.argv = [package, *args]
        main = importlib.import_module(f"{package}.__main__").main
        try:
            main(args)
            code = 0
        except SystemExit as exc:  # as the interpreter ends on it
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _serve(package: str, fd: int) -> None:
    _import_all(package)
    sock = socket.socket(fileno=fd)
    statuses: dict[int, int] = {}

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            statuses[pid] = os.waitstatus_to_exitcode(status)

    while True:
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
        while data and not data.endswith(b"\n"):  # (the rest of a long request)
            more = sock.recv(1 << 16)
            if not more:
                return
            data += more
        if not data:
            return
        request = json.loads(data)
        reap()
        if request["op"] == "ready":
            answer: Any = True
        elif request["op"] == "start":
            pid = os.fork()
            if pid == 0:
                sock.close()
                _run_child(package, request["args"], request["cwd"], fds[0])
            os.close(fds[0])
            # a pid is used again once the system's pids wrap: the status of an earlier
            # daemon with this pid is not this one's
            statuses.pop(pid, None)
            answer = pid
        else:  # status
            answer = statuses.get(request["pid"], _RUNNING)
        sock.sendall(json.dumps(answer).encode() + b"\n")


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
