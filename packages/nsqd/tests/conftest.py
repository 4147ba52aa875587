"""Fixtures shared by nsqd's tests: a real, tiny file system that fills up; channels and
topics in memory (``World``); Trio's virtual clock for a broker that writes files
(``io_clock``); a file operation held in its worker thread (``hold_in_thread``)."""

from __future__ import annotations

import functools
import math
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

TINY_FS_BYTES = 1 << 20


class TinyFs:
    """A mounted tmpfs of TINY_FS_BYTES."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self, name: str = "filler") -> Path:
        """Fill the file system with one file, to its last byte; returns it (unlink it to
        free the space again)."""
        path = self.path / name
        with open(path, "ab", buffering=0) as f:
            for block in (b"\0" * 4096, b"\0"):
                try:
                    while True:
                        f.write(block)
                except OSError:
                    pass
        return path


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[TinyFs]:
    """A 1 MiB tmpfs mounted on a fresh directory: writes into it fail with ENOSPC once it is
    full. Mounting needs root (CI has it); elsewhere the test is skipped, saying why."""
    mount = shutil.which("mount")
    umount = shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount/umount command here to make a small tmpfs for a full disk")
    where = tmp_path / "tiny-fs"
    where.mkdir()
    done = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={TINY_FS_BYTES}", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill up (needs root): {done.stderr.strip()}")
    try:
        yield TinyFs(where)
    finally:
        if subprocess.run([umount, str(where)], capture_output=True, check=False).returncode != 0:
            # Something still holds a file there (a failed test's open segment): detach it
            # anyway, so that no mount outlives the test.
            subprocess.run([umount, "-l", str(where)], capture_output=True, check=False)


@pytest.fixture
def io_clock() -> trio.testing.MockClock:
    """Trio's virtual clock for a test whose broker reads and writes files in worker threads.
    ``autojump_clock`` jumps to the next deadline as soon as every task waits, also while a
    task waits for a thread: a file write in a thread then takes "ten seconds" and a test's
    ``fail_after`` goes off. This clock does not move by itself; ``jump_when_idle`` (started
    by ``io_clock_moving``) moves it only once no thread is at work either. The test names it
    among its arguments: pytest-trio runs a test on a clock it names."""
    return trio.testing.MockClock()


@pytest.fixture
async def io_clock_moving(io_clock: trio.testing.MockClock, nursery: trio.Nursery) -> None:
    """``io_clock`` moving (for the fixture that starts a broker on it)."""
    nursery.start_soon(jump_when_idle, io_clock)


async def jump_when_idle(clock: trio.testing.MockClock) -> None:
    """Move ``clock`` to the next deadline whenever every other task waits and no worker
    thread runs (a task waiting for one will be woken by it, in no virtual time)."""
    while True:
        await trio.testing.wait_all_tasks_blocked()
        if trio.testing.active_thread_count():
            await trio.testing.wait_all_threads_completed()
            continue
        jump = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if 0 < jump < math.inf:
            clock.jump(jump)
        elif jump == math.inf:  # nothing scheduled: only real I/O can wake anything
            await trio.testing.wait_all_tasks_blocked(0.01)
        await trio.lowlevel.checkpoint()


class Waited:
    """A lock that tells when someone had to wait for it (``contended``), and calls
    ``on_contended`` then: put in place of the lock a log, queue or journal holds through
    each file operation, which its rename aside (``detach``, on the Trio thread) takes too."""

    def __init__(self, on_contended: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()
        self._on_contended = on_contended

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._on_contended()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class HeldInThread:
    """A blocking function (``owner.name``) held, in the worker thread that calls it, until
    ``release()``, or until someone waits for ``lock`` (a ``Waited`` the test puts in place of
    the file operations' lock): a rename aside then waits for the held call, which goes on.
    Every call (every one ``when(*args)`` is true of) is held until then; later ones go
    through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str, *,
                 when: Callable[..., bool] = lambda *args: True) -> None:
        self.entered = threading.Event()
        self._go_on = threading.Event()
        self.lock = Waited(self._go_on.set)
        original = getattr(owner, name)

        def held(*args: object, **kwargs: object) -> object:
            if when(*args):
                self.entered.set()
                self._go_on.wait(30)  # (a safety net: released by the test, or the rename)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, held)

    async def under_way(self) -> None:
        """Return once a call is held (in its worker thread)."""
        await trio.to_thread.run_sync(self.entered.wait, 30)
        assert self.entered.is_set(), "the file operation to hold never came"

    def release(self) -> None:
        self._go_on.set()

    @property
    def waited_for(self) -> bool:
        """Whether a rename aside (anyone taking ``lock``) had to wait for the held call."""
        return self.lock.contended.is_set()

    async def moving_aside(self, detach: Callable[[], object]) -> None:
        """Once a call is held, ``detach`` (on the Trio thread, where the broker calls it),
        which must wait for the held call to end."""
        await self.under_way()
        try:
            detach()
        finally:
            self.release()
        assert self.waited_for, "the rename aside did not wait for the file operation"


