"""The fetch protocol's frames between nodes (docs/design/replication.md, "The fetch
protocol"), sans-IO: encoders give bytes, ``FrameReader`` takes bytes and gives frames.

::

    frame:   u32 size (of what follows) | u8 type | payload
    HELLO     (f->l)  u16 len, node id of the follower
    FETCH     (f->l)  u32 max wait ms, u32 max bytes, u16 topic count, per topic:
                      u16 len, topic | u64 epoch | u64 fetch offset | u64 its HW | u8 flags
    EPOCH_END (f->l)  u16 len, topic | u64 epoch asked
    DATA      (l->f)  u16 topic count, per topic: u16 len, topic | u16 error | u64 leader epoch
                      | u64 HW | u64 log start | u64 next offset
                      | u16 epoch lines (u64 epoch, u64 start) | u32 batch bytes, the batches
                      | u32 channel bytes, channel records
    EPOCH     (l->f)  u16 len, topic | u16 error | u64 epoch found | u64 end offset
    FORWARD   (f->l)  u32 id, u16 len, topic, u8 kind, u32 defer ms, body
    FORWARDED (l->f)  u32 id, u16 len, the answer NSQ would send

Batches are a segment's (``segformat``: head, crc32 of the records part, records), whole.
Integers are big-endian. Anything malformed (a short field, a size past ``MAX_FRAME``, a
type not known, bytes left over, a batch whose crc does not match) raises ``WireError``:
the connection that sent it is closed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import attrs

from ..segformat import BATCH_HEAD, HEAD

if TYPE_CHECKING:
    from ..runs import Run

MAGIC = b"  R1"
#: the largest frame either side accepts (a fetch's ``max bytes`` stays well below)
MAX_FRAME = 64 << 20

HELLO, FETCH, EPOCH_END, DATA, EPOCH, FORWARD, FORWARDED = range(1, 8)
TYPES = frozenset(range(1, 8))

#: per-topic errors of DATA and EPOCH
NONE, NOT_LEADER, FENCED, UNKNOWN_EPOCH, OUT_OF_RANGE, STORAGE = range(6)
ERROR_NAMES = ("NONE", "NOT_LEADER", "FENCED", "UNKNOWN_EPOCH", "OUT_OF_RANGE", "STORAGE")

#: FETCH flags: etcd unreachable from the follower for more than 2 s
ETCD_UNREACHABLE = 1

#: FORWARD kinds
PUB, MPUB, DPUB = range(1, 4)

#: channel record kinds (in DATA after the batches): a topic's settings, a channel's, its
#: cursor, records of one of its internal logs, that log's cursor (``replication.private``)
TOPIC_SETTINGS, CHANNEL_SETTINGS, CURSOR, PRIVATE_RECORDS, PRIVATE_CURSOR = range(5)

_FRAME = struct.Struct(">IB")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_FETCH_HEAD = struct.Struct(">IIH")
_FETCH_TOPIC = struct.Struct(">QQQB")
_DATA_TOPIC = struct.Struct(">HQQQQ")
_EPOCH_LINE = struct.Struct(">QQ")
_EPOCH_ANSWER = struct.Struct(">HQQ")
_FORWARD_TAIL = struct.Struct(">BI")
_RECORD_SIZE = struct.Struct(">I")
_CHANNEL_KIND = struct.Struct(">BI")


class WireError(Exception):
    """Bytes that are not a frame of this protocol."""


# -- the frames ------------------------------------------------------------------------------
@attrs.frozen
class Hello:
    node: str


@attrs.frozen
class FetchTopic:
    topic: str
    epoch: int
    offset: int
    hw: int
    flags: int = 0


@attrs.frozen
class Fetch:
    max_wait_ms: int
    max_bytes: int
    topics: tuple[FetchTopic, ...]


@attrs.frozen
class EpochEnd:
    topic: str
    epoch: int


@attrs.frozen
class TopicData:
    """One topic of a DATA answer: ``batches`` as bytes (``decode_batches`` reads them)."""

    topic: str
    error: int
    epoch: int
    hw: int
    log_start: int
    next_offset: int
    epochs: tuple[tuple[int, int], ...] = ()
    batches: bytes = b""
    channels: bytes = b""


@attrs.frozen
class Data:
    topics: tuple[TopicData, ...]


@attrs.frozen
class Epoch:
    topic: str
    error: int
    epoch: int
    end: int


@attrs.frozen
class Forward:
    id: int
    topic: str
    kind: int
    defer_ms: int
    body: bytes


@attrs.frozen
class Forwarded:
    id: int
    answer: bytes


Frame = Hello | Fetch | EpochEnd | Data | Epoch | Forward | Forwarded


# -- encoding --------------------------------------------------------------------------------
def _frame(kind: int, payload: bytes) -> bytes:
    if len(payload) + 1 > MAX_FRAME:
        raise WireError(f"a frame of {len(payload) + 1} bytes is over {MAX_FRAME}")
    return _FRAME.pack(len(payload) + 1, kind) + payload


def _text(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    if len(raw) > 0xFFFF:
        raise WireError("a name over 65535 bytes")
    return _U16.pack(len(raw)) + raw


def encode(frame: Frame) -> bytes:
    """The bytes of one frame."""
    if isinstance(frame, Hello):
        return _frame(HELLO, _text(frame.node))
    if isinstance(frame, Fetch):
        parts = [_FETCH_HEAD.pack(frame.max_wait_ms, frame.max_bytes, len(frame.topics))]
        for t in frame.topics:
            parts += (_text(t.topic), _FETCH_TOPIC.pack(t.epoch, t.offset, t.hw, t.flags))
        return _frame(FETCH, b"".join(parts))
    if isinstance(frame, EpochEnd):
        return _frame(EPOCH_END, _text(frame.topic) + _U64.pack(frame.epoch))
    if isinstance(frame, Data):
        parts = [_U16.pack(len(frame.topics))]
        for d in frame.topics:
            parts += (_text(d.topic),
                      _DATA_TOPIC.pack(d.error, d.epoch, d.hw, d.log_start, d.next_offset),
                      _U16.pack(len(d.epochs)),
                      *(_EPOCH_LINE.pack(e, s) for e, s in d.epochs),
                      _U32.pack(len(d.batches)), d.batches,
                      _U32.pack(len(d.channels)), d.channels)
        return _frame(DATA, b"".join(parts))
    if isinstance(frame, Epoch):
        return _frame(EPOCH, _text(frame.topic)
                      + _EPOCH_ANSWER.pack(frame.error, frame.epoch, frame.end))
    if isinstance(frame, Forward):
        return _frame(FORWARD, _U32.pack(frame.id) + _text(frame.topic)
                      + _FORWARD_TAIL.pack(frame.kind, frame.defer_ms) + frame.body)
    return _frame(FORWARDED, _U32.pack(frame.id) + _text(frame.answer))


def encode_batches(runs: Sequence[tuple[int, Sequence[bytes]]]) -> bytes:
    """Runs of consecutive records, each as one batch in a segment's format (the max
    timestamp of a record shorter than 8 bytes counts as 0)."""
    out: list[bytes] = []
    for first, records in runs:
        if not records:
            continue
        body = b"".join(_RECORD_SIZE.pack(len(r)) + r for r in records)
        max_ts = max((int.from_bytes(r[:8], "big", signed=True) for r in records
                      if len(r) >= 8), default=0)
        out += (BATCH_HEAD.pack(HEAD - 4 + len(body), first, len(records), max_ts,
                                zlib.crc32(body)), body)
    return b"".join(out)


def within_budget(runs: Iterable[Run], budget: int) -> list[tuple[int, list[bytes]]]:
    """Runs read from a log, cut to about ``budget`` bytes of records as a batch frames them
    (each with its u32 length), for ``encode_batches``: at least their first record, however
    large, and after it none that would go past ``budget``."""
    out: list[tuple[int, list[bytes]]] = []
    nbytes = 0
    for first, records, _ in runs:
        taken: list[bytes] = []
        for record in records:
            if nbytes and nbytes + len(record) + 4 > budget:
                break
            taken.append(record)
            nbytes += len(record) + 4
        if taken:
            out.append((first, taken))
        if len(taken) < len(records):
            break
    return out


def encode_channel_records(records: Sequence[tuple[str, int, bytes]]) -> bytes:
    """Channel records, each ``u16 len, channel | u8 kind | u32 len, payload``."""
    return b"".join(_text(channel) + _CHANNEL_KIND.pack(kind, len(payload)) + payload
                    for channel, kind, payload in records)


# -- decoding --------------------------------------------------------------------------------
class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise WireError("a frame shorter than its fields")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size))

    def text(self) -> str:
        (n,) = self.unpack(_U16)
        try:
            return self.take(n).decode()
        except UnicodeDecodeError:
            raise WireError("a name that is not UTF-8") from None

    def sized(self) -> bytes:
        (n,) = self.unpack(_U32)
        return self.take(n)

    def done(self) -> None:
        if self.pos != len(self.data):
            raise WireError(f"{len(self.data) - self.pos} bytes past a frame's fields")


def decode(kind: int, payload: bytes) -> Frame:
    """One frame from its type and payload.

    Raises:
        WireError: not a frame of this protocol.
    """
    c = _Cursor(payload)
    frame: Frame
    if kind == HELLO:
        frame = Hello(c.text())
    elif kind == FETCH:
        wait, max_bytes, count = c.unpack(_FETCH_HEAD)
        topics = []
        for _ in range(count):
            name = c.text()
            epoch, offset, hw, flags = c.unpack(_FETCH_TOPIC)
            topics.append(FetchTopic(name, epoch, offset, hw, flags))
        frame = Fetch(wait, max_bytes, tuple(topics))
    elif kind == EPOCH_END:
        name = c.text()
        frame = EpochEnd(name, c.unpack(_U64)[0])
    elif kind == DATA:
        (count,) = c.unpack(_U16)
        datas = []
        for _ in range(count):
            name = c.text()
            error, epoch, hw, start, next_offset = c.unpack(_DATA_TOPIC)
            (lines,) = c.unpack(_U16)
            epochs = []
            for _ in range(lines):
                line_epoch, line_start = c.unpack(_EPOCH_LINE)
                epochs.append((line_epoch, line_start))
            batches = c.sized()
            datas.append(TopicData(name, error, epoch, hw, start, next_offset,
                                   tuple(epochs), batches, c.sized()))
        frame = Data(tuple(datas))
    elif kind == EPOCH:
        name = c.text()
        error, epoch, end = c.unpack(_EPOCH_ANSWER)
        frame = Epoch(name, error, epoch, end)
    elif kind == FORWARD:
        (fid,) = c.unpack(_U32)
        name = c.text()
        fkind, defer = c.unpack(_FORWARD_TAIL)
        frame = Forward(fid, name, fkind, defer, c.take(len(payload) - c.pos))
    elif kind == FORWARDED:
        (fid,) = c.unpack(_U32)
        (n,) = c.unpack(_U16)
        frame = Forwarded(fid, c.take(n))
    else:
        raise WireError(f"unknown frame type {kind}")
    c.done()
    return frame


def decode_batches(data: bytes) -> list[tuple[int, list[bytes]]]:
    """The batches of a DATA topic, each ``(base offset, records)``, in order.

    Raises:
        WireError: a batch cut short, its crc wrong, its records not its count, or a base
            below the previous batch's end.
    """
    out: list[tuple[int, list[bytes]]] = []
    pos, end = 0, 0
    view = memoryview(data)
    while pos < len(data):
        if pos + HEAD > len(data):
            raise WireError("a batch head cut short")
        length, base, count, _, crc = BATCH_HEAD.unpack_from(data, pos)
        stop = pos + 4 + length
        if length < HEAD - 4 or stop > len(data):
            raise WireError(f"a batch at {base} of {length} bytes does not fit")
        body = view[pos + HEAD:stop]
        if zlib.crc32(body) != crc:
            raise WireError(f"the batch at {base}: crc mismatch")
        if base < end:
            raise WireError(f"the batch at {base} is below the previous end {end}")
        records, at = [], 0
        for _ in range(count):
            if at + 4 > len(body):
                raise WireError(f"the batch at {base}: fewer records than its count")
            (size,) = _RECORD_SIZE.unpack_from(body, at)
            if at + 4 + size > len(body):
                raise WireError(f"the batch at {base}: a record cut short")
            records.append(bytes(body[at + 4:at + 4 + size]))
            at += 4 + size
        if at != len(body) or not count:
            raise WireError(f"the batch at {base}: its records are not its count")
        out.append((base, records))
        end = base + count
        pos = stop
    return out


def decode_channel_records(data: bytes) -> list[tuple[str, int, bytes]]:
    """The channel records of a DATA topic, each ``(channel, kind, payload)``.

    Raises:
        WireError: one cut short, or a channel name that is not UTF-8.
    """
    c = _Cursor(data)
    out = []
    while c.pos < len(data):
        channel = c.text()
        kind, n = c.unpack(_CHANNEL_KIND)
        out.append((channel, kind, c.take(n)))
    return out


class FrameReader:
    """Frames out of a byte stream: ``receive_data`` what was read, then ``next_frame``
    until None."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self.max_frame = max_frame

    def receive_data(self, data: bytes | bytearray) -> None:
        self._buffer += data

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None until more bytes come.

        Raises:
            WireError: the stream is not this protocol's (the connection must close).
        """
        buffer = self._buffer
        if len(buffer) < _FRAME.size:
            return None
        size, kind = _FRAME.unpack_from(buffer)
        if size < 1 or size > self.max_frame:
            raise WireError(f"a frame of {size} bytes")
        if kind not in TYPES:
            raise WireError(f"unknown frame type {kind}")
        if len(buffer) < 4 + size:
            return None
        payload = bytes(buffer[_FRAME.size:4 + size])
        del buffer[:4 + size]
        return decode(kind, payload)
