"""``nsqd --export-go-data-path DIR``: a data directory Go's nsqd 1.3 starts on and delivers
every message from that this nsqd's channels have not finished (docs/design/storage.md, "From
and back to Go's nsqd"; docs/operations.md says how to use it).

Offline: ``--data-path`` is the source (locked as nsqd locks it, so it must not be running),
``DIR`` must be empty or missing. The source is read, never changed (but for what any start
of nsqd does to it: a torn batch cut off, segment indexes written, the channels' private
queues of the release before internal logs moved into them, ``privatemigration``). ``DIR`` gets, in
go-diskqueue's format (written by ``diskfiles``, our own go-diskqueue writer):

- ``<topic>:<channel>.diskqueue.*`` for each channel of ``nsqd.dat``: its own queue (messages
  brought from Go, respawned dead letters), then the topic's log from the channel's cursor
  (mark-delete to where the channel may read: the log's end, or where its topic was paused)
  without what it acknowledged ahead; in flight, requeued and deferred messages included,
  deferred ones as ready (Go has no due time on disk);
- ``<topic>.diskqueue.*`` for what the topic holds for its channels: without channels, its
  hold to the end; paused, from where it was paused to the end (Go's topic keeps those in its
  queue while paused);
- ``<topic>.<channel>.dead.diskqueue.*``: a channel's dead letters, as a topic of their own
  without channels (Go's nsqd has no dead letters; a channel would also get every new message
  of the topic), when that name is a valid topic name of nobody else; else they are left out
  with a warning (they stay in the source);
- ``nsqd.dat`` in Go's layout: topics, channels, paused (no keys of ours).

Records are written as Go's plain records (``gofiles.go_record``): an expiry, a due time and a
job's fields are dropped, attempts kept (the larger of the record's and the cursor's). A
message whose expiry has passed, or an lmstfy job deleted while waiting, is left out.

Errors: ``ExportError`` (a non-empty ``DIR``, data left in Go's layout not brought in yet),
``OSError``, ``ValueError`` (nsqd.dat unreadable); ``__main__`` prints each as one FATAL line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio
from nsq_common import is_valid_name, write_atomically

from . import cursorfile, gofiles, metadata
from .channel import TOMBSTONE
from .clock import Clock, SystemClock
from .cursor import Cursor
from .diskfiles import DiskFiles
from .errors import ExportError, NsqdError
from .privatelog import DEAD, OWN, directory_name, each_unread
from .privatemigration import is_private_queue_file, migrate
from .readcache import READ_BYTES
from .record import HEADER_SIZE, decode_record, is_plain
from .topiclog import TopicLog

if TYPE_CHECKING:
    from .metadata import TopicMeta
    from .options import Options

TOPICS_DIR = "topics"  # as the broker lays them out
#: Records per read of the log.
READ_RECORDS = 4096
#: Where batches of Go's records go.
Sink = Callable[[list[bytes]], Awaitable[None]]


@attrs.define
class Tally:
    """What went into one Go queue, and what was left out."""

    written: int = 0
    expired: int = 0
    deleted: int = 0


class SourceTopic:
    """One topic of the source, opened for reading: its log, and its channels' cursors as a
    start of nsqd would load them."""

    def __init__(self, source: Path, meta: TopicMeta, logger: logging.Logger, clock: Clock
                 ) -> None:
        self.source = source
        self.meta = meta
        self.log = logger
        self.clock = clock
        self.directory = directory = source / TOPICS_DIR / meta.name
        self.topic_log = TopicLog(meta.name, directory, mem_queue_size=0, clock=clock,
                                  logger=logger)
        self.topic_log.resume_at(meta.next_offset)
        states = {c.name: cursorfile.load(directory / f"{c.name}{cursorfile.SUFFIX}",
                                          logger=logger) for c in meta.channels}
        for state in states.values():
            if state is not None:
                self.topic_log.resume_at(state.mark_delete)
        self.cursors: dict[str, Cursor] = {}
        for name, state in states.items():
            # a channel without a journal starts where a start of nsqd puts it: the end
            cursor = Cursor(self.topic_log.end)
            if state is not None:
                cursor.restore(state, self.topic_log.start)
            self.cursors[name] = cursor

    @property
    def visible_end(self) -> int:
        """How far its channels may read: the log's end, or where the topic was paused."""
        end = self.topic_log.end
        if self.meta.paused and self.meta.paused_at is not None:
            return min(max(self.meta.paused_at, self.topic_log.start), end)
        return end

    def held_from(self) -> int | None:
        """Where what the topic holds for its channels starts (None: it holds nothing)."""
        log = self.topic_log
        if not self.meta.channels:
            return min(max(metadata.hold_of(self.meta, log.saved_hold), log.start), log.end)
        return self.visible_end if self.meta.paused else None

    async def channel_records(self, channel: str, tally: Tally, sink: Sink) -> None:
        """What ``channel`` has not finished, as Go's records, in batches to ``sink``: its
        own queue, then the log."""

        async def own(batch: list[bytes]) -> None:
            await sink(_go_records(((record, 0) for record in batch), tally,
                                   self.clock.wall_ns()))

        await each_unread(self.directory / directory_name(channel, OWN),
                          f"{self.meta.name}:{channel}{OWN}", self.log, own, self.clock)
        cursor = self.cursors[channel]
        await self._log_records(cursor.mark_delete, self.visible_end, cursor, tally, sink)

    async def held_records(self, tally: Tally, sink: Sink) -> None:
        """What the topic holds for its channels (``held_from`` to the end), as Go's records,
        in batches to ``sink``."""
        start = self.held_from()
        if start is not None:
            await self._log_records(start, self.topic_log.end, None, tally, sink)

    async def _log_records(self, start: int, stop: int, cursor: Cursor | None, tally: Tally,
                           sink: Sink) -> None:
        offset = start
        while offset < stop:
            runs = await self.topic_log.read_at(offset, READ_RECORDS, READ_BYTES)
            if not runs:
                return
            taken: list[tuple[bytes, int]] = []
            for first, records, _ in runs:
                for i, record in enumerate(records):
                    at = first + i
                    if at >= stop:
                        break
                    attempts = 0
                    if cursor is not None:
                        if cursor.is_done(at):
                            continue
                        extra = cursor.extras.get(at)
                        if extra is not None:
                            if extra[1] == TOMBSTONE:
                                tally.deleted += 1
                                continue
                            attempts = extra[0]
                    taken.append((record, attempts))
                offset = first + len(records)
            await sink(_go_records(taken, tally, self.clock.wall_ns()))

    async def close(self) -> None:
        await self.topic_log.close()


