"""The fetch protocol's frames (nsqd.replication.wire): every frame through encode and the
reader, split at every byte; malformed input refused with WireError, never a crash."""

from __future__ import annotations

import struct
import zlib

import pytest
from nsqd.replication import wire
from nsqd.replication.wire import (
    Data,
    Epoch,
    EpochEnd,
    Fetch,
    FetchTopic,
    Forward,
    Forwarded,
    FrameReader,
    Hello,
    TopicData,
    WireError,
)
from nsqd.segformat import BATCH_HEAD

RECORD = b"\x00\x00\x01\x00\x00\x00\x00\x00" + b"\x00\x00" + b"0" * 16 + b"body"

FRAMES: list[wire.Frame] = [
    Hello("127.0.0.1:4150"),
    Fetch(500, 1 << 20, (FetchTopic("clicks", 3, 120, 100, wire.ETCD_UNREACHABLE),
                         FetchTopic("orders\u00e9", 1, 0, 0))),
    Fetch(0, 0, ()),
    EpochEnd("clicks", 2),
    Data((TopicData("clicks", wire.NONE, 3, 100, 7, 122, ((1, 0), (3, 90)),
                    wire.encode_batches([(120, [RECORD, RECORD])]), b"\x01\x02"),
          TopicData("orders", wire.FENCED, 4, 0, 0, 0))),
    Epoch("clicks", wire.UNKNOWN_EPOCH, 2, 99),
    Forward(7, "clicks", wire.DPUB, 1500, b"a body\x00\xff"),
    Forwarded(7, b"E_PUB_FAILED not leader"),
]


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: type(f).__name__)
def test_a_frame_round_trips_whole_and_split_at_every_byte(frame: wire.Frame) -> None:
    data = wire.encode(frame)
    reader = FrameReader()
    reader.receive_data(data)
    assert reader.next_frame() == frame
    assert reader.next_frame() is None
    for cut in range(len(data)):
        reader = FrameReader()
        reader.receive_data(data[:cut])
        assert reader.next_frame() is None
        reader.receive_data(data[cut:] + data)
        assert reader.next_frame() == frame
        assert reader.next_frame() == frame


def test_batches_are_a_segments_and_come_back_at_their_offsets_gaps_kept() -> None:
    runs = [(5, [RECORD]), (6, [RECORD + b"x", RECORD + b"yy"]), (40, [b"short"])]
    data = wire.encode_batches(runs)
    assert wire.decode_batches(data) == runs
    length, base, count, max_ts, crc = BATCH_HEAD.unpack_from(data)
    assert (length, base, count, max_ts) == (24 + 4 + len(RECORD), 5, 1, 1 << 40)
    assert crc == zlib.crc32(struct.pack(">I", len(RECORD)) + RECORD)
    assert wire.decode_batches(b"") == []


@pytest.mark.parametrize("damage", ["crc", "cut", "count", "order", "empty", "length"])
def test_a_damaged_batch_is_refused(damage: str) -> None:
    data = bytearray(wire.encode_batches([(5, [RECORD, RECORD])]))
    if damage == "crc":
        data[-1] ^= 1
    elif damage == "cut":
        del data[-3:]
    elif damage == "count":
        struct.pack_into(">I", data, 12, 3)
    elif damage == "order":
        data += wire.encode_batches([(6, [RECORD])])
    elif damage == "empty":
        data = bytearray(BATCH_HEAD.pack(24, 5, 0, 0, zlib.crc32(b"")))
    else:
        struct.pack_into(">I", data, 0, 3)
    with pytest.raises(WireError):
        wire.decode_batches(bytes(data))


def frame_of(kind: int, payload: bytes) -> bytes:
    return struct.pack(">IB", len(payload) + 1, kind) + payload


@pytest.mark.parametrize("data", [
    frame_of(99, b""),                                    # a type not known
    struct.pack(">IB", 0, wire.HELLO),                    # a size without the type
    struct.pack(">IB", wire.MAX_FRAME + 1, wire.DATA),    # over the limit
    frame_of(wire.HELLO, b"\x00\x05abc"),                 # a name cut short
    frame_of(wire.HELLO, b"\x00\x02\xff\xfe"),            # not UTF-8
    frame_of(wire.HELLO, b"\x00\x01ab"),                  # a byte past its fields
    frame_of(wire.FETCH, struct.pack(">IIH", 1, 2, 1)),   # a topic promised, none given
    frame_of(wire.EPOCH_END, b"\x00\x01a\x00"),           # an epoch cut short
    frame_of(wire.DATA, b"\x00\x01\x00\x01a" + b"\x00" * 34 + b"\x00\x00\x00\x09"),
    frame_of(wire.FORWARDED, b"\x00\x00\x00\x01\x00\x09no"),
], ids=["type", "size0", "huge", "short", "utf8", "extra", "fetch", "epoch", "data", "fwd"])
def test_malformed_frames_raise_wire_error(data: bytes) -> None:
    reader = FrameReader()
    reader.receive_data(data)
    with pytest.raises(WireError):
        reader.next_frame()


def test_a_name_too_long_is_not_encoded() -> None:
    with pytest.raises(WireError):
        wire.encode(Hello("x" * 70000))


def test_channel_records_round_trip_and_a_cut_one_is_refused() -> None:
    records = [("ch", wire.CURSOR, b"\x00" * 12), ("other#x", wire.CHANNEL_SETTINGS, b"{}"),
               ("e", wire.CURSOR, b"")]
    data = wire.encode_channel_records(records)
    assert wire.decode_channel_records(data) == records
    assert wire.decode_channel_records(b"") == []
    with pytest.raises(WireError):
        wire.decode_channel_records(data[:-1])
    with pytest.raises(WireError):
        wire.decode_channel_records(b"\x00\x02\xff\xfe\x02\x00\x00\x00\x00")


def test_runs_are_cut_to_a_budget_that_counts_each_records_length() -> None:
    runs = [(10, [b"a" * 6, b"b" * 6], True), (20, [b"c" * 6, b"d" * 6], False)]
    # each record is 10 bytes in a batch (u32 length, 6 bytes): 29 holds two, not three
    assert wire.within_budget(runs, 29) == [(10, [b"a" * 6, b"b" * 6])]
    assert wire.within_budget(runs, 30) == [(10, [b"a" * 6, b"b" * 6]), (20, [b"c" * 6])]
    assert wire.within_budget(runs, 19) == [(10, [b"a" * 6])]
    assert wire.within_budget(runs, 1 << 20) == [(10, [b"a" * 6, b"b" * 6]),
                                                (20, [b"c" * 6, b"d" * 6])]
    # the first record goes however large, or however small the budget
    assert wire.within_budget(runs, 0) == [(10, [b"a" * 6])]
    assert wire.within_budget([(5, [b"x" * 100, b"y"], True)], 50) == [(5, [b"x" * 100])]
    assert wire.within_budget([], 100) == []
    # the records of the batches made of what is taken stay within the budget
    taken = wire.within_budget(runs, 29)
    assert sum(len(r) + 4 for _, records in taken for r in records) <= 29
