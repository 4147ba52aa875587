"""Bringing in the queues of Go's nsqd 1.3, or of an earlier version of this nsqd, at start
(docs/design/storage.md, "From and back to Go's nsqd").

Both keep Go's layout: a go-diskqueue per topic (``<topic>.diskqueue.*``: messages the topic
holds for its channels) and per channel (``<topic>:<channel>.diskqueue.*``), listed by
``nsqd.dat``. An earlier version of this nsqd also wrote records with our extension (an
expiry, a job's fields: ``nsqd.record`` reads them) and, at shutdown, its deferred messages
beside a queue with their due times (``<queue>.deferred.dat``, ``gofiles.read_deferred``).
For each topic of ``nsqd.dat`` that has such files:

- its queue and deferred file are appended to its log at offsets ``first`` (the log's end,
  or past it: what nsqd.dat and the cursors say was given) to ``end`` (``TopicLog.append_at``):
  every channel then gets them, as Go's topic pump would have delivered them;
- each channel's queue and deferred file go into that channel's own queue (its internal
  log ``<channel>#own`` in the topic's directory, ``privatelog``), attempts kept; deferred
  messages keep what is left of their delay (their due time is written in the record);
- so that they are seen: a channel without a cursor journal gets one at ``first``, a topic
  without channels holds from ``first`` (``hold`` in nsqd.dat) and a paused topic is paused
  at ``first`` (``paused_at``), as Go's topic keeps its queue while paused.

One topic at a time, all or nothing, with a marker, ``goimport.json`` in the data directory:

1. the marker, phase ``append``: ``first``, the last segment and its size of the log and
   of each own queue's log (or that it had none), the old queues' names; fsynced;
2. the records appended to the log and the own queues' logs, fsynced (``TopicLog.close``);
   the cursor journals and nsqd.dat written (fsynced);
3. the marker, phase ``remove``;
4. the old files removed, the directory fsynced; the marker removed.

A start that finds the marker first settles it: in phase ``append`` (killed in 1-2) it puts
the logs back as the marker says they were (segments made since removed, the last one cut
back to its size; a marker of the release before internal logs names its own queues'
go-diskqueue files instead: cut back, their metadata rewritten), then brings the topic in
again from the old files, which were not touched; in phase ``remove`` it only finishes step
4. So a crash at any point neither loses a message nor brings one in twice. A failure (a
full disk) undoes that topic's import and is logged; nsqd starts without it,
its old files stay, and the next start tries again. Cursor journals and nsqd.dat written
before an undo stay: they only say where a channel starts, never past a message.

Ephemeral topics and channels have no files. Files of queues nsqd.dat does not list are left
alone, with a warning (Go's nsqd ignores them too).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio
from nsq_common import write_atomically

from . import cursorfile, gofiles, metadata
from .errors import LogError, StartError
from .logfiles import SEGMENT_SUFFIX
from .privatelog import OWN, directory_name
from .record import decode_record, encode_record, is_plain, record_id
from .topiclog import TopicLog

if TYPE_CHECKING:
    from .clock import Clock
    from .metadata import TopicMeta
    from .options import Options

MARKER = "goimport.json"
TOPICS_DIR = "topics"  # as the broker lays them out
#: Message ids remembered per queue to bring a message in once when Go's files hold it twice.
IDS_REMEMBERED = 250_000  # about 40 MB of ids at most


@attrs.frozen
class _Plan:
    """What one topic brings in: its own queue (``topic_queue``) and its channels'."""

    topic: str
    topic_queue: bool
    channels: tuple[str, ...]

    @property
    def queues(self) -> list[str]:
        """The names of the old queues."""
        names = [gofiles.queue_name(self.topic, c) for c in self.channels]
        return [self.topic, *names] if self.topic_queue else names


