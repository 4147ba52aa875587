"""Wait for an observable condition, never for a length of time.

Tests run on slow, busy machines, so they never sleep to let something happen and never assert
how long something took: they poll a condition (a /stats field, a log line, a file) until it
holds, with a deadline far longer than a quiet machine needs. ``DEADLINE`` is that default.
``wait_until`` is the blocking flavour (for plain tests and threads), ``until`` the Trio one.
Both return the predicate's last (truthy) value, so a test can go on with what it found.
"""

from __future__ import annotations

import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")

#: Long enough for anything a test waits for on a loaded 2-core machine (quiet: well under 1 s).
DEADLINE = 30.0


def _describe(what: str | Callable[[], str] | None, predicate: Callable[..., object]) -> str:
    if callable(what):
        return what()
    return what or str(getattr(predicate, "__name__", "condition"))


def _attempt(predicate: Callable[[], T | None], ignore: tuple[type[BaseException], ...]
             ) -> tuple[T | None, BaseException | None]:
    try:
        return predicate(), None
    except ignore as exc:
        return None, exc


def wait_until(predicate: Callable[[], T | None], *, timeout: float = DEADLINE, interval: float = 0.05,
               what: str | Callable[[], str] | None = None,
               ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``predicate`` until it returns something truthy and return that.

    Exceptions of the types in ``ignore`` (e.g. ``OSError`` while a daemon is not up yet) count
    as "not yet". ``what`` (a string, or a callable for a message built at failure time) says
    what was awaited.

    Raises:
        TimeoutError: the condition did not hold within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value, error = _attempt(predicate, ignore)
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true within {timeout} s: {_describe(what, predicate)}"
                               + (f" (last error: {error!r})" if error else "")) from error
        time.sleep(interval)


async def until(predicate: Callable[[], T | Awaitable[T | None] | None], *, timeout: float = DEADLINE,
                interval: float = 0.02, what: str | Callable[[], str] | None = None,
                ignore: tuple[type[BaseException], ...] = ()) -> T:
    """The Trio flavour of :func:`wait_until`; ``predicate`` may be plain or async.

    Raises:
        TimeoutError: the condition did not hold within ``timeout`` seconds (of Trio's clock).
    """
    error: BaseException | None = None
    with trio.move_on_after(timeout):
        while True:
            value: Any
            try:
                value = predicate()
                if inspect.isawaitable(value):
                    value = await value
            except ignore as exc:
                value, error = None, exc
            if value:
                result: T = value
                return result
            await trio.sleep(interval)
    raise TimeoutError(f"not true within {timeout} s: {_describe(what, predicate)}"
                       + (f" (last error: {error!r})" if error else "")) from error


def wait_exit(proc: subprocess.Popen[bytes], *, timeout: float = DEADLINE) -> int:
    """Wait for a child process to exit and return its status; one that does not within the
    deadline is killed (no stray process after a failing test) and TimeoutExpired raised."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
