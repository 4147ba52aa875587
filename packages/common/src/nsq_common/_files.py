"""Replacing a small file all at once: the one piece of file I/O in ``nsq_common``.

nsqd's metadata (``nsqd.dat``, each disk queue's ``.meta.dat``), nsqadmin's history and
password files and the Spark source's batch log all keep state in a small file that a crash
must leave either as it was or as it became, never half written. They share this::

    write_atomically(path, data, mode=0o600)   # temp file beside it, fsync, rename over path
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o666,
                     sync_directory: bool = False) -> None:
    """Replace ``path`` with ``data``: a crash leaves the old file or the new one.

    ``data`` goes into a new file beside ``path`` (a name no other writer uses, created with
    ``mode`` less the umask), is fsynced and renamed over ``path``. With ``sync_directory`` the
    directory is fsynced too, so that the rename itself survives a power cut. On an error the
    temporary file is removed and the ``OSError`` raised (``EIO`` for a write that wrote
    nothing).
    """
    final = Path(path)
    temporary = final.with_name(f"{final.name}.{random.getrandbits(62)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # a short write is retried; one that writes nothing, refused
                    raise OSError(errno.EIO, "write made no progress")
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    if sync_directory:
        _sync_directory(final.parent)


def _sync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # not every platform opens directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
