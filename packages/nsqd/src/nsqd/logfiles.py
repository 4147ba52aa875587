"""A topic log's files (docs/design/storage.md): its segments in the log's directory, oldest
first, the last one active (``segment``), and the ``offsets`` file, which reserves offsets
before they are given and keeps the topic's hold. ``topiclog`` decides what is written, read
and removed, and when; this module does it.

Every method is blocking. The log calls them in a worker thread, ``busy`` held
(``deletion.holding``), one at a time (under the log's I/O lock), but two: ``load``, at the
log's construction, which writes nothing (a full disk must not stop nsqd from starting:
segments are made on the first write); and ``detach`` (the topic deleted), on the Trio
thread, which renames the directory aside under ``busy`` and points every path at the new
name, so that no operation makes a file again under the old one, nor unlinks one there
(``deletion``).

Errors: writes and removals raise ``OSError``; damage found while loading or reading is logged
and worked around (what comes before it is kept), never raised.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import attrs
from nsq_common import write_atomically

from .deletion import aside_name
from .errors import SegmentError
from .gofiles import sync_path
from .segment import MAGIC, Segment

__all__ = ["MAX_OFFSET", "OFFSETS_FILE", "SEGMENT_SUFFIX", "LogFiles", "segment_name"]

OFFSETS_FILE = "offsets"
#: No log gives an offset past this (2^62: a million messages a second for 146,000 years);
#: a file claiming one is damaged, never believed (it would move the log's end).
MAX_OFFSET = 1 << 62
SEGMENT_SUFFIX = ".log"
_NO_LIMIT = (1 << 63) - 1  # a segment's offsets are bounded by nothing known


def segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


@attrs.define(eq=False)
class LogFiles:
    name: str
    directory: Path | None  # None: a log in memory only, with no files
    log: logging.Logger
    segments: list[Segment] = attrs.field(init=False, factory=list)
    #: The topic's hold the ``offsets`` file keeps (None: it keeps none), read by ``load``.
    saved_hold: int | None = attrs.field(init=False, default=None)
    #: Held through each file operation: what ``detach`` waits for.
    busy: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    #: Damage found in segments since removed: (batches, bytes).
    _gone_damage: tuple[int, int] = attrs.field(init=False, default=(0, 0))

    @property
    def end(self) -> int:
        """The offset after the last one the segments hold (0 with no segment)."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return max(last.end, last.base)

    @property
    def size(self) -> int:
        """Bytes of every segment."""
        return sum(s.size for s in self.segments)

    @property
    def damaged_batches(self) -> int:
        """Damaged batches found in the segments since the start (kept aside, see
        ``segment``), removed segments' included."""
        return self._gone_damage[0] + sum(s.damaged_batches for s in self.segments)

    @property
    def damaged_bytes(self) -> int:
        return self._gone_damage[1] + sum(s.damaged_bytes for s in self.segments)

    def _forget(self, segment: Segment) -> None:
        """``segment`` leaves the log: its damage stays counted."""
        batches, nbytes = self._gone_damage
        self._gone_damage = (batches + segment.damaged_batches, nbytes + segment.damaged_bytes)

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> int:
        """Open the segments a previous run left; the next offset the ``offsets`` file
        allows (0 when it is missing or unreadable; its hold into ``saved_hold``).

        A segment file with no batch, made by a roll that a crash cut short (no more than
        the magic, or a part of it), is removed (the last one is kept when whole: an empty
        active segment, named after the next offset)."""
        directory = self.directory
        if directory is None or not directory.is_dir():
            return 0
        next_offset, self.saved_hold = _read_offsets(directory / OFFSETS_FILE, self.log)
        paths = sorted(p for p in directory.iterdir() if p.name.endswith(SEGMENT_SUFFIX))
        paths = [p for i, p in enumerate(paths) if not self._unfinished(p, i == len(paths) - 1)]
        for i, path in enumerate(paths):
            # No offset of a segment reaches the next one's base, nor past the reservation.
            if i + 1 < len(paths):
                limit = _base_of(paths[i + 1])
            else:
                limit = next_offset if next_offset else _NO_LIMIT
            segment: Segment | None
            try:
                segment = Segment.open(path, active=i == len(paths) - 1, logger=self.log,
                                       limit=limit)
            except SegmentError as exc:
                segment = self._salvage(path, exc)
            except ValueError as exc:
                self.log.error("LOG(%s): not a segment, set aside: %s - %s", self.name, path,
                               exc)
                self._set_aside(path)
                continue
            if segment is not None:
                self.segments.append(segment)
        return next_offset

    def _unfinished(self, path: Path, last: bool) -> bool:
        """Whether ``path`` is a segment a roll left unfinished (removed, then: no batch in
        it was ever acknowledged)."""
        try:
            size = path.stat().st_size
            if size > len(MAGIC) or (size == len(MAGIC) and last):
                return False
            if not MAGIC.startswith(path.read_bytes()):
                return False  # not ours: set aside as damaged, below
            path.unlink()
            path.with_suffix(".index").unlink(missing_ok=True)
        except OSError as exc:
            self.log.warning("LOG(%s): cannot remove the empty segment %s - %s", self.name,
                             path, exc)
            return False
        self.log.info("LOG(%s): removed %s, a segment with no batch (%d bytes)", self.name,
                      path.name, size)
        return True

    def _salvage(self, path: Path, damage: SegmentError) -> Segment | None:
        """A segment whose magic is not ours: set aside (``.bad``) for an operator."""
        self.log.error("LOG(%s): %s; set aside as %s.bad", self.name, damage, path.name)
        self._set_aside(path)
        return None

    def _set_aside(self, path: Path) -> None:
        try:
            path.rename(path.with_name(path.name + ".bad"))
        except OSError as exc:
            self.log.error("LOG(%s): cannot rename %s - %s", self.name, path, exc)

    # -- writing -----------------------------------------------------------------------------
    def write(self, runs: list[tuple[int, Sequence[bytes]]], roll: bool, sync: bool) -> None:
        """``runs`` as one batch each into the active segment; a new one first when ``roll``
        (the old one synced and its index written); fdatasync'ed when ``sync``."""
        assert self.directory is not None  # (the moved one if ``detach`` came first)
        if roll:
            if self.segments:
                old = self.segments[-1]
                old.sync()
                old.write_index()
            self.directory.mkdir(parents=True, exist_ok=True)
            self.segments.append(Segment.create(self.directory, runs[0][0], logger=self.log))
        active = self.segments[-1]
        active.append(runs)  # type: ignore[arg-type]
        if sync:
            active.sync()

    def sync(self) -> None:
        """fdatasync the active segment."""
        self.segments[-1].sync()

    def write_offsets(self, next_offset: int, hold: int) -> None:
        """The ``offsets`` file: offsets below ``next_offset`` may be given; a topic without
        channels holds from ``hold`` for its first channel."""
        assert self.directory is not None
        _write_offsets(self.directory, next_offset, hold)

    # -- reading -----------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int) -> list[tuple[int, list[bytes]]]:
        """Runs from the first record at or after ``offset`` on disk."""
        for segment in self.segments:
            if segment.count and segment.end > offset:
                at = max(offset, segment.base)
                try:
                    found = segment.read(at, max_bytes)
                except SegmentError as exc:
                    self.log.error("LOG(%s): %s", self.name, exc)
                    found = _read_to_damage(segment, at)
                if found:
                    return found
        return []

    # -- removing ----------------------------------------------------------------------------
    def remove(self, segments: list[Segment]) -> None:
        """Unlink ``segments``, the oldest (they stay in ``segments`` until this is done, so
        that a ``detach`` meanwhile moves their paths too; ``drop_removed`` takes them out
        after, on the caller's thread). Damaged bytes kept aside (``.damaged-``) stay, for an
        operator."""
        for segment in segments:
            segment.close()
            segment.remove()
            self._forget(segment)

    def drop_removed(self, segments: list[Segment]) -> None:
        """``segments``, the oldest, given to ``remove`` (done, or failed part way: a start
        finds what is left), leave the list. Not blocking: on the Trio thread, where the list
        is read."""
        assert self.segments[:len(segments)] == segments
        del self.segments[:len(segments)]

    def take_segments(self) -> list[Segment]:
        """Every segment, taken out of the list (for ``delete``). Not blocking."""
        segments, self.segments = self.segments, []
        return segments

    def reset_active(self, base: int) -> None:
        """Cut the active segment to nothing and rename it after ``base`` (no data written:
        this must work on a full disk)."""
        active = self.segments[-1]
        path = active.path
        active.close()
        self._forget(active)
        os.truncate(path, len(MAGIC))
        new_path = path.with_name(segment_name(base))
        active.index_path.unlink(missing_ok=True)
        os.rename(path, new_path)
        self.segments[-1] = Segment.open(new_path, active=True, logger=self.log)

    # -- a follower's truncation ---------------------------------------------------------------
    def cut(self, offset: int) -> None:
        """Keep only the records below ``offset`` (KIP-101's truncation): segments named at
        or past it are unlinked, the one holding it cut (``Segment.cut_to``), and the
        directory fsynced, so that a start after a crash finds the log cut."""
        assert self.directory is not None
        while self.segments and self.segments[-1].base >= offset and len(self.segments) > 1:
            segment = self.segments.pop()
            segment.remove()
            self._forget(segment)
        if self.segments:
            last = self.segments[-1]
            if last.base >= offset:  # (the only one: emptied, named after the offset)
                self.reset_active(offset)
            else:
                last.cut_to(offset)
        if self.directory.is_dir():
            sync_path(self.directory)

    # -- the end -----------------------------------------------------------------------------
    def close(self) -> None:
        """Write each segment's index (a failure is logged) and close them."""
        for segment in self.segments:
            try:
                if segment.count:
                    segment.write_index()
            except OSError as exc:
                self.log.warning("LOG(%s): index of %s not written - %s", self.name,
                                 segment.path, exc)
            segment.close()

    def delete(self, segments: list[Segment]) -> None:
        """Close ``segments`` (the log's, taken from it) and remove the directory."""
        for segment in segments:
            segment.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def detach(self) -> None:
        """The topic is deleted: the directory is renamed aside at once
        (``deletion.aside_name``), on the Trio thread. A file operation under way in a worker
        thread (a segment made or removed, the offsets written, a read or sync) is waited
        for, blocking: each builds its paths from ``directory`` and the segments' paths, which
        this points at the moved directory under the same lock, so that none makes the
        directory or a file again under the old name (for a topic made again to load, or to
        lose to this one's removal), nor unlinks one there."""
        directory = self.directory
        if directory is None:
            return
        gone = directory.with_name(aside_name(directory.name))
        with self.busy:
            try:
                directory.rename(gone)
            except FileNotFoundError:
                pass  # nothing written yet: what comes later goes to the new name too
            except OSError as exc:
                self.log.error("LOG(%s): cannot move %s aside to delete it - %s", self.name,
                               directory, exc)
                return
            self.directory = gone
            for segment in self.segments:
                segment.path = gone / segment.path.name


