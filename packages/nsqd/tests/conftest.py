"""Fixtures shared by nsqd's storage tests: a real, tiny file system that fills up."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    """Topics (their logs in memory) and channels on a clock set by hand, no broker."""

    def __init__(self) -> None:
        from nsqd.clock import FixedClock

        self.clock = FixedClock()
        self.owner = FakeOwner()

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
        return channel


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def world_class() -> type[World]:
    """``World`` itself, for a test that needs a fresh one per example."""
    return World
