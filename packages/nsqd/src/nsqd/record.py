"""A message's record: the bytes a topic's log keeps for it, the same as NSQ's disk format.

    0         8        10                26
    +---------+--------+-----------------+------------------+------+
    |timestamp|attempts| id (16 hex)     | extension (ours) | body |
    |i64 ns   |u16     |                 | only if flagged  |      |
    +---------+--------+-----------------+------------------+------+

It is also a message frame's payload, so a record is delivered as it is: copied behind a
frame head with the attempts written in place (``output.record_frames``). A *plain* record is
Go's own (the top bit of the attempts clear): PUB and MPUB make only these (``new_records``).

A message with an expiry, a due time (DPUB) or job fields (lmstfy) is written with the top bit
of the attempts field set and, after the id, an extension: one byte giving the length of its
fixed fields, then the fields: 8 bytes, its expiry (ns since the epoch); 16, its expiry and
due time; 24 (``_JOB``), a job's expiry, tries, delay, due time and the length of its
attributes, which follow. Only such records differ from Go's format.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from nsq_common import MESSAGE_HEADER, MESSAGE_HEADER_SIZE

from .message import OWN, Job, QueuedMessage

_EXPIRES = struct.Struct(">Bq")
_EXPIRES_DUE = struct.Struct(">Bqq")
_JOB = struct.Struct(">qHIqH")  # expires, tries, delay, due, attributes' length
#: In the attempts field of a record: an extension (our fields) follows the id.
EXTENDED = 0x8000
#: Most bytes an extension adds to a record: its length byte, the fixed fields, and a job's
#: attributes (lmstfy allows 16 of 32-byte keys and 128-byte values).
MAX_EXTENSION = 1 + _JOB.size + 8192
#: A record's bytes before its body, plain (NSQ's message header: timestamp, attempts, id).
HEADER_SIZE = MESSAGE_HEADER_SIZE
#: Where a record's id is: ``record[ID]``, the 16 bytes after the timestamp and attempts.
ID = slice(MESSAGE_HEADER.size, HEADER_SIZE)
#: Where an extended record's extension starts: its length byte.
_EXTENSION = HEADER_SIZE


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
    (batches of 200, in process). A single body (a PUB) is one formatting with the whole id:
    0.75 µs, where the loop's set-up made it 2.7.
    """
    out = Records()
    if len(bodies) == 1:
        out.append(b"%b%016x%b" % (MESSAGE_HEADER.pack(timestamp, 0), first_id, bodies[0]))
        return out
    head = MESSAGE_HEADER.pack(timestamp, 0).replace(b"%", b"%%")
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


def is_plain(record: bytes) -> bool:
    return not record[8] & 0x80


def record_id(record: bytes) -> bytes:
    return record[ID]


def encode_record(msg: QueuedMessage) -> bytes:
    """The record of ``msg`` (with its attempts so far)."""
    if msg.is_job:
        return _encode_job(msg)  # type: ignore[arg-type]
    if msg.due:
        head = MESSAGE_HEADER.pack(msg.timestamp, min(msg.attempts, EXTENDED - 1) | EXTENDED)
        return head + msg.id + _EXPIRES_DUE.pack(16, msg.expires, msg.due) + msg.body
    if msg.expires:
        head = MESSAGE_HEADER.pack(msg.timestamp, min(msg.attempts, EXTENDED - 1) | EXTENDED)
        return head + msg.id + _EXPIRES.pack(8, msg.expires) + msg.body
    return MESSAGE_HEADER.pack(msg.timestamp, msg.attempts) + msg.id + msg.body


def encode_records(msgs: list[QueuedMessage]) -> list[bytes]:
    """``encode_record`` of each message, Go's plain records packed inline: one Python call
    less per message written (190 ns a message where 275, batches of 200, in process)."""
    pack = MESSAGE_HEADER.pack
    return [encode_record(m) if m.is_job or m.expires or m.due
            else pack(m.timestamp, m.attempts) + m.id + m.body for m in msgs]


def _encode_job(job: Job) -> bytes:
    attributes = job.attributes
    extra = b"" if attributes is None else attributes
    # a job without attributes and one with none: the length is 0 or 1 + the JSON's
    fields = _JOB.pack(job.expires, job.tries, job.delay, job.due,
                       0 if attributes is None else len(extra) + 1)
    return (MESSAGE_HEADER.pack(job.timestamp, min(job.attempts, EXTENDED - 1) | EXTENDED)
            + job.id + bytes((len(fields),)) + fields + extra + job.body)


def decode_record(record: bytes, offset: int = OWN) -> QueuedMessage:
    timestamp, attempts = MESSAGE_HEADER.unpack_from(record)
    if attempts & EXTENDED:
        size = record[_EXTENSION]
        attempts &= ~EXTENDED
        if size >= _JOB.size:
            expires, tries, delay, due, length = _JOB.unpack_from(record, _EXTENSION + 1)
            start = _EXTENSION + 1 + size
            attributes = bytes(record[start:start + length - 1]) if length else None
            return Job(record[ID], record[start + max(length - 1, 0):], timestamp, attempts,
                       expires=expires, tries=tries, delay=delay, due=due,
                       attributes=attributes, offset=offset)
        due = 0
        if size >= 16:
            expires, due = _EXPIRES_DUE.unpack_from(record, _EXTENSION)[1:]
        else:
            expires = _EXPIRES.unpack_from(record, _EXTENSION)[1] if size >= 8 else 0
        return QueuedMessage(record[ID], record[_EXTENSION + 1 + size:], timestamp, attempts,
                             expires=expires, due=due, offset=offset)
    return QueuedMessage(record[ID], record[HEADER_SIZE:], timestamp, attempts, offset=offset)


def decode_records(records: Iterable[bytes], first_offset: int | None = None
                   ) -> list[QueuedMessage]:
    """``decode_record`` of each record, Go's plain records decoded inline (one Python call
    less per message: a few per cent of nsqd's CPU when consuming from disk); with
    ``first_offset``, the records are consecutive in a log from that offset."""
    out: list[QueuedMessage] = []
    append = out.append
    unpack = MESSAGE_HEADER.unpack_from
    offset = OWN if first_offset is None else first_offset
    step = 0 if first_offset is None else 1
    for record in records:
        timestamp, attempts = unpack(record)
        if attempts & EXTENDED:
            append(decode_record(record, offset))
        else:
            append(QueuedMessage(record[ID], record[HEADER_SIZE:], timestamp, attempts,
                                 offset=offset))
        offset += step
    return out
