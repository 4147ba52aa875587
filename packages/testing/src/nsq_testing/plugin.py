"""pytest fixtures that start real daemons on loopback (enabled with ``-p nsq_testing.plugin``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .daemon import Daemon, running_daemons, start_daemon
from .etcd import Etcd
from .wire import close_leftover_clients


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A Ctrl-C inside a Trio test reaches pytest wrapped in an exception group, which pytest
    reports as one failed test and goes on to the next; unwrapped, it stops the session (and
    every fixture still tears down, so no daemon is left running)."""
    try:
        return (yield)
    except BaseExceptionGroup as group:
        if group.subgroup(KeyboardInterrupt) is not None:
            raise KeyboardInterrupt from group
        raise


@pytest.fixture(autouse=True)
def _cleanup() -> Iterator[None]:
    """After every test, pass or fail: close the WireClients it left open and stop the daemons
    it started (by pid) and did not stop, so a failure is reported once, not again as a
    ResourceWarning or a stray process. Daemons of wider-scoped fixtures are left alone."""
    before = running_daemons()
    yield
    close_leftover_clients()
    _stop_all(running_daemons() - before)


@pytest.fixture
def run_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """A factory: ``run_daemon("nsqd", "--mem-queue-size=10")`` -> Daemon; all stopped at the end.

    nsqd gets ``--data-path`` in a fresh temp dir and ``127.0.0.1:0`` listeners unless given.
    """
    started: list[Daemon] = []

    def factory(name: str, *args: str, **kwargs: Any) -> Daemon:
        argv = list(args)

        def given(flag: str) -> bool:
            return any(a.lstrip("-").split("=", 1)[0] == flag for a in argv)

        if name != "nsqadmin" and not given("tcp-address"):
            argv.append("--tcp-address=127.0.0.1:0")
        if not given("http-address"):
            argv.append("--http-address=127.0.0.1:0")
        if name == "nsqd" and not given("https-address"):  # used only with --tls-cert/--tls-key
            argv.append("--https-address=127.0.0.1:0")
        if name == "nsqd" and not given("data-path"):
            data = tmp_path / f"nsqd-{len(started)}"
            data.mkdir()
            argv.append(f"--data-path={data}")
        daemon = start_daemon(name, argv, **kwargs)
        started.append(daemon)
        return daemon

    try:
        yield factory
    finally:
        _stop_all(reversed(started))


def _stop_all(daemons: Iterable[Daemon]) -> None:
    """Stop every daemon, even when stopping one of them fails; then raise the first error."""
    errors: list[BaseException] = []
    for daemon in daemons:
        try:
            daemon.stop()
        except BaseException as exc:  # the others must still be stopped
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def nsqd(run_daemon: Callable[..., Daemon]) -> Daemon:
    """One nsqd with default options on loopback."""
    return run_daemon("nsqd")


@pytest.fixture(scope="module")
def shared_nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One nsqd for a whole test module (tests use their own topic names)."""
    data = tmp_path_factory.mktemp("shared-nsqd")
    daemon = start_daemon("nsqd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                                   f"--data-path={data}"])
    with daemon:
        yield daemon


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    """A real etcd on free loopback ports, with its own data directory; stopped at the end."""
    server = Etcd(tmp_path / "etcd").start()
    try:
        yield server
    finally:
        server.stop()
