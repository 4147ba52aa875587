"""The source's log of planned batches, kept under the query's checkpoint.

NSQ cannot replay: a message exists in one place at a time, and once FINished it is gone.
So before the stream reader tells Spark where a micro-batch ends, it writes the batch's
messages here; if the driver dies before Spark commits the batch, the restarted query asks
for the same offsets again and gets exactly the same messages from this log, while the
redeliveries of those messages by nsqd are recognised by id and held for that batch.

Files, under ``<checkpointLocation>/sources/nsq/``::

    <end>.batch      one planned batch, named by its end offset (20 digits): its start, end,
                     messages and, over HTTP, its parts
    <end>.part-<i>   when executors consume over HTTP, part i of that batch as the executor
                     pulled it, written before it hands the rows to Spark
    committed        the end offset of the last batch Spark committed (text)

When the driver holds the consumers, a batch's messages are in its ``.batch`` file; when
executors pull them over HTTP, the ``.batch`` file holds the plan (how many from which nsqd)
and each executor logs what it got in a ``.part-<i>`` file beside it.

A ``.batch`` and a ``.part-<i>`` file have one binary layout (format version 1)::

    b"NSQB"  version (1 byte: 1)  header length (4 bytes, big-endian)  header (JSON)
    then the n messages as columns, each little-endian, one after the other:
      timestamp   n x int64    ns since the epoch, when it was published
      attempts    n x uint16   deliveries so far, this one included
      nsqd        n x uint16   index into the header's "nsqd" list of TCP addresses
      size        n x uint32   length of its body
      id          n x 16 bytes NSQ's message id (ASCII hex)
      body        the bodies, one after the other (sum of the sizes)

    header: {"count": n, "nsqd": [address, ...]} and, in a .batch file, "start", "end" and
            "parts": [[nsqd_http, nsqd, count], ...]

The fields are NSQ's own message fields, laid out by column rather than by message so that
a batch goes into the partitions (:class:`Messages`, pickled as a few byte strings) and into
Arrow (:func:`.rows.messages_batch`, the columns become Arrow buffers) without any work per
message. The version byte tells a later layout from this one; files from before it (JSON,
``{"start": ...``) are still read.

A file is written to a temporary name, fsynced (once), and renamed, so a crash leaves either
the whole batch or none. Files of committed batches are deleted, except the newest ``keep``
of them, whose ids catch late redeliveries after a restart.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

import attrs
from nsq_common import write_atomically

from .errors import BatchLogError

Key = tuple[str, bytes]  # (nsqd address, message id)

ID_SIZE = 16
MAGIC = b"NSQB"
VERSION = 1
_PREFIX = struct.Struct(">4sBI")  # magic, version, header length
_BIG_ENDIAN = sys.byteorder == "big"

# array typecodes of the columns; "I" is 4 bytes on every platform CPython supports
_TIMESTAMP, _ATTEMPTS, _NSQD, _SIZE = "q", "H", "H", "I"
assert array(_SIZE).itemsize == 4


@attrs.frozen
class Entry:
    """One message, for building :class:`Messages` by hand and reading them one by one."""

    nsqd: str
    id: bytes
    attempts: int
    timestamp: int  # ns since the epoch
    body: bytes

    @property
    def key(self) -> Key:
        return (self.nsqd, self.id)


def _column(typecode: str, values: Iterable[int] = ()) -> array[int]:
    return array(typecode, values)


@attrs.frozen
class Messages:
    """Messages as columns: message i is ``ids[16i:16i+16]`` with ``attempts[i]``,
    ``timestamps[i]``, the nsqd ``addresses[nsqd[i]]`` and the i-th body of ``bodies``
    (``sizes[i]`` bytes). What a batch, a part file and a partition carry."""

    addresses: tuple[str, ...]
    nsqd: array[int]
    ids: bytes
    attempts: array[int]
    timestamps: array[int]
    sizes: array[int]
    bodies: bytes

    def __len__(self) -> int:
        return len(self.attempts)

    @classmethod
    def empty(cls) -> Messages:
        return cls((), _column(_NSQD), b"", _column(_ATTEMPTS), _column(_TIMESTAMP),
                   _column(_SIZE), b"")

    @classmethod
    def build(cls, addresses: str | Sequence[str], ids: Sequence[bytes], attempts: Sequence[int],
              timestamps: Sequence[int], bodies: Sequence[bytes]) -> Messages:
        """From one value per message in each column; ``addresses`` one per message too, or
        one nsqd address for all."""
        n = len(ids)
        if isinstance(addresses, str):
            table: tuple[str, ...] = (addresses,) if n else ()
        else:
            table = tuple(dict.fromkeys(addresses))
        if len(table) <= 1:
            nsqd = _column(_NSQD, [0]) * n
        else:
            index = {address: i for i, address in enumerate(table)}
            nsqd = _column(_NSQD, [index[a] for a in addresses])
        joined = b"".join(ids)
        if len(joined) != ID_SIZE * n:
            raise ValueError(f"message ids are {ID_SIZE} bytes")
        return cls(table, nsqd, joined, _column(_ATTEMPTS, attempts),
                   _column(_TIMESTAMP, timestamps), _column(_SIZE, map(len, bodies)),
                   b"".join(bodies))

    @classmethod
    def of_messages(cls, messages: Sequence[Any]) -> Messages:
        """From the client library's delivered messages (``nsq_client.Message``)."""
        return cls.build([m.nsqd_address for m in messages], [m.id for m in messages],
                         [m.attempts for m in messages], [m.timestamp for m in messages],
                         [m.body for m in messages])

    @classmethod
    def of_entries(cls, entries: Sequence[Entry]) -> Messages:
        return cls.build([e.nsqd for e in entries], [e.id for e in entries],
                         [e.attempts for e in entries], [e.timestamp for e in entries],
                         [e.body for e in entries])

    def id_list(self) -> list[bytes]:
        ids = self.ids
        return [ids[i:i + ID_SIZE] for i in range(0, len(ids), ID_SIZE)]

    def key_list(self) -> list[Key]:
        ids = self.id_list()
        if len(self.addresses) == 1:
            address = self.addresses[0]
            return [(address, id) for id in ids]
        addresses = self.addresses
        return [(addresses[k], id) for k, id in zip(self.nsqd, ids, strict=True)]

    def entries(self) -> list[Entry]:
        """One by one (slow: for tests and tools, not the read path)."""
        starts = accumulate(self.sizes, initial=0)
        bodies = self.bodies
        return [Entry(self.addresses[k], id, attempts, timestamp, bodies[s:s + size])
                for k, id, attempts, timestamp, s, size in zip(
                    self.nsqd, self.id_list(), self.attempts, self.timestamps, starts,
                    self.sizes, strict=False)]

    def split(self, count: int) -> list[Messages]:
        """In ``count`` runs of consecutive messages, as even as can be (none empty)."""
        n = len(self)
        count = max(1, min(count, n))
        offsets = list(accumulate(self.sizes, initial=0))
        bounds = [n * i // count for i in range(count + 1)]
        return [Messages(self.addresses, self.nsqd[a:b], self.ids[ID_SIZE * a:ID_SIZE * b],
                         self.attempts[a:b], self.timestamps[a:b], self.sizes[a:b],
                         self.bodies[offsets[a]:offsets[b]])
                for a, b in pairwise(bounds)]


@attrs.frozen
class Part:
    """What one executor is to pull over HTTP for a batch."""

    nsqd_http: str
    nsqd: str  # its TCP address: the nsqd column, and half of each message's key
    count: int


@attrs.frozen
class Batch:
    start: int
    end: int
    messages: Messages = attrs.field(factory=Messages.empty)
    parts: list[Part] = attrs.field(factory=list)


# -- the file layout -------------------------------------------------------------------------------

def _little(column: array[int]) -> bytes:
    if _BIG_ENDIAN:
        column = array(column.typecode, column)
        column.byteswap()
    return column.tobytes()


def encode(messages: Messages, **header: Any) -> bytes:
    """A file's bytes: ``header`` (JSON values) and the messages; see the module docstring."""
    head = json.dumps({**header, "count": len(messages), "nsqd": list(messages.addresses)},
                      separators=(",", ":")).encode()
    return b"".join([_PREFIX.pack(MAGIC, VERSION, len(head)), head,
                     _little(messages.timestamps), _little(messages.attempts),
                     _little(messages.nsqd), _little(messages.sizes), messages.ids,
                     messages.bodies])


def decode(data: bytes, name: str = "batch log file") -> tuple[dict[str, Any], Messages]:
    """The header and messages of a file's bytes (this layout, or the JSON before it)."""
    if data[:1] == b"{":
        return _decode_json(data)
    try:
        magic, version, length = _PREFIX.unpack_from(data)
    except struct.error:
        raise BatchLogError(f"{name}: truncated") from None
    if magic != MAGIC or version != VERSION:
        raise BatchLogError(f"{name}: not a batch log file of version {VERSION}")
    view = memoryview(data)
    at = _PREFIX.size + length
    header = json.loads(bytes(view[_PREFIX.size:at]))
    n = header["count"]
    columns: list[array[int]] = []
    for typecode in (_TIMESTAMP, _ATTEMPTS, _NSQD, _SIZE):
        column = array(typecode)
        end = at + n * column.itemsize
        column.frombytes(view[at:end])
        if _BIG_ENDIAN:
            column.byteswap()
        columns.append(column)
        at = end
    timestamps, attempts, nsqd, sizes = columns
    ids = bytes(view[at:at + ID_SIZE * n])
    at += ID_SIZE * n
    bodies = bytes(view[at:])
    if len(ids) != ID_SIZE * n or len(bodies) != sum(sizes):
        raise BatchLogError(f"{name}: truncated")
    return header, Messages(tuple(header["nsqd"]), nsqd, ids, attempts, timestamps, sizes,
                            bodies)


def _decode_json(data: bytes) -> tuple[dict[str, Any], Messages]:
    """Files written before the binary layout: {"start", "end", "messages": [[nsqd, id,
    attempts, timestamp, body in base64], ...], "parts"}."""
    header = json.loads(data)
    rows = header.pop("messages")
    return header, Messages.build([str(r[0]) for r in rows], [str(r[1]).encode() for r in rows],
                                  [int(r[2]) for r in rows], [int(r[3]) for r in rows],
                                  [base64.b64decode(str(r[4])) for r in rows])


class BatchLog:
    """Batches on disk under ``directory``; see the module docstring."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 10) -> None:
        self.directory = Path(directory)
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)

    @classmethod
    def under_checkpoint(cls, checkpoint: str) -> BatchLog:
        location = checkpoint.removeprefix("file://").removeprefix("file:")
        return cls(Path(location) / "sources" / "nsq")

    def _path(self, end: int) -> Path:
        return self.directory / f"{end:020d}.batch"

    def write(self, batch: Batch) -> None:
        data = encode(batch.messages, start=batch.start, end=batch.end,
                      parts=[[p.nsqd_http, p.nsqd, p.count] for p in batch.parts])
        write_atomically(self._path(batch.end), data, sync_directory=True)

    def _part_path(self, end: int, index: int) -> Path:
        return self.directory / f"{end:020d}.part-{index}"

    def write_part(self, end: int, index: int, messages: Messages) -> None:
        write_atomically(self._part_path(end, index), encode(messages), sync_directory=True)

    def read_part(self, end: int, index: int) -> Messages | None:
        path = self._part_path(end, index)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return decode(data, str(path))[1]

    def pulled(self, batch: Batch) -> list[tuple[Part, Messages]]:
        """The parts of an HTTP batch that executors have pulled and logged so far."""
        found = []
        for index, part in enumerate(batch.parts):
            messages = self.read_part(batch.end, index)
            if messages is not None:
                found.append((part, messages))
        return found

    def read(self, end: int) -> Batch | None:
        path = self._path(end)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        header, messages = decode(data, str(path))
        return Batch(header["start"], header["end"], messages,
                     [Part(*p) for p in header.get("parts", [])])

    def ends(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob("*.batch"))

    def batches(self, after: int = -1) -> Iterator[Batch]:
        """The logged batches (those ending past ``after``), oldest first."""
        for end in self.ends():
            if end > after:
                batch = self.read(end)
                if batch is not None:
                    yield batch

    def committed(self) -> int:
        try:
            return int((self.directory / "committed").read_text())
        except FileNotFoundError:
            return 0

    def commit(self, end: int) -> None:
        """Record that Spark committed every batch up to ``end``; forget old batches."""
        write_atomically(self.directory / "committed", b"%d" % end)
        done = [e for e in self.ends() if e <= end]
        for old in done[:-self.keep] if self.keep else done:
            self._remove(old)

    def _remove(self, end: int) -> None:
        self._path(end).unlink(missing_ok=True)
        for part in self.directory.glob(f"{end:020d}.part-*"):
            part.unlink(missing_ok=True)

    def discard_after(self, end: int) -> list[Batch]:
        """Remove the batches planned past ``end`` (Spark never recorded their offsets: the
        driver died between our write and its own) and return them. Reads only those."""
        dropped = list(self.batches(after=end))
        for batch in dropped:
            self._remove(batch.end)
        return dropped
