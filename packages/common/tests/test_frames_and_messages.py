import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nsq_common import (
    HEARTBEAT_FRAME,
    OK_FRAME,
    FrameDecoder,
    FrameTooBig,
    FrameType,
    WireMessage,
    append_message_frames,
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
    assert commands.fins([b"a" * 16, b"b" * 16]) == b"FIN " + b"a" * 16 + b"\nFIN " + b"b" * 16 + b"\n"
    assert commands.mpub("t", [b"ab", b"cd"]) == commands.mpub("t", iter([b"ab", b"cd"]))
    assert commands.mpub("t", []) == b"MPUB t\n\x00\x00\x00\x04\x00\x00\x00\x00"
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
        decoder.receive_data(wire[prev:cut])
        prev = cut
        while (frame := decoder.next_event()) is not None:
            out.append(frame)
    assert out == [(int(t), d) for t, d in items]


def message_frame(i: int, body: bytes) -> bytes:
    return encode_message_frame(i, 1, b"%016d" % i, body)


def expected_events(wire: bytes) -> tuple[list, list]:
    """What next_events should report for ``wire``, from next_event one frame at a time."""
    decoder = FrameDecoder()
    decoder.receive_data(wire)
    answers: list = []
    messages = []
    while (frame := decoder.next_event()) is not None:
        frame_type, data = frame
        if frame_type == FrameType.MESSAGE:
            messages.append(decode_message(data))
        elif frame == (FrameType.RESPONSE, b"OK"):
            if answers and isinstance(answers[-1], int):
                answers[-1] += 1
            else:
                answers.append(1)
        else:
            answers.append((frame_type, data))
    return answers, messages


stream_frames = st.lists(st.one_of(
    st.just(OK_FRAME), st.just(HEARTBEAT_FRAME),
    st.binary(max_size=30).map(lambda text: encode_error(b"E_X " + text)),
    st.tuples(st.integers(0, 10**6), st.binary(max_size=300)).map(lambda t: message_frame(*t)),
), max_size=30)


@settings(deadline=None)
@given(stream_frames, st.data())
def test_next_events_any_chunking(items, data):
    wire = b"".join(items)
    answers, messages = expected_events(wire)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    decoder = FrameDecoder()
    got_answers: list = []
    got_messages = []
    prev = 0
    for cut in [*cuts, len(wire)]:
        decoder.receive_data(wire[prev:cut])
        prev = cut
        more_answers, more_messages = decoder.next_events()
        for answer in more_answers:  # runs of OKs cut by a read come out as two counts
            if isinstance(answer, int) and got_answers and isinstance(got_answers[-1], int):
                got_answers[-1] += answer
            else:
                got_answers.append(answer)
        got_messages.extend(more_messages)
        assert all(type(m.body) is bytes for m in more_messages)
    assert got_answers == answers
    assert got_messages == messages
    assert decoder.buffered == 0


def test_next_events_builds_messages_with_the_factory_and_counts_oks():
    def make(message_id, body, timestamp, attempts, context):
        return (context, message_id, body, timestamp, attempts)

    decoder = FrameDecoder(message=make, context="conn")
    decoder.receive_data(OK_FRAME * 3 + HEARTBEAT_FRAME + OK_FRAME + message_frame(7, b"x"))
    assert decoder.next_events() == (
        [3, (FrameType.RESPONSE, b"_heartbeat_"), 1], [("conn", b"%016d" % 7, b"x", 7, 1)])
    decoder.receive_data(OK_FRAME)
    assert decoder.next_events() == ([1], [])


def test_a_frame_larger_than_a_read_is_put_together_once():
    big = message_frame(1, bytes(range(256)) * 1024)
    decoder = FrameDecoder()
    for start in range(0, len(big) - 100, 65536):
        decoder.receive_data(big[start : start + 65536])
        assert decoder.next_events() == ([], [])
    decoder.receive_data(big[len(big) - len(big) % 65536 :] + OK_FRAME)
    answers, messages = decoder.next_events()
    assert answers == [1] and [m.body for m in messages] == [bytes(range(256)) * 1024]


def test_a_bad_frame_after_good_ones_raises_on_the_next_call():
    decoder = FrameDecoder(max_size=100)
    decoder.receive_data(OK_FRAME + message_frame(1, b"x" * 100))
    assert decoder.next_events() == ([1], [])
    with pytest.raises(FrameTooBig, match=r"frame size 130 out of range \(at most 100\)"):
        decoder.next_events()
    decoder = FrameDecoder()
    decoder.receive_data(struct.pack(">ii", 6, 7) + b"??")
    with pytest.raises(ValueError, match="unknown frame type 7"):
        decoder.next_events()


def test_missing_says_how_much_of_the_frame_is_still_to_come():
    decoder = FrameDecoder()
    assert decoder.next_event() is None and decoder.missing() == 8
    decoder.receive_data(OK_FRAME[:3])
    assert decoder.next_event() is None and decoder.missing() == 5
    decoder.receive_data(OK_FRAME[3:8])
    assert decoder.next_event() is None and decoder.missing() == 2
    decoder.receive_data(OK_FRAME[8:])
    assert decoder.next_event() == (FrameType.RESPONSE, b"OK")


def test_append_message_frames_is_encode_message_frame_in_pieces():
    messages = [WireMessage(1, 2, b"0123456789abcdef", b"hi"), WireMessage(3, 4, b"f" * 16, b"")]
    out: list[bytes] = []
    size = append_message_frames(out, messages)
    wire = b"".join(out)
    assert wire == b"".join(encode_message_frame(m.timestamp, m.attempts, m.id, m.body)
                            for m in messages)
    assert size == len(wire) and len(out) == 6


@settings(deadline=None)
@given(st.integers(-(2**63), 2**63 - 1), st.integers(0, 65535),
       st.binary(min_size=16, max_size=16), st.binary(max_size=500))
def test_message_round_trip(ts, attempts, mid, body):
    msg = decode_message(encode_message(ts, attempts, mid, body))
    assert (msg.timestamp, msg.attempts, msg.id, msg.body) == (ts, attempts, mid, body)