@pytest.fixture
def hold_in_thread(monkeypatch: pytest.MonkeyPatch) -> Callable[..., HeldInThread]:
    """``hold_in_thread(owner, name, when=...)``: ``HeldInThread`` on ``owner.name``, undone
    after the test."""
    return functools.partial(HeldInThread, monkeypatch)


class FakeOwner:
    """The broker as a channel sees it: dirty marks and emptied channels noted; dead
    letters and own queues in memory."""

    def __init__(self) -> None:
        self.dirty: set[object] = set()
        self.emptied: list[object] = []

    def mark_dirty(self, channel: object) -> None:
        self.dirty.add(channel)

    def channel_emptied_of_clients(self, channel: object) -> None:
        self.emptied.append(channel)

    def dead_letters_for(self, channel: object) -> object:
        from nsqd.backlog import Backlog
        from nsqd.deadletters import DeadLetters

        return DeadLetters(Backlog(1 << 62, None, lambda: None))

    def own_queue_for(self, channel: object) -> object:
        from nsqd.backlog import Backlog

        return Backlog(1 << 62, None, channel.changed)  # type: ignore[attr-defined]


class World:
    """Topics (their logs in memory) and channels, no broker: on a clock set by hand
    (``FixedClock``), or on the one given (``virtual_world``)."""

    def __init__(self, clock: object = None) -> None:
        from nsqd.clock import FixedClock

        self.clock = clock if clock is not None else FixedClock()
        self.owner = FakeOwner()
        self.channels: list[object] = []

    def topic(self, name: str = "t", *, mem_queue_size: int = 1 << 30) -> object:
        from nsqd.topic import Topic
        from nsqd.topiclog import TopicLog

        log = TopicLog(name, None, mem_queue_size=mem_queue_size, clock=self.clock)
        return Topic(name, log, clock=self.clock)

    def channel(self, topic: object, name: str = "c", *, start: str | None = None,
                max_msg_timeout: float = 900, mem_queue_size: int = 10000) -> object:
        from nsqd.channel import Channel
        from nsqd.cursor import Cursor

        cursor = Cursor(topic.start_position(start))  # type: ignore[attr-defined]
        channel = Channel(topic, name, self.owner, cursor=cursor, clock=self.clock,  # type: ignore[arg-type]
                          max_msg_timeout=max_msg_timeout, mem_queue_size=mem_queue_size)
        topic.add_channel(channel)  # type: ignore[attr-defined]
        self.channels.append(channel)
        return channel


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def world_class() -> type[World]:
    """``World`` itself, for a test that needs a fresh one per example."""
    return World


@pytest.fixture
async def virtual_world(autojump_clock: object, nursery: object) -> World:
    """A ``World`` on Trio's virtual clock (``MockClock(autojump_threshold=0)`` through a
    ``VirtualClock``: a wait of an hour takes no time), with the broker's queue scan running
    (in-flight timeouts, deferred messages coming due) over its channels. Nothing here
    touches a disk or a thread, so virtual time moves only when every task waits for it."""
    from nsqd.clock import VirtualClock
    from nsqd.pump import Pump

    world = World(VirtualClock())

    async def store(channel: object) -> None:
        await channel.store_dead_letters()  # type: ignore[attr-defined]

    pump = Pump(world.clock.now, lambda: world.channels, store)  # type: ignore[attr-defined,arg-type]
    nursery.start_soon(pump.run_scan)  # type: ignore[attr-defined]
    return world
