"""Work killed with SIGKILL before each of its file operations in turn, in a forked child (the
crash tests of nsqd's moves of a data directory: ``goimport``, ``privatemigration``): a test
runs it once unkilled to count the operations, then killed before each, then again to the end,
and checks it ends where the unkilled run does."""

from __future__ import annotations

import inspect
import os
import signal
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: The file operations counted: ``(owner, attribute name)`` of a function or coroutine function.
Steps = Sequence[tuple[Any, str]]


def run_in_child(work: Callable[[], object], steps: Steps, kill_at: int | None,
                 counted: Path) -> int:
    """``work()`` in a forked child, killed with SIGKILL before its ``kill_at``-th call of any
    of ``steps``; how many calls it made when it is not killed (written to ``counted`` by the
    child), -1 when it is. Fails when the child ends any other way."""
    counted.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 3
        try:
            calls = [0]
            for owner, name in steps:
                _count_calls(owner, name, calls, kill_at)
            work()
            counted.write_text(str(calls[0]))
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert kill_at is not None and os.WTERMSIG(status) == signal.SIGKILL, status
        return -1
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the work failed: {status}"
    return int(counted.read_text())


def _count_calls(owner: Any, name: str, calls: list[int], kill_at: int | None) -> None:
    real = getattr(owner, name)

    def before() -> None:
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    if inspect.iscoroutinefunction(real):
        async def counted_async(*args: Any, **kwargs: Any) -> Any:
            before()
            return await real(*args, **kwargs)
        setattr(owner, name, counted_async)
    else:
        def counted(*args: Any, **kwargs: Any) -> Any:
            before()
            return real(*args, **kwargs)
        setattr(owner, name, counted)
