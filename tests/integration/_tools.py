"""A command-line tool of nsq_client's run as nsqd's users run it, in a process of its own, until
what the test waits for is seen, then stopped with Ctrl-C (SIGINT) as they stop it."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from nsq_testing import wait_exit, wait_until


def run_tool_until(tool: str, log: Path, args: list[str], done: Callable[[], bool]) -> bytes:
    """``python -m nsq_client.tools.<tool> args`` (its stderr into ``log``) until ``done()``,
    then SIGINT; it must exit 0. Its log."""
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", f"nsq_client.tools.{tool}", *args],
                                stdout=subprocess.DEVNULL, stderr=sink)
    try:
        wait_until(done, what=log.read_text)
    finally:
        proc.send_signal(signal.SIGINT)
        wait_exit(proc)
    assert proc.returncode == 0, log.read_text()
    return log.read_bytes()
