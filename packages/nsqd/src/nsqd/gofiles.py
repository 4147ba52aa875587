"""The per-queue files of Go's nsqd 1.3 (and of earlier versions of this nsqd) in a data
directory: what ``goimport`` reads and ``goexport`` writes (docs/design/storage.md, "From and
back to Go's nsqd").

- A go-diskqueue ``<name>.diskqueue.*`` (the format is ``diskfiles``'): ``<topic>`` is a
  topic's queue, ``<topic>:<channel>`` a channel's. ``read_queue`` reads the records a queue
  has not handed out yet, in batches; ``queue_paths`` lists its files.
- ``<name>.deferred.dat``: the deferred messages an earlier version of this nsqd saved beside
  a queue at shutdown, each with its due time (``read_deferred``)::

      repeated: [ due: int64 BE, ns since the epoch ][ size: int32 BE ][ record ]

- Records: Go's are ours without the extension (``record``). ``checked_record`` makes sure a
  record read from Go's files is one ``record`` can decode; ``go_record`` turns any of ours
  into the plain record Go's nsqd reads.

Blocking file work: call it from a worker thread (``each_batch`` does, for a Trio task). Damage
is logged and passed over as go-diskqueue does (the rest of a damaged file is lost); I/O
errors raise ``OSError``.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path

import trio
from nsq_common import MESSAGE_HEADER

from .diskfiles import DiskFiles
from .record import EXTENDED, HEADER_SIZE, decode_record

#: Records of at most this many bytes are read (a bigger length is damage).
MAX_RECORD = 0x7FFFFFFF
#: One batch of ``read_queue``.
READ_BYTES = 1 << 20
READ_RECORDS = 4096
#: A file of a queue in Go's layout: its data, its metadata, or an earlier version's deferred
#: side file (never an own queue's nor dead letters': those names have a ``#``).
QUEUE_FILE = re.compile(r"(?P<queue>[^#]+?)\.(?:diskqueue\.(?:meta|\d{6,})|deferred)\.dat")
_DEFERRED_ENTRY = struct.Struct(">qi")
_SIZES = (8, 16)  # the extensions of a message: its expiry; its expiry and due time
_JOB_SIZE = 24  # a job's fixed fields (nsqd.record)


def is_queue_file(name: str) -> bool:
    return QUEUE_FILE.fullmatch(name) is not None


def queue_name(topic: str, channel: str | None = None) -> str:
    """The go-diskqueue name of a topic's queue or of one of its channels, as Go names them."""
    return topic if channel is None else f"{topic}:{channel}"


def _data_file_pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(name) + r"\.diskqueue\.(\d{6,})\.dat")


def data_files(data_path: Path, name: str) -> list[tuple[int, Path]]:
    """The data files of queue ``name``, by number."""
    pattern = _data_file_pattern(name)
    found = []
    for path in data_path.iterdir():
        match = pattern.fullmatch(path.name)
        if match is not None:
            found.append((int(match.group(1)), path))
    return sorted(found)


def meta_path(data_path: Path, name: str) -> Path:
    return data_path / f"{name}.diskqueue.meta.dat"


def deferred_path(data_path: Path, name: str) -> Path:
    return data_path / f"{name}.deferred.dat"


def queue_paths(data_path: Path, name: str) -> list[Path]:
    """Every file of queue ``name`` that exists: its data files, its metadata, its deferred
    side file (``.bad`` files are left for an operator, as go-diskqueue leaves them)."""
    paths = [path for _, path in data_files(data_path, name)]
    paths += [p for p in (meta_path(data_path, name), deferred_path(data_path, name))
              if p.exists()]
    return paths


