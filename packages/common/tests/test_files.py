"""write_atomically: the new content whole, or the old file untouched; no temporary left."""

import os
import stat

import pytest
from nsq_common import write_atomically


def test_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "state.dat"
    path.write_bytes(b"previous")
    write_atomically(path, b"new content", sync_directory=True)
    assert path.read_bytes() == b"new content"
    assert os.listdir(tmp_path) == ["state.dat"]


def test_mode_is_the_new_files(tmp_path):
    path = tmp_path / "secret"
    write_atomically(str(path), b"x", mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path, monkeypatch):
    path = tmp_path / "state.dat"
    path.write_bytes(b"previous")

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)  # a full disk cannot be made here
    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, b"new")
    assert path.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["state.dat"]


def test_a_missing_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "missing" / "f", b"x")
