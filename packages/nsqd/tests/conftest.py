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

