"""The source's log of planned batches, kept under the query's checkpoint.

NSQ cannot replay: a message exists in one place at a time, and once FINished it is gone.
So before the stream reader tells Spark where a micro-batch ends, it writes the batch's
messages here; if the driver dies before Spark commits the batch, the restarted query asks
for the same offsets again and gets exactly the same messages from this log, while the
redeliveries of those messages by nsqd are recognised by id and held for that batch.

Layout, under ``<checkpointLocation>/sources/nsq/``::

    <end>.batch      one planned batch, named by its end offset (20 digits); JSON:
                     {"start": n, "end": m, "messages": [[nsqd, id, attempts, ts, body64], ...],
                      "parts": [[nsqd_http, nsqd, count], ...]}
    <end>.part-<i>   when executors consume over HTTP, part i of that batch as the executor
                     pulled it: {"messages": [...]}, written before it hands the rows to Spark
    committed        the end offset of the last batch Spark committed (text)

When the driver holds the consumers, a batch's messages are in its ``.batch`` file; when
executors pull them over HTTP, the ``.batch`` file holds the plan (how many from which nsqd)
and each executor logs what it got in a ``.part-<i>`` file beside it.

A batch file is written to a temporary name, fsynced, and renamed, so a crash leaves either
the whole batch or none. Files of committed batches are deleted, except the newest
``keep`` of them, whose ids catch late redeliveries after a restart.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import attrs

Key = tuple[str, str]  # (nsqd address, message id)


@attrs.frozen
class Entry:
    """One message as it was planned into a batch."""

    nsqd: str
    id: str
    attempts: int
    timestamp: int  # ns since the epoch
    body: bytes

    @property
    def key(self) -> Key:
        return (self.nsqd, self.id)


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
    entries: list[Entry]
    parts: list[Part] = attrs.field(factory=list)


def _encode_entries(entries: list[Entry]) -> list[list[object]]:
    return [[e.nsqd, e.id, e.attempts, e.timestamp, base64.b64encode(e.body).decode()]
            for e in entries]


def _decode_entries(messages: list[list[object]]) -> list[Entry]:
    return [Entry(str(nsqd), str(id), int(attempts), int(ts),  # type: ignore[call-overload]
                  base64.b64decode(str(body)))
            for nsqd, id, attempts, ts, body in messages]


def _encode(batch: Batch) -> bytes:
    return json.dumps({"start": batch.start, "end": batch.end,
                       "messages": _encode_entries(batch.entries),
                       "parts": [[p.nsqd_http, p.nsqd, p.count] for p in batch.parts]},
                      separators=(",", ":")).encode()


def _decode(data: bytes) -> Batch:
    obj = json.loads(data)
    return Batch(obj["start"], obj["end"], _decode_entries(obj["messages"]),
                 [Part(*p) for p in obj.get("parts", [])])


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


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
        _write_atomically(self._path(batch.end), _encode(batch))
        self._sync_directory()

    def _part_path(self, end: int, index: int) -> Path:
        return self.directory / f"{end:020d}.part-{index}"

    def write_part(self, end: int, index: int, entries: list[Entry]) -> None:
        data = json.dumps({"messages": _encode_entries(entries)}, separators=(",", ":"))
        _write_atomically(self._part_path(end, index), data.encode())
        self._sync_directory()

    def read_part(self, end: int, index: int) -> list[Entry] | None:
        try:
            return _decode_entries(json.loads(self._part_path(end, index).read_bytes())["messages"])
        except FileNotFoundError:
            return None

    def pulled(self, batch: Batch) -> list[tuple[Part, list[Entry]]]:
        """The parts of an HTTP batch that executors have pulled and logged so far."""
        found = []
        for index, part in enumerate(batch.parts):
            entries = self.read_part(batch.end, index)
            if entries is not None:
                found.append((part, entries))
        return found

    def read(self, end: int) -> Batch | None:
        try:
            return _decode(self._path(end).read_bytes())
        except FileNotFoundError:
            return None

    def ends(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob("*.batch"))

    def batches(self) -> Iterator[Batch]:
        for end in self.ends():
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
        temporary = self.directory / "committed.tmp"
        temporary.write_text(str(end))
        os.replace(temporary, self.directory / "committed")
        done = [e for e in self.ends() if e <= end]
        for old in done[:-self.keep] if self.keep else done:
            self._remove(old)

    def _remove(self, end: int) -> None:
        self._path(end).unlink(missing_ok=True)
        for part in self.directory.glob(f"{end:020d}.part-*"):
            part.unlink(missing_ok=True)

    def discard_after(self, end: int) -> list[Batch]:
        """Remove the batches planned past ``end`` (Spark never recorded their offsets: the
        driver died between our write and its own) and return them."""
        dropped = [b for b in self.batches() if b.end > end]
        for batch in dropped:
            self._remove(batch.end)
        return dropped

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
