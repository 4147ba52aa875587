"""A real Spark standalone cluster on 127.0.0.1 for tests: a master and workers, each its own JVM.

``local[N]`` runs the executors as threads of the driver's JVM; a test that must see them as
separate processes (their own Python workers, their own working directories, rows crossing a
real RPC) needs a standalone cluster. The pip-installed pyspark has no ``sbin/start-*.sh``,
only ``bin/spark-class``, which is what those scripts run in the end, so this starts::

    spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port P --webui-port U
    spark-class org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores 1 --memory 1g \\
        --webui-port W --work-dir DIR spark://127.0.0.1:P

as child processes, each in a session (and so a process group) of its own, and waits until the
master's JSON status (``http://127.0.0.1:U/json/``) lists every worker ALIVE. ``stop`` ends
exactly what it started: each child's process group (the worker's executors run in their
worker's group) and any descendant that left its group (PySpark's ``daemon.py`` makes a group
of its own for its forked workers), found under ``/proc`` before the groups are signalled, and
removes the temporary directory that held the logs and the workers' directories.

The ports are chosen free, but Spark moves to the next port when one was taken in between, so
the real ones are read back from the master's log rather than assumed. pyspark is not imported
here: only its install directory is located (by ``importlib``), so importing this module
costs nothing and needs no JVM.

::

    with start_spark_cluster() as cluster:
        spark = SparkSession.builder.master(cluster.master_url)...getOrCreate()
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import attrs

from .daemon import free_port
from .wait import DEADLINE, wait_until

# No proxy from the environment: a test's requests go to 127.0.0.1 and nowhere else.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))

#: Starting JVMs on a loaded 2-core machine is slow: a master and two workers can take a minute.
START_DEADLINE = DEADLINE * 6

_MASTER_PORT = re.compile(r"Successfully started service 'sparkMaster' on port (\d+)")
_MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")


def spark_home() -> Path:
    """The directory of the installed ``pyspark`` package: pip's pyspark is a whole Spark
    distribution there (``bin/``, ``jars/``), and ``SPARK_HOME`` is that directory.

    Raises:
        RuntimeError: pyspark is not installed, or has no ``bin/spark-class``.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed")
    home = Path(spec.origin).parent
    if not (home / "bin" / "spark-class").exists():
        raise RuntimeError(f"no bin/spark-class in {home}")
    return home


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time since boot): with the pid, names one process for
    good, so a pid reused after the process exited is never signalled."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _descendants(roots: set[int]) -> dict[int, str]:
    """Every live process below ``roots`` (pid -> start time), from /proc's parent links
    (none where there is no /proc: there the process groups are all that is ended)."""
    parents: dict[int, int] = {}
    if not Path("/proc/self/stat").exists():
        return {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: dict[int, str] = {}
    frontier = set(roots)
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        for pid in children:
            started = _start_time(pid)
            if started is not None:
                found[pid] = started
        frontier = children
    return found


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


@attrs.define(eq=False)
class SparkCluster:
    """A running standalone cluster; ``stop`` (or leaving the ``with`` block) ends it."""

    master_url: str  # spark://127.0.0.1:PORT, for SparkSession.builder.master
    web_url: str  # the master's web UI, http://127.0.0.1:PORT
    root: Path  # temporary directory: logs/ and one work directory per worker
    master: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = attrs.field(factory=list)
    worker_dirs: list[Path] = attrs.field(factory=list)
    _stopped: bool = False

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [*self.workers, self.master]

    def status(self) -> dict[str, Any]:
        """The master's JSON status: ``workers`` (each with ``state``, ``host``, ``port``,
        ``coresused``), ``activeapps``, ``aliveworkers``..."""
        with _LOOPBACK.open(f"{self.web_url}/json/", timeout=10) as response:
            return dict(json.load(response))

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.status()["workers"] if w.get("state") == "ALIVE"]

    def logs(self, tail: int = 3000) -> str:
        """The end of every process's log, for a failure message."""
        parts = []
        for path in sorted((self.root / "logs").glob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.name}\n{text[-tail:]}")
        return "\n".join(parts)

    def stop(self, timeout: float = 30.0) -> None:
        """End every process this cluster started, executors included, then remove ``root``.

        Workers go first (a worker stopping kills its executors), then the master. Each group
        gets SIGTERM, then SIGKILL if its leader has not exited within ``timeout``; descendants
        that moved to a group of their own get the same once their group leaders are gone.
        """
        if self._stopped:
            return
        self._stopped = True
        try:
            strays = _descendants({p.pid for p in self.processes})
            for group in (self.workers, [self.master]):
                for process in group:
                    if process.poll() is None:
                        _signal_group(process.pid, signal.SIGTERM)
                for process in group:
                    try:
                        process.wait(timeout)
                    except subprocess.TimeoutExpired:
                        _signal_group(process.pid, signal.SIGKILL)
                        process.wait(timeout)
                    # The leader is gone; what it left behind in its group is killed.
                    _signal_group(process.pid, signal.SIGKILL)
            self._end_strays(strays, timeout)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _end_strays(strays: dict[int, str], timeout: float) -> None:
        """Descendants outside the groups (PySpark's daemon) exit when their executor's pipe
        closes; any still there after ``timeout`` is killed, if its pid is still that process."""
        def alive() -> list[int]:
            return [pid for pid, started in strays.items() if _start_time(pid) == started]

        try:
            wait_until(lambda: not alive(), timeout=timeout, interval=0.1)
        except TimeoutError:
            for pid in alive():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _environment(home: Path, root: Path, python: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",  # every listener, the executors' too, on loopback
        SPARK_LOG_DIR=str(root / "logs"),
        SPARK_WORKER_DIR=str(root / "work"),
        SPARK_NO_DAEMONIZE="1",
        PYSPARK_PYTHON=python,  # executors' Python workers: an interpreter that has our packages
        # The master's and workers' own heaps: a few apps' bookkeeping, not their data.
        SPARK_DAEMON_MEMORY=env.get("SPARK_DAEMON_MEMORY", "256m"),
    )
    env.pop("SPARK_CONF_DIR", None)  # the distribution's defaults, not a developer's setup
    return env


