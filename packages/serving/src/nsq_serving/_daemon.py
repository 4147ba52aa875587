"""A daemon's start-up and run, as NSQ's Go daemons behave: what each command's ``main`` shares.

Flags are parsed before anything heavy is imported, so that ``--version``, ``--help`` and a bad
flag answer at once (docs/performance.md): Trio and logging are imported here only by the
functions that run after the flags (``start_logging``, ``serve_until_signalled``,
``run_daemon``).

    version_string(name)          "nsqd v1.3.0 (built w/python3.12.7)"
    exit_on(ValueError, ...)      a bad option: "<prefix>FATAL: <why>" on stderr, exit 1
    catch_signals()               SIGINT/SIGTERM noted from main's first line, until Trio runs
    start_logging(name, ...)      NSQ's log layout on stderr, the version as the first line
    run_daemon(name, log, serve)  serve until SIGINT/SIGTERM, exit 1 if the start failed
    warm_up("pkg.mod", ...)       a task: import what is loaded on first use, in a thread
"""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

from nsq_common import NSQ_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: a command loads this module before its early start
    import logging
    from collections.abc import Awaitable, Callable, Iterator
    from typing import Any


def version_string(name: str) -> str:
    """What ``<name> --version`` prints and the first log line says."""
    # platform.python_version() without importing platform: CPython's version is the first
    # word of sys.version ("3.11.7 (main, ...)"), which is what platform parses it from
    return f"{name} v{NSQ_VERSION} (built w/python{sys.version.split()[0]})"


@contextmanager
def exit_on(*errors: type[Exception], prefix: str, context: str = "") -> Iterator[None]:
    """Exit 1 with ``<prefix>FATAL: <context><error>`` on stderr if the block raises one of
    ``errors`` (options checked before logging is set up)."""
    try:
        yield
    except errors as exc:
        sys.stderr.write(f"{prefix}FATAL: {context}{exc}\n")
        raise SystemExit(1) from None


def start_logging(name: str, prefix: str, level: str) -> logging.Logger:
    """The logger ``name`` in NSQ's layout (``nsq_common.setup_logging``), having logged the
    version line every daemon starts with."""
    from nsq_common import setup_logging

    log = setup_logging(name, prefix, level)
    log.info(version_string(name))
    return log


#: The signals that stop a daemon, and those noted since ``catch_signals`` (in order).
STOPPING = (signal.SIGINT, signal.SIGTERM)
_caught: list[int] = []


def _note(signum: int, frame: object) -> None:
    _caught.append(signum)


def catch_signals() -> None:
    """From now until Trio listens for them, a SIGINT or SIGTERM is noted, not acted on: a
    daemon stopped while it starts finishes starting, then stops as it always does (Go's
    daemons watch for them from their first line, and stop cleanly on one at any moment).
    Each command calls it first thing; ``serve_until_signalled`` replays them."""
    for signum in STOPPING:
        signal.signal(signum, _note)


def replay_signals() -> None:
    """Raise again the signals noted since ``catch_signals``: called once Trio listens for
    them, which then stops the daemon; ``catch_signals`` goes on noting any that come after
    Trio stops listening (while the daemon stops already)."""
    caught = list(dict.fromkeys(_caught))
    _caught.clear()
    for signum in caught:
        signal.raise_signal(signum)


def release_signals() -> None:
    """Undo ``catch_signals`` for a command that does not serve after all (an offline mode):
    SIGINT and SIGTERM act as Python's defaults again, those noted meanwhile at once."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    replay_signals()


async def serve_until_signalled(serve: Callable[..., Awaitable[Any]], *args: Any,
                                on_hangup: Callable[[], object] | None = None) -> None:
    """Start ``serve(*args)`` (``nursery.start``) and cancel it at the first SIGINT or SIGTERM,
    those that came before Trio ran included (``catch_signals``): the start is finished
    first, then stopped. With ``on_hangup``, each SIGHUP calls it instead of ending the
    daemon."""
    import trio

    watched = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if on_hangup else [])
    with trio.open_signal_receiver(*watched) as signals:
        replay_signals()
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, *args)
            async for signum in signals:
                if on_hangup is None or signum != signal.SIGHUP:
                    break
                on_hangup()
            nursery.cancel_scope.cancel()


async def warm_up(*modules: str) -> None:
    """Import ``modules`` in a worker thread. A daemon starts it as a task once it serves:
    what it loads only on first use (its ``/metrics`` collector, an HTTP client's transport)
    is then loaded soon after the start, off the start path, and never by the event loop
    itself, where an import would hold up every connection."""
    import importlib

    import trio

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:  # its first use will say why
                continue

    await trio.to_thread.run_sync(load)


def run_daemon(name: str, log: logging.Logger, serve: Callable[..., Awaitable[Any]],
               *args: Any, on_hangup: Callable[[], object] | None = None) -> None:
    """Run ``serve(*args)`` under Trio until signalled (``serve_until_signalled``), then log
    ``exiting``. An OSError (a port taken) exits 1 with ``failed to instantiate <name> - ``
    and the error, as Go's daemons do."""
    from functools import partial

    import trio

    try:
        trio.run(partial(serve_until_signalled, serve, *args, on_hangup=on_hangup))
    except* OSError as group:
        log.critical("failed to instantiate %s - %s", name, _first(group))
        raise SystemExit(1) from None
    log.info("exiting")


def _first(group: BaseExceptionGroup[OSError]) -> BaseException:
    """The first exception of ``group``, however deeply Trio's nurseries nested it."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