class _Importer:
    def __init__(self, opts: Options, logger: logging.Logger, clock: Clock) -> None:
        self.opts = opts
        self.log = logger
        self.clock = clock
        self.data = Path(opts.data_path or ".")
        self.marker = self.data / MARKER
        self.nsqd_dat = metadata.metadata_path(opts.data_path)

    # -- the marker ------------------------------------------------------------------------
    def _write_marker(self, doc: dict[str, Any]) -> None:
        write_atomically(self.marker, json.dumps(doc, sort_keys=True).encode(), mode=0o600,
                         sync_directory=True)

    def _read_marker(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.marker.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StartError(f"failed to read {self.marker} - {exc}") from None
        if not isinstance(doc, dict) or doc.get("phase") not in ("append", "remove"):
            raise StartError(f"failed to read {self.marker} - not an import marker")
        return doc

    def _remove_marker(self) -> None:
        self.marker.unlink(missing_ok=True)
        gofiles.sync_path(self.data)

    # -- settling what a crash left --------------------------------------------------------
    def settle(self) -> bool:
        """Finish or undo an import a crash (or a failure) interrupted; False when the marker
        is still there (its old files could not all be removed: the next start goes on).

        Raises:
            StartError: the marker cannot be read, or an import cannot be undone (starting
                then would deliver what the next start would bring in again).
        """
        doc = self._read_marker()
        if doc is None:
            return True
        topic = str(doc.get("topic"))
        if doc["phase"] == "append":
            self.log.warning("GOIMPORT: TOPIC(%s): an import was interrupted: undoing it",
                             topic)
            try:
                self._undo(doc)
                self._remove_marker()
            except (OSError, KeyError, TypeError, ValueError) as exc:
                raise StartError(f"failed to undo the interrupted import of topic {topic} "
                                 f"({self.marker}) - {exc}") from None
            return True
        try:
            self._remove_old(doc)
            self._remove_marker()
        except (OSError, KeyError, TypeError, ValueError) as exc:
            self.log.error("GOIMPORT: TOPIC(%s): brought in, but its old files could not be "
                           "removed (the next start tries again; no other topic is brought in "
                           "until then) - %s", topic, exc)
            return False
        return True

    def _undo(self, doc: dict[str, Any]) -> None:
        """Put the log and the own queues back as the marker says they were."""
        directory = self.data / TOPICS_DIR / str(doc["topic"])
        _cut_back(directory, doc["segment"])
        for channel, last in doc.get("own_logs", {}).items():
            _cut_back(directory / directory_name(channel, OWN), last)
        # (a marker of the release before internal logs: its own queues' go-diskqueue files)
        for channel, before in doc.get("own", {}).items():
            _restore_queue(self.data, f"{doc['topic']}:{channel}{OWN}", before)
        gofiles.sync_path(self.data)

    def _remove_old(self, doc: dict[str, Any]) -> None:
        for name in doc["queues"]:
            for path in gofiles.queue_paths(self.data, str(name)):
                path.unlink(missing_ok=True)
        gofiles.sync_path(self.data)

    # -- bringing in -----------------------------------------------------------------------
    async def run(self) -> None:
        if not await trio.to_thread.run_sync(self.settle):
            return
        try:
            topics, _ = metadata.load(self.nsqd_dat)
        except ValueError:
            return  # the broker's load says so, and refuses to start
        plans = await trio.to_thread.run_sync(self._plans, topics)
        for i, meta in enumerate(topics):
            plan = plans.get(meta.name)
            if plan is None:
                continue
            try:
                topics[i] = await self._bring_in(topics, i, plan)
            except (OSError, LogError, ValueError) as exc:
                self.log.error("GOIMPORT: TOPIC(%s): not brought in, its files are left for "
                               "the next start - %s", meta.name, exc)
                if not await trio.to_thread.run_sync(self.settle):
                    return

    def _plans(self, topics: list[TopicMeta]) -> dict[str, _Plan]:
        """What each topic of nsqd.dat has to bring in; a warning for files of queues that
        nsqd.dat does not list."""
        present = {m.group("queue") for m in map(gofiles.QUEUE_FILE.fullmatch, os.listdir(self.data))
                   if m is not None}
        plans = {}
        for meta in topics:
            if meta.name.endswith("#ephemeral"):
                continue
            topic = meta.name in present
            present.discard(meta.name)
            channels = []
            for channel in meta.channels:
                name = gofiles.queue_name(meta.name, channel.name)
                if name in present:
                    channels.append(channel.name)
                    present.discard(name)
            if topic or channels:
                plans[meta.name] = _Plan(meta.name, topic, tuple(channels))
        for name in sorted(present):
            self.log.warning("GOIMPORT: %s: queue files of no topic or channel of %s: left "
                             "alone", name, self.nsqd_dat.name)
        return plans

    async def _bring_in(self, topics: list[TopicMeta], index: int, plan: _Plan) -> TopicMeta:
        meta = topics[index]
        directory = self.data / TOPICS_DIR / meta.name
        topic_log = self._open_log(meta.name, directory)
        first = max(topic_log.end, meta.next_offset,
                    *await trio.to_thread.run_sync(_cursor_positions, directory, meta))
        own_before = {channel: await trio.to_thread.run_sync(
            _last_segment, directory / directory_name(channel, OWN))
            for channel in plan.channels}
        doc: dict[str, Any] = {
            "topic": meta.name, "phase": "append", "first": first,
            "segment": await trio.to_thread.run_sync(_last_segment, directory),
            "own_logs": own_before, "queues": plan.queues,
        }
        await trio.to_thread.run_sync(self._write_marker, doc)
        in_log = _Ids()
        end = first
        try:
            if plan.topic_queue:
                end, deferred = await self._append_to_log(topic_log, meta.name, first, in_log)
                self.log.info("GOIMPORT: TOPIC(%s): %d messages (%d deferred) from %s.diskqueue "
                              "into its log, offsets %d-%d", meta.name, end - first, deferred,
                              meta.name, first, end)
        finally:
            await topic_log.close()
        twice: dict[str, list[int]] = {}
        for channel in plan.channels:
            count, deferred, twice[channel] = await self._put_in_own_queue(
                meta.name, channel, in_log)
            self.log.info("GOIMPORT: CHANNEL(%s:%s): %d messages (%d deferred) from "
                          "%s.diskqueue into its own queue", meta.name, channel, count,
                          deferred, gofiles.queue_name(meta.name, channel))
        updated = _metadata_after(meta, first, end)
        topics[index] = updated
        await trio.to_thread.run_sync(self._positions_after, directory, updated, first, twice,
                                      topics)
        doc["phase"] = "remove"
        await trio.to_thread.run_sync(self._write_marker, doc)
        await trio.to_thread.run_sync(self._remove_old, doc)
        await trio.to_thread.run_sync(self._remove_marker)
        return updated

    def _open_log(self, name: str, directory: Path) -> TopicLog:
        """A log to append to: a topic's, or a channel's own queue's."""
        o = self.opts
        # every append written through; fsynced when a segment rolls and at close
        return TopicLog(name, directory, mem_queue_size=0, max_bytes_per_file=o.max_bytes_per_file,
                        sync_every=1 << 62, sync_timeout=o.sync_timeout, clock=self.clock,
                        logger=self.log)

    async def _append_to_log(self, topic_log: TopicLog, topic: str, first: int, in_log: _Ids
                             ) -> tuple[int, int]:
        """The topic's queue and deferred file into its log at offsets from ``first`` (past
        its end: the offsets between are a gap); ``in_log``: the offset of each id appended
        (``_Ids``). The offset after the last, and how many were deferred."""
        at = first

        async def append(batch: list[bytes]) -> None:
            nonlocal at
            batch = [gofiles.checked_record(record) for record in batch]
            await topic_log.append_at(at, batch)
            for record in batch:
                in_log.add(record_id(record), at)
                at += 1

        await gofiles.each_batch(self.data, gofiles.queue_name(topic), self.log, append)
        deferred = await trio.to_thread.run_sync(
            _deferred_records, gofiles.deferred_path(self.data, topic), self.clock.wall_ns(),
            self.log)
        await topic_log.append_at(at, deferred)
        return at + len(deferred), len(deferred)

    async def _put_in_own_queue(self, topic: str, channel: str, in_log: _Ids
                                ) -> tuple[int, int, list[int]]:
        """A channel's queue and deferred file into its own queue's log. How many, how many
        deferred, and the offsets of the log that got the same message (from the topic's
        queue: a crash of Go's nsqd before it persisted its topic's read position): the
        channel passes over those, and a message found twice in its queue (a crash before
        the read position was persisted, and the message requeued since) comes once."""
        own = self._open_log(f"{topic}:{channel}{OWN}", self.data / TOPICS_DIR / topic
                             / directory_name(channel, OWN))
        count = 0
        seen = _Ids()
        twice: list[int] = []

        async def put(batch: list[bytes]) -> None:
            nonlocal count
            kept = []
            for record in batch:
                message_id = record_id(record)
                if message_id in seen:
                    continue
                seen.add(message_id, 0)
                offset = in_log.get(message_id)
                if offset is not None:
                    twice.append(offset)
                kept.append(gofiles.checked_record(record))
            if kept:
                await own.append(kept, plain=all(map(is_plain, kept)))
            count += len(kept)

        name = gofiles.queue_name(topic, channel)
        try:
            await gofiles.each_batch(self.data, name, self.log, put)
            deferred = await trio.to_thread.run_sync(
                _deferred_records, gofiles.deferred_path(self.data, name),
                self.clock.wall_ns(), self.log)
            if deferred:
                await own.append(deferred, plain=all(map(is_plain, deferred)))
        finally:
            await own.close()  # fsyncs, and writes the indexes
        return count + len(deferred), len(deferred), twice

    def _positions_after(self, directory: Path, meta: TopicMeta, first: int,
                         twice: dict[str, list[int]], topics: list[TopicMeta]) -> None:
        """Cursor journals: at ``first`` for channels without one, passing over the offsets
        of ``twice``; then nsqd.dat (all fsynced)."""
        for channel in meta.channels:
            path = directory / f"{channel.name}{cursorfile.SUFFIX}"
            state = cursorfile.load(path, logger=self.log)
            offsets = twice.get(channel.name, [])
            if state is not None and not offsets:
                continue
            if state is None:
                state = cursorfile.CursorState(first)
            state = attrs.evolve(state, ranges=_merged(state.ranges, offsets))
            directory.mkdir(parents=True, exist_ok=True)
            journal = cursorfile.CursorJournal(path)
            try:
                journal.append(state, sync=True)
            finally:
                journal.close()
        write_atomically(self.nsqd_dat, metadata.encode(topics), mode=0o600,
                         sync_directory=True)
        # the names of the files made (segments, own queues' logs, the topic's directory)
        # are durable too before the old files go
        own = [directory / directory_name(c.name, OWN) for c in meta.channels]
        for made in (*own, directory, directory.parent, self.data):
            if made.is_dir():
                gofiles.sync_path(made)


class _Ids:
    """Message ids brought in, each with an offset, remembered up to ``IDS_REMEMBERED`` (past
    that a message Go's files hold twice may come twice: at least once, as Go delivers it)."""

    def __init__(self) -> None:
        self._ids: dict[bytes, int] = {}

    def add(self, message_id: bytes, offset: int) -> None:
        if len(self._ids) < IDS_REMEMBERED:
            self._ids.setdefault(message_id, offset)

    def get(self, message_id: bytes) -> int | None:
        return self._ids.get(message_id)

    def __contains__(self, message_id: bytes) -> bool:
        return message_id in self._ids


def _merged(ranges: tuple[tuple[int, int], ...], offsets: list[int]
            ) -> tuple[tuple[int, int], ...]:
    """``ranges`` (sorted, disjoint, half-open) with ``offsets`` added."""
    spans = sorted([*ranges, *((o, o + 1) for o in offsets)])
    out: list[list[int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return tuple((start, end) for start, end in out)


async def settle(opts: Options, logger: logging.Logger, clock: Clock) -> bool:
    """Finish or undo an import a crash interrupted (``_Importer.settle``); False when its
    old files are still there (no import until a start manages).

    Raises:
        StartError: see ``_Importer.settle``.
    """
    return await trio.to_thread.run_sync(_Importer(opts, logger, clock).settle)


async def bring_in(opts: Options, logger: logging.Logger, clock: Clock) -> None:
    """Bring in every topic's and channel's Go-layout queue (see the module's docstring).

    Raises:
        StartError: an interrupted import can be neither finished nor undone.
    """
    await _Importer(opts, logger, clock).run()


def _metadata_after(meta: TopicMeta, first: int, end: int) -> TopicMeta:
    """nsqd.dat's entry once the topic's queue is in its log at [first, end)."""
    hold = meta.hold
    if not meta.channels:
        hold = first if hold is None else min(hold, first)
    paused_at = meta.paused_at
    if meta.paused:
        paused_at = first if paused_at is None else min(paused_at, first)
    return attrs.evolve(meta, next_offset=max(meta.next_offset, end), hold=hold,
                        paused_at=paused_at)


def _cursor_positions(directory: Path, meta: TopicMeta) -> list[int]:
    positions = []
    for channel in meta.channels:
        state = cursorfile.load(directory / f"{channel.name}{cursorfile.SUFFIX}")
        if state is not None:
            positions.append(state.mark_delete)
    return positions


def _last_segment(directory: Path) -> list[Any] | None:
    if not directory.is_dir():
        return None
    names = sorted(p.name for p in directory.iterdir() if p.name.endswith(SEGMENT_SUFFIX))
    if not names:
        return None
    return [names[-1], (directory / names[-1]).stat().st_size]


def _cut_back(directory: Path, last: list[Any] | None) -> None:
    """Put a log's segments back as ``_last_segment`` found them: those made since removed,
    the last one cut back to its size."""
    if not directory.is_dir():
        return
    for path in sorted(directory.iterdir()):
        if not path.name.endswith(SEGMENT_SUFFIX):
            continue
        if last is None or path.name > last[0]:
            path.unlink()
            path.with_suffix(".index").unlink(missing_ok=True)
        elif path.name == last[0] and path.stat().st_size > int(last[1]):
            os.truncate(path, int(last[1]))
            path.with_suffix(".index").unlink(missing_ok=True)
            gofiles.sync_path(path)
    gofiles.sync_path(directory)


def _restore_queue(data: Path, name: str, before: list[int] | None) -> None:
    """Put queue ``name``'s go-diskqueue files back as ``before`` (its depth, read and write
    positions, as a marker of the release before internal logs keeps them) says they were
    (``privatemigration`` then moves the queue into its log)."""
    if before is None:
        for _, path in gofiles.data_files(data, name):
            path.unlink()
        gofiles.meta_path(data, name).unlink(missing_ok=True)
        return
    depth, read_num, read_pos, write_num, write_pos = before
    for num, path in gofiles.data_files(data, name):
        if num > write_num:
            path.unlink()
        elif num == write_num and path.stat().st_size > write_pos:
            os.truncate(path, write_pos)
            gofiles.sync_path(path)
    write_atomically(gofiles.meta_path(data, name),
                     b"%d\n%d,%d\n%d,%d\n" % (depth, read_num, read_pos, write_num, write_pos),
                     mode=0o600)


def _deferred_records(path: Path, now: int, logger: logging.Logger) -> list[bytes]:
    """The records of a deferred side file; those not due yet at ``now`` (wall ns) with their
    due time in them (what is left of their delay runs on from the import)."""
    out = []
    for due, record in gofiles.read_deferred(path, logger):
        if due > now:
            msg = decode_record(record)
            msg.due = due
            record = encode_record(msg)
        out.append(record)
    return out
