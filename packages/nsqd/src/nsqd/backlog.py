"""The messages waiting in a topic or a channel: in memory up to --mem-queue-size, on disk
beyond it, as nsqd's memoryMsgChan + backend queue.

New messages fill memory first and overflow to the disk queue, whose write is awaited, so a
publisher is answered only once its message is stored. Messages coming back (REQ, timeouts, a
consumer that went away, deferred ones falling due) always go to memory: they were in memory
already, and refusing them would lose them. Deferred messages also stay in memory (their due
time is not part of the disk format); a clean shutdown saves them apart, with their delay.

A message published by PUB or MPUB, over TCP or HTTP (no deferral, expiry or job fields),
waits as its record, the bytes the disk queue would write (``new_records``): one ``bytes``
object of 26 + body bytes, about 170 bytes of memory for a 100-byte body where a
``QueuedMessage`` with its id and body took 332, and nothing to encode when it overflows to
disk. A topic hands the same immutable records to every channel, and a channel delivers them
as they are (``take_for_delivery``; see ``inflight`` and ``output.record_frames``), as it does
plain records read from disk. Messages coming back, deferred ones, jobs and messages with an
expiry stay ``QueuedMessage`` objects in the same queue.

Ephemeral topics and channels have no disk queue: past the memory limit their messages are
dropped, as in NSQ.

With an explicit-commit disk queue (nsqd's ``--sync-every 1`` mode) a record read from disk
stays committed-unread on disk until its message is done with (``ack``: FIN, or stored
elsewhere by the topic), so that even a ``kill -9`` never loses a message in flight: the
queue's persisted read position only moves past a record once every record before it is
acknowledged too. Messages may be acknowledged in any order; the position advances over the
longest acknowledged prefix.
"""

from __future__ import annotations

import itertools
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import trio
from nsq_common import MESSAGE_HEADER  # the record starts as a message frame's payload

from .diskqueue import DiskQueue, Pos
from .message import Job, QueuedMessage

_EXPIRES = struct.Struct(">Bq")
_JOB = struct.Struct(">qHIqH")  # expires, tries, delay, due, attributes' length
#: In the attempts field of a record: an extension (our job fields) follows the id.
EXTENDED = 0x8000
#: Most bytes an extension adds to a record: its length byte, the fixed fields, and a job's
#: attributes (lmstfy allows 16 of 32-byte keys and 128-byte values).
MAX_EXTENSION = 1 + _JOB.size + 8192

#: A waiting message: its record (as ``new_records`` makes it, or read from disk), or the
#: message itself.
Waiting = QueuedMessage | bytes
_W = TypeVar("_W", QueuedMessage, bytes)


class Records(list[bytes]):
    """New messages as their plain records (``new_records``), told apart from a list of
    ``QueuedMessage`` by its type."""

    __slots__ = ()


#: Two hex digits of each byte value: the last two digits of an id.
_HEX_BYTE = [b"%02x" % i for i in range(256)]


def new_records(bodies: list[bytes], first_id: int, timestamp: int) -> Records:
    """The records of new messages for ``bodies`` (attempts 0, ids ``first_id`` and up in
    hex, one timestamp).

    Each record is one bytes formatting whose literal holds the header and the id's first 14
    hex digits (the same for up to 256 consecutive ids), its last two from a table: 115 ns a
    message, where formatting the whole id took 230 and a ``QueuedMessage`` and its id 490
    (batches of 200, in process).
    """
    head = MESSAGE_HEADER.pack(timestamp, 0).replace(b"%", b"%%")
    out = Records()
    next_id, done, total = first_id, 0, len(bodies)
    while done < total:
        low = next_id & 0xFF
        n = min(total - done, 256 - low)
        fmt = head + b"%014x%%b%%b" % (next_id >> 8)
        out += [fmt % pair for pair in zip(_HEX_BYTE[low:low + n], bodies[done:done + n],
                                           strict=True)]
        next_id += n
        done += n
    return out


def encode_record(msg: QueuedMessage) -> bytes:
    """The disk record: NSQ's 26-byte message header and the body, as Go's nsqd writes it.

    A message with an expiry, or a job (beyond NSQ), is written with the top bit of the
    attempts field set and, after the id, an extension: one byte giving the length of its fixed
    fields, the fields, then for a job its attributes. A message's only field is its expiry
    (8 bytes, ns since the epoch); a job's are its expiry, tries, delay, due time and the
    length of its attributes. Only such records differ from Go's format, so a data directory
    that never held one stays readable by Go's nsqd.
    """
    if msg.is_job:
        return _encode_job(msg)  # type: ignore[arg-type]
    if msg.expires:
        return (MESSAGE_HEADER.pack(msg.timestamp, min(msg.attempts, EXTENDED - 1) | EXTENDED) + msg.id
                + _EXPIRES.pack(8, msg.expires) + msg.body)
    return MESSAGE_HEADER.pack(msg.timestamp, msg.attempts) + msg.id + msg.body


