"""nsqd's MPUB bodies: the column check of messages of one size (``_uniform_bodies``) gives
what reading the body message by message gives, bodies or the error, for any body."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from nsq_common import ProtocolError, decode_mpub_body
from nsq_common._mpub import _uniform_bodies

MAX_MSG, MAX_BODY = 50, 5000


def by_message(body: bytes) -> list[bytes] | str:
    """The reference: each size field read in turn (what the loop does), or the error."""
    (count,) = struct.unpack_from(">i", body)
    out, pos = [], 4
    for i in range(count):
        if len(body) - pos < 4:
            return f"MPUB failed to read message({i}) body size"
        (size,) = struct.unpack_from(">i", body, pos)
        if size <= 0 or size > MAX_MSG:
            return f"bad size {size}"
        if pos + 4 + size > len(body):
            return "MPUB failed to read message body"
        out.append(body[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


def mpub(bodies: list[bytes], sizes: list[int] | None = None) -> bytes:
    sizes = sizes or [len(b) for b in bodies]
    return struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", n) + b for n, b in zip(sizes, bodies, strict=True))


@settings(deadline=None)
@given(st.integers(1, 40), st.integers(1, 60), st.data())
def test_uniform_bodies_agree_with_reading_message_by_message(count, size, data):
    bodies = [data.draw(st.binary(min_size=size, max_size=size)) for _ in range(count)]
    body = bytearray(mpub(bodies))
    for _ in range(data.draw(st.integers(0, 2))):  # damage: a byte changed, or the end cut
        if data.draw(st.booleans()) and len(body) > 4:
            body[data.draw(st.integers(4, len(body) - 1))] = data.draw(st.integers(0, 255))
        else:
            del body[data.draw(st.integers(4, len(body))):]
    raw = bytes(body)
    expected = by_message(raw)
    fast = _uniform_bodies(raw, count, MAX_MSG)
    if fast is not None:
        assert fast == expected
    if isinstance(expected, list) and len(raw) == 4 + sum(4 + len(b) for b in expected):
        assert decode_mpub_body(raw, MAX_MSG, MAX_BODY) == expected
    else:
        try:
            decode_mpub_body(raw, MAX_MSG, MAX_BODY)
        except ProtocolError:
            pass
        else:
            assert isinstance(expected, list)  # trailing bytes: NSQ ignores them too


def test_sizes_that_differ_are_read_message_by_message():
    body = mpub([b"ab", b"cde", b"fg"])
    assert _uniform_bodies(body, 3, MAX_MSG) is None
    assert decode_mpub_body(body, MAX_MSG, MAX_BODY) == [b"ab", b"cde", b"fg"]
    too_big = mpub([b"x" * 60] * 2)
    assert _uniform_bodies(too_big, 2, MAX_MSG) is None
