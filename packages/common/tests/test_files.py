"""write_atomically: the new content whole, or the old file untouched; no temporary left."""

import errno
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


def test_short_writes_are_continued(tmp_path, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:3])))
    path = tmp_path / "state.dat"
    write_atomically(path, b"written three bytes at a time")
    assert path.read_bytes() == b"written three bytes at a time"


def test_a_write_that_writes_nothing_is_eio_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "state.dat"
    path.write_bytes(b"previous")
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    with pytest.raises(OSError) as raised:
        write_atomically(path, b"new")
    assert raised.value.errno == errno.EIO
    assert path.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["state.dat"]