def encode_records(msgs: list[QueuedMessage]) -> list[bytes]:
    """``encode_record`` of each message, Go's plain records packed inline: one Python call
    less per message written to disk (190 ns a message where 275, batches of 200, in
    process)."""
    pack = MESSAGE_HEADER.pack
    return [encode_record(m) if m.is_job or m.expires else pack(m.timestamp, m.attempts) + m.id + m.body
            for m in msgs]


def _encode_job(job: Job) -> bytes:
    attributes = job.attributes
    extra = b"" if attributes is None else attributes
    # a job without attributes and one with none: the length is 0 or 1 + the JSON's
    fields = _JOB.pack(job.expires, job.tries, job.delay, job.due,
                       0 if attributes is None else len(extra) + 1)
    return (MESSAGE_HEADER.pack(job.timestamp, min(job.attempts, EXTENDED - 1) | EXTENDED) + job.id
            + bytes((len(fields),)) + fields + extra + job.body)


def decode_record(record: bytes) -> QueuedMessage:
    timestamp, attempts = MESSAGE_HEADER.unpack_from(record)
    if attempts & EXTENDED:
        size = record[26]
        attempts &= ~EXTENDED
        if size >= _JOB.size:
            expires, tries, delay, due, length = _JOB.unpack_from(record, 27)
            start = 27 + size
            attributes = bytes(record[start:start + length - 1]) if length else None
            return Job(record[10:26], record[start + max(length - 1, 0):], timestamp, attempts,
                       expires=expires, tries=tries, delay=delay, due=due,
                       attributes=attributes)
        expires = _EXPIRES.unpack_from(record, 26)[1] if size >= 8 else 0
        return QueuedMessage(record[10:26], record[27 + size:], timestamp, attempts,
                       expires=expires)
    return QueuedMessage(record[10:26], record[26:], timestamp, attempts)


def decode_records(records: Iterable[Waiting]) -> list[QueuedMessage]:
    """``decode_record`` of each record, Go's plain records decoded inline: one Python call
    less per message read from disk (a few per cent of nsqd's CPU when consuming from disk,
    python -m bench.writer_reader). Messages among them are kept as they are."""
    out: list[QueuedMessage] = []
    append = out.append
    unpack = MESSAGE_HEADER.unpack_from
    for record in records:
        if record.__class__ is not bytes:
            append(record)  # type: ignore[arg-type]
            continue
        timestamp, attempts = unpack(record)
        if attempts & EXTENDED:
            append(decode_record(record))
        else:
            append(QueuedMessage(record[10:26], record[26:], timestamp, attempts))
    return out


class WaitingQueue:
    """The messages waiting in memory, oldest first, kept as one tuple per ``extend``.

    Why chunks: records are ``bytes``, which the cyclic garbage collector does not track, and
    a tuple of them it stops tracking at its first collection; but a ``deque`` of 4 million
    records is one tracked object whose every element each full collection visits. Queued
    records leave few tracked objects behind, so full collections come often while messages
    are delivered, and each walked the whole deque: ``gc.collect()`` took 92 ms with 4
    million records in a deque, 4 ms with them in chunks of 200 (in process); decoding
    2,500 records for delivery from 4 million waiting cost 1,660 ns a message with the
    collector on where 466 with it off (in chunks: 683 and 506, 1.6 million waiting).
    """

    __slots__ = ("_chunks", "_head", "_len", "only_records")

    def __init__(self) -> None:
        self._chunks: deque[tuple[Waiting, ...]] = deque()
        self._head = 0  # how many of the first chunk are taken already
        self._len = 0
        # Nothing but plain records (``new_records``) was queued since the queue was last
        # empty: what is taken needs no look at each element's type.
        self.only_records = True

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Waiting]:
        chunks = iter(self._chunks)
        first = next(chunks, None)
        if first is not None:
            yield from itertools.islice(first, self._head, None)
            for chunk in chunks:
                yield from chunk

    def extend(self, items: Iterable[Waiting], *, records: bool = False) -> None:
        """Queue ``items``; ``records``: they are all plain records."""
        chunk = tuple(items)
        if chunk:
            self._chunks.append(chunk)
            self._len += len(chunk)
            if not records:
                self.only_records = False

    def take(self, n: int) -> list[Waiting]:
        """The first ``n`` (or all, if fewer), removed."""
        chunks = self._chunks
        out: list[Waiting] = []
        while len(out) < n and chunks:
            chunk, head = chunks[0], self._head
            end = head + n - len(out)
            if end < len(chunk):
                out += chunk[head:end]
                self._head = end
            else:
                out += chunk[head:] if head else chunk
                chunks.popleft()
                self._head = 0
        self._len -= len(out)
        if not self._len:
            self.only_records = True
        return out

    def remove(self, item: Waiting) -> None:
        """Remove the first element equal to ``item``.

        Raises:
            ValueError: there is none.
        """
        for i, chunk in enumerate(self._chunks):
            start = self._head if i == 0 else 0
            if item in chunk[start:]:
                rest = list(chunk[start:])
                rest.remove(item)
                if rest:
                    self._chunks[i] = tuple(rest)
                else:
                    del self._chunks[i]
                if i == 0:
                    self._head = 0
                self._len -= 1
                return
        raise ValueError("not waiting")

    def clear(self) -> None:
        self._chunks.clear()
        self._head = 0
        self._len = 0
        self.only_records = True


