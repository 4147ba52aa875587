import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nsq_common import (
    BodySpec,
    CommandReader,
    ConnectionAbort,
    ErrorCode,
    LookupResponseReader,
    ProtocolError,
    commands,
    decode_mpub_body,
)

SPEC = BodySpec(100, ErrorCode.E_BAD_MESSAGE, "PUB invalid message body size %d",
                "PUB message too big %d > %d")


def hook(name, params):
    if name in (b"PUB", b"MPUB"):
        if not params:
            raise ProtocolError(ErrorCode.E_INVALID, "PUB insufficient number of parameters")
        return SPEC
    return None


def parse_all(reader):
    out = []
    while (cmd := reader.next_event()) is not None:
        out.append((cmd.name, cmd.params, cmd.body))
    return out


def test_pipelined_commands_in_one_chunk():
    r = CommandReader(hook)
    r.receive_data(b"NOP\r\nRDY 5\n" + commands.pub("t", b"hello") + b"FIN 0123456789abcdef\n")
    assert parse_all(r) == [(b"NOP", [], None), (b"RDY", [b"5"], None),
                            (b"PUB", [b"t"], b"hello"), (b"FIN", [b"0123456789abcdef"], None)]


def test_params_split_on_single_spaces_and_empty_line():
    r = CommandReader(hook)
    r.receive_data(b"A  B\n\n")
    assert parse_all(r) == [(b"A", [b"", b"B"], None), (b"", [], None)]


def test_bad_header_refused_before_body():
    r = CommandReader(hook)
    r.receive_data(b"PUB\n")
    with pytest.raises(ProtocolError, match="insufficient"):
        r.next_event()


@pytest.mark.parametrize(("size", "text"), [(0, "PUB invalid message body size 0"),
                                            (-1, "PUB invalid message body size -1"),
                                            (101, "PUB message too big 101 > 100")])
def test_body_size_checked_from_the_length_alone(size, text):
    r = CommandReader(hook)
    r.receive_data(b"PUB t\n" + size.to_bytes(4, "big", signed=True))
    with pytest.raises(ProtocolError) as info:
        r.next_event()
    assert info.value.description == text
    assert info.value.code == "E_BAD_MESSAGE"


def test_overlong_line_aborts():
    r = CommandReader(hook, max_line=10)
    r.receive_data(b"x" * 11)
    with pytest.raises(ConnectionAbort):
        r.next_event()


cmds = st.lists(st.one_of(
    st.builds(lambda t, b: commands.pub(t, b), st.sampled_from(["a", "topic"]),
              st.binary(min_size=1, max_size=100)),
    st.just(b"NOP\n"),
    st.builds(lambda n: b"RDY %d\n" % n, st.integers(0, 2500)),
), max_size=15)


# No deadline: Hypothesis' default, 200 ms of wall clock per example, is what a slow, busy
# machine breaks.
@settings(deadline=None)
@given(cmds, st.data())
def test_any_chunking_gives_the_same_commands(items, data):
    wire = b"".join(items)
    whole = CommandReader(hook)
    whole.receive_data(wire)
    expected = parse_all(whole)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=12)))
    r = CommandReader(hook)
    got = []
    prev = 0
    for cut in [*cuts, len(wire)]:
        r.receive_data(wire[prev:cut])
        prev = cut
        got.extend(parse_all(r))
    assert got == expected
    assert len(got) == len(items)


def test_mpub_body_round_trip_and_errors():
    body = commands.mpub_body([b"a", b"bb", b"ccc"])
    assert decode_mpub_body(body, 10, 1000) == [b"a", b"bb", b"ccc"]
    cases = [
        (b"\x00\x00", "E_BAD_BODY MPUB failed to read message count"),
        (b"\x00\x00\x00\x00", "E_BAD_BODY MPUB invalid message count 0"),
        (b"\x00\x00\x00\x02\x00\x00\x00\x01a", "E_BAD_MESSAGE MPUB failed to read message(1) body size"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x00", "E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x0b", "E_BAD_MESSAGE MPUB message too big 11 > 10"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x05ab", "E_BAD_MESSAGE MPUB failed to read message body"),
    ]
    for raw, text in cases:
        with pytest.raises(ProtocolError) as info:
            decode_mpub_body(raw, 10, 1000)
        assert info.value.text.decode() == text


@settings(deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=50))
def test_mpub_round_trip(bodies):
    assert decode_mpub_body(commands.mpub_body(bodies), 50, 100000) == bodies


def test_the_readers_speak_only_the_shared_vocabulary():
    # ``feed`` / ``next_command`` / ``next_response`` were the former names; every caller moved.
    for old in ("feed", "next_command"):
        assert not hasattr(CommandReader, old)
    assert not hasattr(LookupResponseReader, "next_response")


def parse_with_fins(reader):
    """What a server reads when it takes runs of FINs with next_fins: (name, params, body)."""
    out = []
    while True:
        fins = reader.next_fins()
        if fins:
            out += [(b"FIN", [i], None) for i in fins]
            continue
        cmd = reader.next_event()
        if cmd is None:
            return out
        out.append((cmd.name, cmd.params, cmd.body))


def test_next_fins_takes_a_run_of_fins_and_stops_at_anything_else():
    r = CommandReader(hook)
    ids = [b"%016x" % i for i in range(5)]
    r.receive_data(b"".join(b"FIN " + i + b"\n" for i in ids[:3]) + b"NOP\n"
                   + b"".join(b"FIN " + i + b"\n" for i in ids[3:]) + b"FIN 0123")
    assert r.next_fins() == ids[:3]
    assert r.next_fins() == []
    assert r.next_event().name == b"NOP"
    assert r.next_fins() == ids[3:]
    assert r.next_fins() == [] and r.next_event() is None
    r.receive_data(b"456789abcdef\n")
    assert r.next_fins() == [b"0123456789abcdef"]


@pytest.mark.parametrize("line", [
    b"FIN 0123456789abcdef\r\n", b"FIN 0123456789abcde\r\n", b"FIN 0123456789abcd\n\n",
    b"FIN 0123 56789abcdef\n", b"FIN 0123456789abcdef 1\n", b"FIN  123456789abcdef\n",
    b"FIN 0123456789abcdefg\n", b"FIN\n", b"FIN 0\n",
    # 21 bytes, as long as a FIN line: the column checks see them
    b"FIN 0123456789abcd\r\n", b"FIX 0123456789abcdef\n", b"FIN 0123456789ab\nNOP\n",
    b"NOP\nFIN 0123456789ab\n", b"FIN 0123456789abcdef "])
def test_next_fins_reads_every_line_as_next_event_does(line):
    data = b"FIN aaaaaaaaaaaaaaaa\n" + line + b"FIN bbbbbbbbbbbbbbbb\n"
    plain = CommandReader(hook)
    plain.receive_data(data)
    fast = CommandReader(hook)
    fast.receive_data(data)
    assert parse_with_fins(fast) == parse_all(plain)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"FIN 0123456789abcdef\n", b"FIN 0123456789abcd\r\n", b"NOP\n",
                                 b"FIN \n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", b"RDY 1\n"]),
                max_size=20),
       st.integers(min_value=1, max_value=30))
def test_next_fins_agrees_with_next_event_whatever_the_reads(lines, step):
    data = b"".join(lines)
    plain, fast = CommandReader(hook), CommandReader(hook)
    got_plain, got_fast = [], []
    for i in range(0, len(data), step):
        plain.receive_data(data[i:i + step])
        fast.receive_data(data[i:i + step])
        got_plain += parse_all(plain)
        got_fast += parse_with_fins(fast)
    assert got_fast == got_plain