def read_queue(data_path: Path, name: str, logger: logging.Logger
               ) -> Generator[list[bytes], None, None]:
    """The records of queue ``name`` not handed out yet, in batches (never an empty one): from
    its metadata's read position to its write position, and after a crash those written
    past the write position too (``DiskFiles.load`` finds them, as go-diskqueue does). A
    queue with data files and no metadata (a crash before its first sync, where Go's nsqd
    starts it empty and overwrites them) is read whole, with a warning."""
    files = DiskFiles(name, data_path, 1 << 62, HEADER_SIZE, MAX_RECORD, logger)
    loaded = files.load()
    if loaded is not None:
        position, write = loaded.read, loaded.write
    else:
        numbers = [num for num, _ in data_files(data_path, name)]
        if not numbers:
            return
        logger.warning("GOIMPORT: %s has data files and no metadata: reading them whole",
                       name)
        position, write = (numbers[0], 0), (numbers[-1] + 1, 0)
    num, pos = position
    try:
        while (num, pos) < write:
            end = write[1] if num == write[0] else None
            out = files.read(num, pos, end, READ_BYTES, READ_RECORDS)
            if out.records:
                yield [payload for payload, _ in out.records]
            pos = out.pos
            if out.error is not None:
                logger.warning("GOIMPORT: %s: %s at %d: the rest of that file is skipped - %s",
                               name, files.data_file(num).name, pos, out.error)
                num, pos = num + 1, 0
            elif out.finished:
                num, pos = num + 1, 0
            elif end is not None and pos >= end:
                break
    finally:
        files.close_files()


async def each_batch(data_path: Path, name: str, logger: logging.Logger,
                     handle: Callable[[list[bytes]], Awaitable[None]]) -> None:
    """``read_queue``'s batches, each read in a worker thread (for a Trio task) and handed to
    ``handle``; the files are closed whatever happens."""
    reader = read_queue(data_path, name, logger)
    try:
        while (batch := await trio.to_thread.run_sync(next, reader, None)) is not None:
            await handle(batch)
    finally:
        reader.close()


def read_deferred(path: Path, logger: logging.Logger) -> list[tuple[int, bytes]]:
    """The ``(due ns, record)`` entries of a deferred side file (an earlier version's); a
    damaged end is logged and what came before it kept."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    pos = 0
    while len(data) - pos >= _DEFERRED_ENTRY.size:
        due, size = _DEFERRED_ENTRY.unpack_from(data, pos)
        start = pos + _DEFERRED_ENTRY.size
        if size < HEADER_SIZE or start + size > len(data):
            break
        entries.append((due, checked_record(data[start:start + size])))
        pos = start + size
    if pos != len(data):
        logger.warning("GOIMPORT: %s: %d bytes at the end are not a whole entry: skipped",
                       path.name, len(data) - pos)
    return entries


def checked_record(record: bytes) -> bytes:
    """``record`` as read from Go's files, made safe to decode: a record with the top bit of
    its attempts set whose extension does not hold together is Go's (a message delivered
    32,768 times or more), kept plain with its attempts capped."""
    if not record[8] & 0x80 or _extension_holds(record):
        return record
    timestamp, _ = MESSAGE_HEADER.unpack_from(record)
    return MESSAGE_HEADER.pack(timestamp, EXTENDED - 1) + record[10:]


def _extension_holds(record: bytes) -> bool:
    if len(record) <= HEADER_SIZE:
        return False
    size = record[HEADER_SIZE]
    if size in _SIZES:
        return len(record) >= HEADER_SIZE + 1 + size
    if size < _JOB_SIZE or len(record) < HEADER_SIZE + 1 + size:
        return False
    attributes = int.from_bytes(record[HEADER_SIZE + 1 + 22:HEADER_SIZE + 1 + 24], "big")
    return len(record) >= HEADER_SIZE + 1 + size + max(attributes - 1, 0)


def go_record(record: bytes, attempts: int = 0) -> bytes:
    """The plain record Go's nsqd reads for ``record`` (our extension, and with it an expiry,
    a due time and a job's fields, dropped), with at least ``attempts``."""
    if not record[8] & 0x80 and not attempts:
        return record
    msg = decode_record(record)
    return (MESSAGE_HEADER.pack(msg.timestamp, min(max(msg.attempts, attempts), 0xFFFF))
            + msg.id + msg.body)


def sync_path(path: Path) -> None:
    """fsync a file, or a directory (its entries): the moves of Go's files and of what
    replaces them (goimport, privatemigration) are durable step by step."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
