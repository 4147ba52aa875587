"""An MPUB body checked while it arrives: the count and each message's size are refused as
soon as their 4 bytes are in (nsqd's readMPUB reads them one by one), with the same texts
and in the same order as the check of a whole body."""

import struct
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nsq_common import (
    BodySpec,
    CommandReader,
    ErrorCode,
    MpubPrefixCheck,
    ProtocolError,
    commands,
    decode_mpub_body,
)

MAX_MSG, MAX_BODY = 100, 1000
SPEC = BodySpec(MAX_BODY, ErrorCode.E_BAD_BODY, "MPUB invalid body size %d",
                "MPUB body too big %d > %d", partial(MpubPrefixCheck, MAX_MSG, MAX_BODY))


def size(n: int) -> bytes:
    return struct.pack(">i", n)


def reader() -> CommandReader:
    return CommandReader(lambda name, params: SPEC if name == b"MPUB" else None)


@pytest.mark.parametrize(("prefix", "text"), [
    (size(0), "E_BAD_BODY MPUB invalid message count 0"),
    (size(200), "E_BAD_BODY MPUB invalid message count 200"),  # > (1000 - 4) // 5
    (size(3) + size(-1), "E_BAD_MESSAGE MPUB invalid message(0) body size -1"),
    (size(3) + size(101), "E_BAD_MESSAGE MPUB message too big 101 > 100"),
    (size(3) + size(2) + b"ab" + size(5000), "E_BAD_MESSAGE MPUB message too big 5000 > 100"),
    (size(3) + size(2) + b"ab" + size(1) + b"c" + size(0),
     "E_BAD_MESSAGE MPUB invalid message(2) body size 0"),
])
def test_refused_before_the_rest_of_the_body(prefix, text):
    r = reader()
    r.receive_data(b"MPUB t\n" + size(900))  # declares far more than is sent
    assert r.next_event() is None
    r.receive_data(prefix)
    with pytest.raises(ProtocolError) as caught:
        r.next_event()
    assert caught.value.text.decode() == text


def test_each_size_is_looked_at_once_and_a_good_body_still_arrives():
    body = commands.mpub_body([b"a" * 50, b"b", b"c" * 100])
    r = reader()
    r.receive_data(b"MPUB t\n" + size(len(body)))
    for byte in body[:-1]:  # one byte at a time, all checked as they come
        r.receive_data(bytes([byte]))
        assert r.next_event() is None
    r.receive_data(body[-1:])
    cmd = r.next_event()
    assert cmd is not None and cmd.body == body
    # and the next MPUB is checked afresh
    r.receive_data(b"MPUB t\n" + size(200) + size(1))
    assert r.next_event() is None
    r.receive_data(size(101))
    with pytest.raises(ProtocolError, match="MPUB message too big 101 > 100"):
        r.next_event()


def _outcome(fn):
    try:
        return fn()
    except ProtocolError as exc:
        return exc.text.decode()


# No deadline: Hypothesis' default, 200 ms of wall clock per example, is what a slow, busy
# machine breaks.
@settings(deadline=None)
@given(st.lists(st.integers(-3, 120), min_size=0, max_size=6), st.integers(-1, 8),
       st.data())
def test_same_answer_as_the_whole_body_check(sizes, count_delta, data):
    """However the body is split, the reader refuses it with the text decode_mpub_body gives
    for the whole body, or hands the body over whole."""
    parts = [size(len(sizes) + count_delta)]
    for n in sizes:
        parts.append(size(n))
        parts.append(b"x" * max(n, 0))
    body = b"".join(parts)
    whole = _outcome(lambda: decode_mpub_body(body, MAX_MSG, MAX_BODY))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=4)))
    r = reader()
    r.receive_data(b"MPUB t\n" + size(len(body)))

    def run():
        last = 0
        for cut in [*cuts, len(body)]:
            r.receive_data(body[last:cut])
            last = cut
            cmd = r.next_event()
            if cmd is not None:
                return decode_mpub_body(cmd.body, MAX_MSG, MAX_BODY)
        raise AssertionError("the whole body never came out")

    assert _outcome(run) == whole
