import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from nsq_common import (
    HEARTBEAT_FRAME,
    OK_FRAME,
    FrameDecoder,
    FrameType,
    commands,
    decode_message,
    encode_error,
    encode_message,
    encode_message_frame,
)


def test_golden_frames():
    assert OK_FRAME == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    assert HEARTBEAT_FRAME == b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_"
    assert encode_error(b"E_INVALID x") == b"\x00\x00\x00\x0f\x00\x00\x00\x01E_INVALID x"


def test_golden_message():
    raw = encode_message(1, 2, b"0123456789abcdef", b"hi")
    assert raw == struct.pack(">qH", 1, 2) + b"0123456789abcdef" + b"hi"
    frame = encode_message_frame(1, 2, b"0123456789abcdef", b"hi")
    assert frame == struct.pack(">ii", 4 + len(raw), 2) + raw
    msg = decode_message(raw)
    assert (msg.timestamp, msg.attempts, msg.id, msg.body) == (1, 2, b"0123456789abcdef", b"hi")


def test_command_bytes():
    assert commands.pub("t", b"ab") == b"PUB t\n\x00\x00\x00\x02ab"
    assert commands.mpub("t", [b"a", b"bc"]) == (
        b"MPUB t\n\x00\x00\x00\x0f\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x02bc")
    assert commands.dpub("t", 500, b"x") == b"DPUB t 500\n\x00\x00\x00\x01x"
    assert commands.sub("t", "c") == b"SUB t c\n"
    assert commands.rdy(10) == b"RDY 10\n"
    assert commands.req(b"0123456789abcdef", 0) == b"REQ 0123456789abcdef 0\n"
    assert commands.identify({"a": 1}) == b'IDENTIFY\n\x00\x00\x00\x07{"a":1}'


frames = st.lists(st.tuples(st.sampled_from(list(FrameType)), st.binary(max_size=300)), max_size=20)


# No deadline: Hypothesis' default, 200 ms of wall clock per example, is what a slow, busy
# machine breaks.
@settings(deadline=None)
@given(frames, st.data())
def test_frame_round_trip_any_chunking(items, data):
    wire = b"".join(struct.pack(">ii", len(d) + 4, t) + d for t, d in items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    decoder = FrameDecoder()
    out = []
    prev = 0
    for cut in [*cuts, len(wire)]:
        decoder.feed(wire[prev:cut])
        prev = cut
        out.extend(decoder.frames())
    assert out == [(int(t), d) for t, d in items]


@settings(deadline=None)
@given(st.integers(-(2**63), 2**63 - 1), st.integers(0, 65535),
       st.binary(min_size=16, max_size=16), st.binary(max_size=500))
def test_message_round_trip(ts, attempts, mid, body):
    msg = decode_message(encode_message(ts, attempts, mid, body))
    assert (msg.timestamp, msg.attempts, msg.id, msg.body) == (ts, attempts, mid, body)