def _go_records(records: Iterable[tuple[bytes, int]], tally: Tally, now: int) -> list[bytes]:
    """Go's records of ``(record, attempts at least)``, without those past their expiry at
    ``now`` (wall ns)."""
    out = []
    for record, attempts in records:
        if not is_plain(record):
            msg = decode_record(record)
            if msg.expires and msg.expires <= now:
                tally.expired += 1
                continue
        out.append(gofiles.go_record(record, attempts))
    tally.written += len(out)
    return out


class GoQueueWriter:
    """Writes one go-diskqueue in ``directory``, batch by batch; ``finish`` fsyncs it and
    persists its metadata (depth, read position 0,0, write position)."""

    def __init__(self, directory: Path, name: str, max_bytes_per_file: int,
                 logger: logging.Logger) -> None:
        self.name = name
        self._files = DiskFiles(name, directory, max_bytes_per_file, HEADER_SIZE,
                                gofiles.MAX_RECORD, logger)
        self._write = (0, 0)
        self.depth = 0

    def put(self, records: list[bytes]) -> None:
        out = self._files.write(records, self._write, self.depth, (0, 0), False)
        if out.error is not None:
            raise OSError(f"failed to write {self.name}.diskqueue - {out.error}")
        self._write = out.write
        self.depth += out.written

    def finish(self) -> None:
        try:
            error = self._files.sync(self.depth, (0, 0), self._write, [])
        finally:
            self._files.close_files()
        if error is not None:
            raise OSError(f"failed to sync {self.name}.diskqueue - {error}")


def dead_letter_topic(topic: str, channel: str) -> str:
    """The topic a channel's dead letters are exported as."""
    return f"{topic}.{channel}.dead"


