"""A channel's cursor journal, ``<channel>.cursor``: snapshots of its cursor, appended.

Format (docs/design/storage.md, "Cursor journals"); big-endian, one entry per append()::

    entry:   | length u32 | crc32 u32 (of the payload) | payload (length bytes) |
    payload: | mark-delete u64 | ranges u32 | ranges x (start u64, end u64) |
             | extras u32 | extras x (offset u64, attempts u16, due ns i64; 0: not deferred) |

Each entry is a whole snapshot, so loading takes the last entry whose crc holds (``load``),
and nothing is ever updated in place. A crash mid-append leaves a torn last entry, which
``load`` skips (and logs); an append that fails is cut back with ``ftruncate``. When the file
would pass ``rewrite_at`` bytes (1 MiB) it is replaced by a file of just the new entry: a temp
file beside it, fsync, rename, fsync of the directory (``nsq_common.write_atomically``); a
crash there leaves the old journal whole plus a temp file, which ``load`` removes. The first
append of a ``CursorJournal`` is such a rewrite too, so it never appends after bytes it did
not write itself (a torn entry of a previous run could otherwise swallow the new ones).

**Bounds.** An entry keeps at most ``MAX_RANGES`` acknowledged-ahead ranges and
``MAX_EXTRAS`` extras, the lowest ones. That never loses a message, because a cursor loaded
from a journal is only ever *behind* the one in memory: an acknowledged range left out is
an acknowledgement forgotten, so after a crash those messages are delivered again (at least
once, as for any acknowledgement made after the last entry); an extra left out is a message
whose attempts count starts over and whose deferral is forgotten, so it is delivered again
at once. The lowest are kept because the cursor's mark-delete moves through them first; the
highest are the newest, likeliest to be acknowledged again soon anyway. (Apache Pulsar bounds
its persisted unacknowledged ranges the same way, ``maxUnackedRangesToPersist``.)

Errors: I/O failures raise ``OSError`` (``ENOSPC``: the journal on disk still holds its last
valid entry); a state that cannot be encoded (a negative offset, attempts over 65,535)
raises ``ValueError``. Blocking: call it from a worker thread; one thread at a time.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
import struct
import sys
import threading
import zlib
from array import array
from pathlib import Path

import attrs
from nsq_common import write_atomically

from .deletion import aside_name

__all__ = ["MAX_EXTRAS", "MAX_RANGES", "CursorJournal", "CursorState", "decode", "encode", "load"]

MAX_RANGES = MAX_EXTRAS = 10_000
#: A channel's journal in its topic's directory: ``<channel>.cursor``.
SUFFIX = ".cursor"

_ENTRY = struct.Struct(">II")  # payload length, crc32 of the payload
_MARK = struct.Struct(">QI")  # mark-delete, range count
_COUNT = struct.Struct(">I")
_RANGE = struct.Struct(">QQ")
_EXTRA = struct.Struct(">QHq")
_SMALLEST = _MARK.size + _COUNT.size  # a payload with no ranges and no extras
_NATIVE_IS_BIG = sys.byteorder == "big"

_logger = logging.getLogger(__name__)


@attrs.frozen
class CursorState:
    """One snapshot of a cursor: what a journal entry holds."""

    mark_delete: int
    #: acknowledged ahead of mark_delete: sorted, disjoint (start, end) ranges
    ranges: tuple[tuple[int, int], ...] = ()
    #: per message delivered and not done: (offset, attempts, due ns; 0 = not deferred)
    extras: tuple[tuple[int, int, int], ...] = ()


def encode(state: CursorState) -> bytes:
    """The payload of an entry for ``state`` (the lowest MAX_RANGES / MAX_EXTRAS kept).

    Raises:
        ValueError: a value out of its field's range.
    """
    ranges, extras = state.ranges, state.extras
    if len(ranges) > MAX_RANGES:
        ranges = tuple(sorted(ranges)[:MAX_RANGES])
    if len(extras) > MAX_EXTRAS:
        extras = tuple(sorted(extras)[:MAX_EXTRAS])
    try:
        flat = array("Q", itertools.chain.from_iterable(ranges))
        if not _NATIVE_IS_BIG:
            flat.byteswap()
        return b"".join([
            _MARK.pack(state.mark_delete, len(ranges)),
            flat.tobytes(),
            _COUNT.pack(len(extras)),
            *itertools.starmap(_EXTRA.pack, extras),
        ])
    except (struct.error, OverflowError, TypeError) as exc:
        raise ValueError(f"cannot encode cursor state: {exc}") from None


def decode(payload: bytes) -> CursorState:
    """The state an entry's payload holds.

    Raises:
        ValueError: the payload is not one (wrong length for its counts).
    """
    if len(payload) < _SMALLEST:
        raise ValueError(f"a cursor entry of {len(payload)} bytes is too short")
    mark_delete, nranges = _MARK.unpack_from(payload)
    p = _MARK.size + _RANGE.size * nranges
    if p + _COUNT.size > len(payload):
        raise ValueError(f"a cursor entry of {len(payload)} bytes cannot hold {nranges} ranges")
    (nextras,) = _COUNT.unpack_from(payload, p)
    q = p + _COUNT.size
    if q + _EXTRA.size * nextras != len(payload):
        raise ValueError(f"a cursor entry of {len(payload)} bytes does not hold {nranges} ranges "
                         f"and {nextras} extras")
    view = memoryview(payload)
    return CursorState(
        mark_delete,
        tuple(_RANGE.iter_unpack(view[_MARK.size : p])),
        tuple(_EXTRA.iter_unpack(view[q:])),
    )


def _entry(state: CursorState) -> bytes:
    payload = encode(state)
    return _ENTRY.pack(len(payload), zlib.crc32(payload)) + payload


def _temp_files(path: Path) -> list[Path]:
    """Temp files a rewrite of ``path`` left (``write_atomically``'s names)."""
    pattern = re.compile(re.escape(path.name) + r"\.\d+\.tmp")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    return [path.parent / name for name in names if pattern.fullmatch(name)]


def load(path: Path, *, logger: logging.Logger | None = None) -> CursorState | None:
    """The state of the last entry of the journal at ``path`` whose crc holds.

    None when there is no file or no valid entry. A torn last entry (a crash mid-append) is
    ignored, damaged entries after the one used are skipped, each with a warning. Temp files an
    interrupted rewrite left beside it are removed.

    Raises:
        OSError: the file exists but cannot be read.
    """
    path = Path(path)
    logger = logger or _logger
    for temp in _temp_files(path):
        logger.warning("cursor journal %s: removing %s, left by an interrupted rewrite", path, temp)
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    # The entries' lengths chain them; only the last ones' crcs are checked, newest first,
    # until one holds (a journal of 1 MiB of 24-byte entries loads in a few ms).
    starts: list[int] = []
    pos, size = 0, len(data)
    unpack = _ENTRY.unpack_from
    while size - pos >= _ENTRY.size:
        end = pos + _ENTRY.size + unpack(data, pos)[0]
        if end > size:
            break
        starts.append(pos)
        pos = end
    if pos < size:
        logger.warning("cursor journal %s: a torn last entry at position %d (%d bytes) ignored",
                       path, pos, size - pos)
    skipped: list[int] = []
    state = None
    for pos in reversed(starts):
        length, crc = unpack(data, pos)
        payload = data[pos + _ENTRY.size : pos + _ENTRY.size + length]
        if zlib.crc32(payload) == crc:
            try:
                state = decode(payload)
                break
            except ValueError:  # a crc that holds over bytes we never wrote (zeros do)
                pass
        skipped.append(pos)
    if skipped:
        logger.warning("cursor journal %s: %d damaged %s skipped (the last at position %d, "
                       "the first at %d)", path, len(skipped),
                       "entry" if len(skipped) == 1 else "entries", skipped[0], skipped[-1])
    return state


class CursorJournal:
    """Appends snapshots to one cursor journal (see the module docstring).

    ``load()`` it first: the first ``append()`` replaces the file with its one entry.
    """

    __slots__ = ("_aside", "_busy", "_fd", "_logger", "_size", "path", "rewrite_at")

    def __init__(self, path: Path, *, rewrite_at: int = 1 << 20,
                 logger: logging.Logger | None = None) -> None:
        self.path = Path(path)
        self.rewrite_at = rewrite_at
        self._logger = logger or _logger
        self._fd: int | None = None  # open on a file holding only whole entries of ours
        self._size = 0
        # Held by each append (in a worker thread): what ``detach`` waits for.
        self._busy = threading.Lock()
        self._aside = False  # detached: no more entries

    def __repr__(self) -> str:
        return f"<CursorJournal {self.path} {self._size} bytes>"

    @property
    def size(self) -> int:
        """Bytes of entries this journal wrote to the current file (0 before the first)."""
        return self._size

    def append(self, state: CursorState, *, sync: bool) -> None:
        """Persist ``state``: one entry, in one write; fdatasync'ed when ``sync``.

        Past ``rewrite_at`` bytes (and on the first append) the file is rewritten with just this
        entry instead, always synced; the first makes the directory (a topic's, with its first
        cursor). Once ``detach``ed, nothing is written.

        Raises:
            ValueError: the state cannot be encoded (nothing written).
            OSError: the write or sync failed; the file's last valid entry is the one before.
        """
        entry = _entry(state)
        with self._busy:
            if not self._aside:
                self._write_entry(entry, sync=sync)

    def _write_entry(self, entry: bytes, *, sync: bool) -> None:
        fd = self._fd
        if fd is None or self._size + len(entry) > self.rewrite_at:
            self._rewrite(entry)
            return
        before = self._size
        try:
            done = os.pwrite(fd, entry, before)
            while done < len(entry):  # a short write: go on from where it stopped
                n = os.pwrite(fd, memoryview(entry)[done:], before + done)
                if n <= 0:
                    raise OSError(errno.EIO, "write made no progress")
                done += n
            if sync:
                os.fdatasync(fd)
        except BaseException:
            # Cut the entry off (a failed fdatasync too: it was not promised, so it is not
            # left to count later). If even that fails, the next append rewrites the file.
            try:
                os.ftruncate(fd, before)
            except OSError as exc:
                self._logger.error("cursor journal %s: cannot cut back a failed write - %s",
                                   self.path, exc)
                self._close_fd()
            raise
        self._size = before + len(entry)

    def _rewrite(self, entry: bytes) -> None:
        # The old file descriptor goes first: after the rename it would point at the old file.
        self._close_fd()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, entry, mode=0o600, sync_directory=True)
        self._fd = os.open(self.path, os.O_WRONLY)
        self._size = len(entry)

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd, self._size = self._fd, None, 0
            os.close(fd)

    def close(self) -> None:
        self._close_fd()

    def detach(self) -> None:
        """The channel is deleted: the journal is renamed out of the way at once
        (``deletion.aside_name``), so that a channel made again with the same name starts
        from nothing, and takes no more entries: a write after this would make the journal's
        directory again, the topic's, which its deletion moves aside next. ``remove`` removes
        it. An append under way in a worker thread is waited for (blocking), so that it
        cannot make the journal again under its old name (a rewrite replaces the file by
        name)."""
        gone = self.path.with_name(aside_name(self.path.name))
        with self._busy:
            self._aside = True
            with contextlib.suppress(FileNotFoundError):
                self.path.rename(gone)
            self.path = gone

    def remove(self) -> None:
        """Close, and unlink the journal and any temp files beside it (missing is fine)."""
        self._close_fd()
        for path in [self.path, *_temp_files(self.path)]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