def _read_to_damage(segment: Segment, offset: int) -> list[tuple[int, list[bytes]]]:
    """The whole batches from ``offset`` up to a damaged one (the rest of the segment is lost,
    as go-diskqueue loses the rest of a damaged file)."""
    found: list[tuple[int, list[bytes]]] = []
    while offset < segment.end:
        try:
            batch = segment.read(offset, 0)  # one batch
        except SegmentError:
            break
        if not batch:
            break
        found += batch
        first, records = batch[-1]
        offset = first + len(records)
    return found


def _base_of(path: Path) -> int:
    """The base offset a segment's name gives (``_NO_LIMIT`` for a name that is none)."""
    stem = path.name[: -len(SEGMENT_SUFFIX)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else _NO_LIMIT


def _read_offsets(path: Path, log: logging.Logger) -> tuple[int, int | None]:
    """The next offset the ``offsets`` file allows (0 when it is missing or unreadable) and
    the hold it keeps (None: none). A value past ``MAX_OFFSET`` is no offset nsqd gives: it
    is left out, with an ERROR (it must not move the log's end)."""
    try:
        doc = json.loads(path.read_bytes())
        value, hold = doc.get("next", 0), doc.get("hold")
    except (OSError, ValueError, AttributeError):
        return 0, None
    value = _offset(value, path, "next", log)
    hold = _offset(hold, path, "hold", log) if hold is not None else None
    return value or 0, hold


def _offset(value: object, path: Path, key: str, log: logging.Logger) -> int | None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return None
    if value > MAX_OFFSET:
        log.error("%s: %s %d is past the largest offset (%d), ignored", path, key, value,
                  MAX_OFFSET)
        return None
    return value


def _write_offsets(directory: Path, next_offset: int, hold: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / OFFSETS_FILE, b'{"next":%d,"hold":%d}\n' % (next_offset, hold),
                     mode=0o600)