def start_spark_cluster(workers: int = 2, *, cores: int = 1, memory: str = "1g",
                        python: str | None = None, timeout: float = START_DEADLINE) -> SparkCluster:
    """Start a master and ``workers`` workers (``cores`` cores, ``memory`` for executors, each)
    on 127.0.0.1 and wait until the master lists them all ALIVE.

    ``python`` is the executors' interpreter (``PYSPARK_PYTHON``), this one by default.

    Raises:
        RuntimeError: a process exited, or the cluster was not up within ``timeout``; whatever
            was started is stopped first.
    """
    home = spark_home()
    root = Path(tempfile.mkdtemp(prefix="nsq-spark-cluster-"))
    (root / "logs").mkdir()
    env = _environment(home, root, python or sys.executable)
    spark_class = str(home / "bin" / "spark-class")

    def launch(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with open(root / "logs" / f"{name}.log", "wb") as log:
            return subprocess.Popen([spark_class, *args], cwd=root, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    master = launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(free_port()), "--webui-port", str(free_port())])
    cluster = SparkCluster("", "", root, master)
    try:
        port, ui = _wait_for_master(cluster, timeout)
        cluster.master_url = f"spark://127.0.0.1:{port}"
        cluster.web_url = f"http://127.0.0.1:{ui}"
        for i in range(workers):
            work = root / f"worker-{i}"
            work.mkdir()
            cluster.worker_dirs.append(work)
            cluster.workers.append(launch(f"worker-{i}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                "--work-dir", str(work), cluster.master_url]))

        def all_alive() -> bool:
            _check_running(cluster)
            return len(cluster.alive_workers()) == workers

        wait_until(all_alive, timeout=timeout, interval=0.5, ignore=(OSError,),
                   what=lambda: f"{workers} ALIVE workers at {cluster.web_url}\n{cluster.logs()}")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _check_running(cluster: SparkCluster) -> None:
    for process in cluster.processes:
        if process.poll() is not None:
            raise RuntimeError(f"a Spark process exited ({process.returncode}):\n{cluster.logs()}")


def _wait_for_master(cluster: SparkCluster, timeout: float) -> tuple[int, int]:
    """The master's RPC and web UI ports, from its log, once both listen."""
    log = cluster.root / "logs" / "master.log"

    def ports() -> tuple[int, int] | None:
        _check_running(cluster)
        text = log.read_text(errors="replace")
        port, ui = _MASTER_PORT.search(text), _MASTER_UI.search(text)
        return (int(port.group(1)), int(ui.group(1))) if port and ui else None

    found = wait_until(ports, timeout=timeout, interval=0.2,
                       what=lambda: f"the Spark master's ports in its log\n{cluster.logs()}")
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{found[1]}/json/"

    def status_alive() -> bool:
        _check_running(cluster)
        with _LOOPBACK.open(url, timeout=10) as response:
            return bool(json.load(response).get("status") == "ALIVE")

    wait_until(status_alive, timeout=max(1.0, deadline - time.monotonic()), interval=0.2,
               ignore=(OSError,), what=lambda: f"the Spark master ALIVE at {url}\n{cluster.logs()}")
    return found
