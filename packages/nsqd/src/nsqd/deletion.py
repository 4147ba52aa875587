"""Files of a deleted topic or channel, whose name may be used again at once.

The deletion renames them aside at once (``aside_name``: the name, ``DELETED_MARK`` and a
random suffix), so that a topic or channel made again with the same name right away starts
with none of them, in files of its own; they are removed later, in the background, by their
new names, so the removal can never take the new files with it. What a crash left aside is
removed at the next start (``remove_deleted``).

What is renamed so: a topic's directory (``topiclog``), a channel's cursor journal
(``cursorfile``) and its internal logs' directories in the topic's (``privatelog``: its own
queue, its dead letters; each a log's directory, with its cursor's journal in it).

Nothing is made again under the old name after the rename. Each owner of such files (a
``TopicLog``, a ``CursorJournal``) holds one ``threading.Lock`` through each
of its file operations (in a worker thread: ``holding``), and its ``detach``, on the Trio
thread, renames under that lock and points the owner's paths at the new names before it lets
go. So a file operation under way when the deletion comes ends first (what it wrote moves
with the rest), and one that comes after builds its paths from the new names (a journal
writes nothing more): none makes a directory or a file again under the old name, where a
topic or channel made again at once would find it, or where the background removal of the
deleted one would take the new one's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: Between the name of what a deletion moved aside and a random suffix (no topic or channel
#: name has a ``~``).
DELETED_MARK = "~deleted-"
#: A damaged file of a queue, put aside for an operator: a deletion leaves it (as Go's does).
_BAD_SUFFIX = ".bad"


def aside_name(name: str) -> str:
    """A name for ``name`` deleted: unique, marked, and never that of a topic or channel."""
    return f"{name}{DELETED_MARK}{secrets.token_hex(4)}"


def holding(busy: threading.Lock, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``, a file operation (blocking: in a worker thread), with ``busy`` held:
    the lock of the log, journal or queue whose files it works on, which its ``detach``
    takes too."""
    with busy:
        return fn(*args)


def remove_deleted(data_path: Path, topics: Path) -> None:
    """Remove what deletions left when the last run stopped: topic directories (in
    ``topics``), channels' journals and internal logs' directories (in a topic's directory)
    moved aside, and the private queues' files of an earlier version (in ``data_path``) but
    their ``.bad`` ones. Blocking (a worker thread's work); whatever cannot be removed stays,
    for the next start."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(data_path):
            if (DELETED_MARK in entry.name and not entry.name.endswith(_BAD_SUFFIX)
                    and not entry.is_dir()):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
    try:
        directories = [p for p in topics.iterdir() if p.is_dir()]
    except OSError:
        return
    for directory in directories:
        if DELETED_MARK in directory.name:
            shutil.rmtree(directory, ignore_errors=True)
            continue
        with contextlib.suppress(OSError):
            for path in directory.iterdir():
                if DELETED_MARK not in path.name:
                    continue
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        path.unlink(missing_ok=True)