class Exporter:
    def __init__(self, opts: Options, target: Path, logger: logging.Logger, clock: Clock
                 ) -> None:
        self.opts = opts
        self.clock = clock
        self.source = Path(opts.data_path or ".")
        self.target = target
        self.log = logger

    def check(self) -> None:
        """Raises ``ExportError`` when the export cannot start (see the module's docstring)."""
        if self.target.exists() and (not self.target.is_dir() or any(self.target.iterdir())):
            raise ExportError(f"--export-go-data-path {self.target} is not an empty directory")
        from .goimport import MARKER

        names = os.listdir(self.source)
        if MARKER in names or any(gofiles.is_queue_file(name) for name in names):
            raise ExportError(f"{self.source} holds queues in Go's layout not brought in yet: "
                              "start nsqd on it once, then export")

    async def run(self) -> None:
        await trio.to_thread.run_sync(self.check)
        files = await trio.to_thread.run_sync(os.listdir, self.source)
        if any(map(is_private_queue_file, files)):  # as a start would, first
            await migrate(self.opts, self.log, self.clock)
        self.target.mkdir(parents=True, exist_ok=True)
        topics, warnings = metadata.load(metadata.metadata_path(self.opts.data_path))
        for warning in warnings:
            self.log.warning("%s", warning)
        names = {t.name for t in topics}
        exported: list[TopicMeta] = []
        dead_topics: list[TopicMeta] = []
        for meta in topics:
            topic = SourceTopic(self.source, meta, self.log, self.clock)
            try:
                for channel in meta.channels:
                    tally = Tally()
                    await self._write(gofiles.queue_name(meta.name, channel.name), partial(
                        topic.channel_records, channel.name, tally), tally)
                    dead = await self._dead_letters(meta.name, channel.name, names)
                    if dead is not None:
                        dead_topics.append(dead)
                if topic.held_from() is not None:
                    tally = Tally()
                    await self._write(meta.name, partial(topic.held_records, tally), tally)
            finally:
                await topic.close()
            exported.append(metadata.TopicMeta(meta.name, meta.paused, tuple(
                metadata.ChannelMeta(c.name, c.paused) for c in meta.channels)))
        data = metadata.encode(exported + dead_topics)
        await trio.to_thread.run_sync(lambda: write_atomically(
            metadata.metadata_path(str(self.target)), data, mode=0o600, sync_directory=True))
        self.log.info("GOEXPORT: %s written: %d topics (%d of dead letters)", self.target,
                      len(exported) + len(dead_topics), len(dead_topics))

    async def _write(self, name: str, produce: Callable[[Sink], Awaitable[None]], tally: Tally
                     ) -> None:
        """Queue ``name`` of the batches ``produce`` hands its sink (no files when there is
        nothing to write)."""
        writer: GoQueueWriter | None = None

        async def sink(batch: list[bytes]) -> None:
            nonlocal writer
            if not batch:
                return
            if writer is None:
                writer = GoQueueWriter(self.target, name, self.opts.max_bytes_per_file,
                                       self.log)
            await trio.to_thread.run_sync(writer.put, batch)

        await produce(sink)
        if writer is not None:
            await trio.to_thread.run_sync(writer.finish)
        left = [f"{n} {what}" for n, what in ((tally.expired, "expired"),
                                                (tally.deleted, "deleted")) if n]
        self.log.info("GOEXPORT: %s.diskqueue: %d messages%s", name, tally.written,
                      f" ({', '.join(left)}: left out)" if left else "")

    async def _dead_letters(self, topic: str, channel: str, names: set[str]
                            ) -> TopicMeta | None:
        """A channel's dead letters as a topic of their own (see the module's docstring)."""
        name = dead_letter_topic(topic, channel)
        queue = f"{topic}:{channel}{DEAD}"
        directory = self.source / TOPICS_DIR / topic / directory_name(channel, DEAD)

        async def counted(batch: list[bytes]) -> None:
            pass

        if not await trio.to_thread.run_sync(directory.is_dir):
            return None
        if not is_valid_name(name) or name in names:
            count = await each_unread(directory, queue, self.log, counted, self.clock)
            if count:
                self.log.warning("GOEXPORT: CHANNEL(%s:%s): %d dead letters left out: %s is "
                                 "not a topic name of their own (they stay in %s)", topic,
                                 channel, count, name, self.source)
            return None
        tally = Tally()

        async def produce(sink: Sink) -> None:
            async def converted(batch: list[bytes]) -> None:
                await sink(_go_records(((record, 0) for record in batch), tally,
                                       self.clock.wall_ns()))

            await each_unread(directory, queue, self.log, converted, self.clock)

        await self._write(name, produce, tally)
        if not tally.written:
            return None
        names.add(name)
        return metadata.TopicMeta(name)


async def export(opts: Options, target: str, logger: logging.Logger, clock: Clock) -> None:
    """Write the Go data directory (see the module's docstring).

    Raises:
        ExportError, OSError, ValueError: see the module's docstring.
    """
    from .app import lock_data_path  # the source must not be in use

    lock = lock_data_path(opts.data_path)
    try:
        await Exporter(opts, Path(target), logger, clock).run()
    finally:
        os.close(lock)


def main(opts: Options) -> int:
    """``nsqd --export-go-data-path``: the export, logged as nsqd logs; its exit status."""
    from nsq_serving import start_logging

    log = start_logging("nsqd", opts.log_prefix, opts.log_level)
    try:
        trio.run(export, opts, opts.export_go_data_path, log, SystemClock())
    except (NsqdError, OSError, ValueError) as exc:
        log.critical("%s", exc)
        return 1
    return 0
