"""The nsqd under test: started here (optionally under py-spy) or given by address; its HTTP API.

A local nsqd listens on 127.0.0.1 with ports chosen by the kernel and keeps its data in a
temporary directory that is removed when it stops.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from nsq_testing import start_daemon
from nsq_testing.daemon import Daemon


def _bin(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class Nsqd:
    """Where nsqd listens, and how to stop it when we started it."""

    def __init__(self, tcp_address: str, http_address: str, daemon: Daemon | None = None,
                 data_dir: str | None = None, profile: str | None = None) -> None:
        self.tcp_address = tcp_address
        self.http_address = http_address
        self.daemon = daemon
        self.data_dir = data_dir
        self.profile = profile
        self.pid = self._find_pid(daemon, profile)

    @classmethod
    def start(cls, mem_queue_size: int | None = None, profile: str | None = None,
              extra_args: list[str] | None = None,
              expect: tuple[str, ...] = ("TCP", "HTTP"), binary: str | None = None) -> Nsqd:
        """``binary``: another nsqd than this environment's (an older checkout's, Go's)."""
        data_dir = tempfile.mkdtemp(prefix="nsq-bench-")
        args = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", f"--data-path={data_dir}"]
        if mem_queue_size is not None:
            args.append(f"--mem-queue-size={mem_queue_size}")
        args += extra_args or []
        try:
            if profile:
                Path(profile).unlink(missing_ok=True)  # so that a stale file is not taken for it
                # py-spy starts nsqd as its child and writes the flame graph when nsqd exits.
                daemon = start_daemon("py-spy", ["record", "--output", profile, "--",
                                                 binary or _bin("nsqd"), *args], expect=expect)
            else:
                daemon = start_daemon(binary or "nsqd", args, expect=expect)
        except BaseException:
            shutil.rmtree(data_dir, ignore_errors=True)
            raise
        return cls(daemon.tcp_address, daemon.http_address, daemon, data_dir, profile)

    @staticmethod
    def _find_pid(daemon: Daemon | None, profile: str | None) -> int | None:
        """nsqd's own pid: the daemon's, or its child's when py-spy started it."""
        if daemon is None:
            return None
        if not profile:
            return daemon.pid
        pids = _children(daemon.pid)
        return pids[0] if pids else None

    @classmethod
    def external(cls, tcp_address: str, http_address: str | None) -> Nsqd:
        if http_address is None:
            host, port = tcp_address.rsplit(":", 1)
            http_address = f"{host}:{int(port) + 1}"
        return cls(tcp_address, http_address)

    def stop(self) -> None:
        """Stop the nsqd we started (nothing for an external one) and remove its data."""
        daemon = self.daemon
        try:
            if daemon is not None:
                if self.profile:
                    self._stop_profiled(daemon)
                else:
                    daemon.stop()
        finally:
            if self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    @staticmethod
    def _stop_profiled(daemon: Daemon) -> None:
        # SIGTERM to nsqd itself (py-spy's child) lets it exit cleanly; py-spy then writes the
        # output and exits. py-spy itself is only signalled if that does not happen.
        for pid in _children(daemon.pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            daemon.process.wait(30)
        except Exception:
            pass
        daemon.stop(signal.SIGINT, timeout=30)

    def cpu_seconds(self) -> float | None:
        """User + system CPU time nsqd has used so far (Linux /proc), if we know its pid."""
        if self.pid is None:
            return None
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def written_bytes(self) -> int | None:
        """Bytes nsqd has caused to be written to storage so far (Linux /proc/<pid>/io
        ``write_bytes``, counted when pages are dirtied: data files, metadata, everything)."""
        if self.pid is None:
            return None
        try:
            for line in Path(f"/proc/{self.pid}/io").read_text().splitlines():
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    def log(self) -> str:
        return self.daemon.output() if self.daemon is not None else ""

    # -- HTTP API ---------------------------------------------------------------------------
    def _url(self, path: str, **params: str) -> str:
        query = urllib.parse.urlencode(params)
        return f"http://{self.http_address}{path}" + (f"?{query}" if query else "")

    def post(self, path: str, **params: str) -> None:
        req = urllib.request.Request(self._url(path, **params), data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()

    def stats(self, topic: str) -> dict[str, Any] | None:
        """The /stats JSON object of ``topic`` (clients left out), or None if it does not exist."""
        url = self._url("/stats", format="json", topic=topic, include_clients="false",
                        include_mem="false")
        with urllib.request.urlopen(url, timeout=30) as resp:
            doc = json.loads(resp.read())
        for item in doc.get("topics") or []:
            if item["topic_name"] == topic:
                found: dict[str, Any] = item
                return found
        return None

    def create_channel(self, topic: str, channel: str) -> None:
        self.post("/topic/create", topic=topic)
        self.post("/channel/create", topic=topic, channel=channel)

    def delete_topic(self, topic: str) -> None:
        try:
            self.post("/topic/delete", topic=topic)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    def wait_for(self, topic: str, check: Any, timeout: float = 30.0) -> dict[str, Any] | None:
        """Poll the topic's stats until ``check(stats)`` holds or ``timeout`` passes; the last."""
        deadline = time.monotonic() + timeout
        while True:
            item = self.stats(topic)
            if check(item) or time.monotonic() > deadline:
                return item
            time.sleep(0.05)
