"""A real etcd (the ``etcd`` server, v3; Debian's ``etcd-server``) as a child process for
tests: one member on two free loopback ports (client and peer), its own data directory.

``Etcd.start`` waits until ``/health`` says so; ``kill`` (SIGKILL) and ``stop`` end the
process it started, by its pid, and nothing else; ``start`` again brings it back on the
same ports and data, as a restarted etcd. A free port can be taken by another process
between its choice and etcd's bind: the first start then tries again on two new ports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import attrs

from .daemon import free_port
from .wait import DEADLINE


def etcd_binary() -> str | None:
    """The etcd server's path, if installed."""
    return shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


@attrs.define(eq=False)
class Etcd:
    directory: Path
    client_port: int = attrs.field(factory=free_port)
    peer_port: int = attrs.field(factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    started: bool = False  # once started, the ports are kept (the nsqd were given them)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "etcd.log"

    def start(self, timeout: float = DEADLINE) -> Etcd:
        """Start (or start again) and wait until healthy.

        Raises:
            RuntimeError: etcd is not installed, exited, or was not healthy in time.
        """
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed (Debian: apt-get install etcd-server)")
        deadline = time.monotonic() + timeout
        for _ in range(5):
            logged = len(self.output())
            if self._started(binary, deadline):
                self.started = True
                return self
            taken = "address already in use" in self.output()[logged:]
            if self.started or not taken:
                break
            self.client_port, self.peer_port = free_port(), free_port()
            shutil.rmtree(self.directory / "data", ignore_errors=True)  # the old ports' member
        raise RuntimeError(f"etcd did not start: {self.output()[-4000:]}")

    def _started(self, binary: str, deadline: float) -> bool:
        """One start: True once healthy, False (and killed) if it exited or was too slow."""
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.directory.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [binary, "--name", "test", "--data-dir", str(self.directory / "data"),
                 "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"test={peer}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        while not self.healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                return False
            time.sleep(0.05)
        return True

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/health", timeout=2) as answer:
                return bool(json.load(answer).get("health") == "true")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Signal the process this started and wait for it; SIGKILL if it does not exit."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""