class Backlog:
    def __init__(self, mem_size: int, disk: DiskQueue | None,
                 on_readable: Callable[[], None]) -> None:
        self.memory = WaitingQueue()
        self.mem_size = mem_size
        self.disk = disk
        self.dropped = 0
        self._on_readable = on_readable
        self._taken = trio.Event()
        # explicit commit: ids read from disk, in read order, with the position after each
        self._explicit = disk is not None and disk.explicit_commit
        self._unacked: deque[tuple[bytes, Pos]] = deque()
        self._pending: set[bytes] = set()
        # Some message here may have an expiry or be a job: whoever takes messages must check
        # them. False for a queue that never held one, so that costs nothing there.
        self.extended = False
        self._from_disk = 0

    def __len__(self) -> int:
        return len(self.memory) + (self.disk.depth() if self.disk is not None else 0)

    @property
    def explicit_commit(self) -> bool:
        """Records read from disk stay there until acknowledged (``--sync-every 1``)."""
        return self._explicit

    @property
    def disk_depth(self) -> int:
        return self.disk.depth() if self.disk is not None else 0

    def has_ready(self) -> bool:
        """Messages that ``take`` can hand out right now."""
        return bool(self.memory) or (self.disk is not None and self.disk.ready() > 0)

    def put_back(self, msgs: list[QueuedMessage]) -> None:
        """Messages coming back to the queue: memory, always."""
        self.memory.extend(msgs)

    async def put(self, msgs: list[QueuedMessage]) -> None:
        """New messages: memory while there is room, the rest to disk (awaited).

        Raises:
            DiskQueueError: the disk write failed; nothing of ``msgs`` past memory was kept.
        """
        msgs = self._to_memory(msgs)
        if not msgs:
            return
        held = [m for m in msgs if m.defer]
        if held:
            self.memory.extend(held)
            msgs = [m for m in msgs if not m.defer]
        if self.disk is None:
            self.dropped += len(msgs)
            return
        if msgs:
            await self.disk.put(encode_records(msgs))

    async def put_records(self, records: list[bytes]) -> None:
        """New messages as their plain records (``new_records``): memory while there is room,
        the rest written to disk as they are (awaited).

        Raises:
            DiskQueueError: the disk write failed; nothing of ``records`` past memory was kept.
        """
        records = self._to_memory(records, records=True)
        if not records:
            return
        if self.disk is None:
            self.dropped += len(records)
        else:
            await self.disk.put(records)

    def _to_memory(self, items: list[_W], *, records: bool = False) -> list[_W]:
        """Queue in memory as many of ``items`` (``records``: plain records) as there is
        room for; the others."""
        memory = self.memory
        room = self.mem_size - len(memory)
        if room >= len(items):
            memory.extend(items, records=records)
            return []
        if room > 0:
            memory.extend(items[:room], records=records)
            return items[room:]
        return items

    def peek(self, n: int) -> list[QueuedMessage]:
        """The next ``n`` messages ``take`` would hand out (memory, then what the disk queue
        has read ahead), left in place; those waiting as records are decoded copies."""
        out = decode_records(itertools.islice(self.memory, n))
        if self.disk is not None and len(out) < n:
            out += decode_records(self.disk.peek(n - len(out)))
        return out

    def take(self, n: int) -> list[QueuedMessage]:
        """Up to ``n`` messages, memory first, then what the disk queue has read ahead."""
        return self._decoded(self.take_waiting(n))

    def take_for_delivery(self, n: int) -> Records | list[QueuedMessage]:
        """``take``, but when everything taken is a plain record (what PUB, MPUB and Go's
        nsqd write, the common case) the records as they are: a topic hands them to its
        channels, a channel to ``InFlightQueue.add_records`` and ``output.record_frames``,
        with no message made per delivery. Records
        from memory are plain (``put_records`` takes only those), so only those from disk
        are looked at one by one, and what memory gave only when something else was queued
        there (``WaitingQueue.only_records``): about 45 ns a message each look."""
        only_records = self.memory.only_records
        items = self.take_waiting(n)
        from_memory = len(items) - self._from_disk
        # a plain record (Go's own) has the top bit of its attempts field clear: no extension
        if ((only_records or all(w.__class__ is bytes for w in items[:from_memory]))
                and not any(r[8] & 0x80 for r in items[from_memory:])):  # type: ignore[index]
            return Records(items)  # type: ignore[arg-type]
        return self._decoded(items)

    def _decoded(self, items: list[Waiting]) -> list[QueuedMessage]:
        """``items`` (as ``take_waiting`` just took them) as messages; ``extended`` set if
        those from disk have expiries or are jobs (saved before a restart, or held)."""
        out = decode_records(items)
        if not self.extended and self._from_disk:
            self.extended = any(m.expires or m.is_job for m in out[len(out) - self._from_disk:])
        return out

    def take_waiting(self, n: int) -> list[Waiting]:
        """``take`` without decoding: records stay records (a topic hands them on as they
        are). ``_from_disk``: how many of them, at the end, came from the disk queue."""
        memory = self.memory
        self._from_disk = 0
        out = memory.take(n)
        if self.disk is not None and len(out) < n:
            before = len(out)
            self._take_from_disk(out, n)
            self._from_disk = len(out) - before
        return out

    def _take_from_disk(self, out: list[Waiting], n: int) -> None:
        if self.disk is not None:
            if self._explicit:
                read = self.disk.pop_with_positions(n - len(out))
                for record, pos in read:
                    message_id = record[10:26]
                    self._unacked.append((message_id, pos))
                    self._pending.add(message_id)
                    out.append(record)
                if read:
                    self._taken.set()
            else:
                records = self.disk.pop(n - len(out))
                if records:
                    out.extend(records)
                    self._taken.set()

    def ack(self, message_id: bytes) -> None:
        """This message is done with; commit the disk queue over every acknowledged record."""
        if not self._explicit or message_id not in self._pending:
            return
        self._pending.discard(message_id)
        unacked = self._unacked
        pos = None
        while unacked and unacked[0][0] not in self._pending:
            pos = unacked.popleft()[1]
        if pos is not None:
            assert self.disk is not None
            self.disk.commit(pos)

    def ack_all(self) -> None:
        """Everything read so far is done with (emptied, or written back at shutdown)."""
        if self._explicit and self._unacked:
            assert self.disk is not None
            self.disk.commit(self._unacked[-1][1])
        self._unacked.clear()
        self._pending.clear()

    def remove_waiting(self, message_id: bytes) -> QueuedMessage | None:
        """Take the message ``message_id`` out of memory, if it waits there."""
        for waiting in self.memory:
            if waiting.__class__ is bytes:
                if waiting[10:26] == message_id:
                    break
            elif waiting.id == message_id:  # type: ignore[union-attr]
                break
        else:
            return None
        self.memory.remove(waiting)
        return decode_records([waiting])[0]

    def clear_memory(self) -> list[QueuedMessage]:
        msgs = decode_records(self.memory)
        self.memory.clear()
        return msgs

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the disk queue reading ahead and tell the owner when records are ready."""
        disk = self.disk
        if disk is None:
            task_status.started()
            return
        async with trio.open_nursery() as nursery:
            await nursery.start(disk.run)
            task_status.started()
            while True:
                await disk.wait_readable()
                self._on_readable()
                await self._taken.wait()
                self._taken = trio.Event()


class WithBacklog:
    """A topic or a channel: its depths are its backlog's, and it can be paused."""

    backlog: Backlog
    paused: bool

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._may_flow()

    def _may_flow(self) -> None:
        """Messages may move on now (unpaused)."""
        raise NotImplementedError

    @property
    def depth(self) -> int:
        return len(self.backlog)

    @property
    def backend_depth(self) -> int:
        return self.backlog.disk_depth
