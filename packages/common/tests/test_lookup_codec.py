"""The nsqlookupd V1 codec: exact bytes, every refusal with NSQ's text, arbitrary chunking."""

from __future__ import annotations

import json
import struct

import nsq_common
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nsq_common import (
    MAGIC_V1,
    ConnectionAbort,
    FrameTooBig,
    LookupBadMagic,
    LookupCommand,
    LookupdInfo,
    LookupIdentify,
    LookupPing,
    LookupReader,
    LookupRegister,
    LookupResponseReader,
    LookupSignal,
    LookupUnregister,
    ProtocolError,
    decode_lookup_identify,
    decode_lookupd_info,
    encode_lookup_command,
    encode_lookup_response,
    go_json,
    lookup_response_error,
)

NSQD = LookupIdentify("nsqd.local", 4150, 4151, "1.3.0", hostname="host")
IDENTIFY_BODY = (b'{"broadcast_address":"nsqd.local","hostname":"host","http_port":4151,'
                 b'"tcp_port":4150,"version":"1.3.0"}')


def identify_bytes(body: bytes) -> bytes:
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def events(data: bytes, *, eof: bool = False, reader: LookupReader | None = None) -> list[object]:
    """Feed ``data`` and collect events up to NEED_DATA / CLOSED (included)."""
    reader = reader or LookupReader()
    reader.receive_data(data)
    if eof:
        reader.receive_data(b"")
    out: list[object] = []
    while True:
        event = reader.next_event()
        out.append(event)
        if isinstance(event, LookupSignal):
            return out


def refusal(data: bytes, *, eof: bool = False) -> bytes:
    with pytest.raises(ProtocolError) as info:
        events(data, eof=eof)
    return info.value.text


def test_exports_are_public() -> None:
    for name in ("MAGIC_V1", "LookupReader", "LookupResponseReader", "encode_lookup_command",
                 "encode_lookup_response", "LookupdInfo", "lookup_response_error"):
        assert name in nsq_common.__all__
        assert hasattr(nsq_common, name)


@settings(max_examples=300)
@given(address=st.text(), hostname=st.text(), version=st.text(),
       ports=st.tuples(st.integers(0, 65535), st.integers(0, 65535)))
def test_identify_body_is_go_json_of_the_map(address: str, hostname: str, version: str,
                                              ports: tuple[int, int]) -> None:
    """The IDENTIFY body, written without json for plain strings, is byte for byte what
    ``go_json`` gives for the same map, whatever the strings hold (quotes, <>&, controls,
    U+2028, non-ASCII)."""
    tcp_port, http_port = ports
    body = go_json({"broadcast_address": address, "hostname": hostname, "http_port": http_port,
                    "tcp_port": tcp_port, "version": version})
    identify = LookupIdentify(address, tcp_port, http_port, version, hostname=hostname)
    assert encode_lookup_command(identify) == identify_bytes(body)


# --- client encoders --------------------------------------------------------------------------


def test_command_bytes() -> None:
    assert MAGIC_V1 == b"  V1"
    assert encode_lookup_command(NSQD) == identify_bytes(IDENTIFY_BODY)
    assert encode_lookup_command(LookupRegister("t")) == b"REGISTER t\n"
    assert encode_lookup_command(LookupRegister("t", "c")) == b"REGISTER t c\n"
    assert encode_lookup_command(LookupUnregister("t")) == b"UNREGISTER t\n"
    assert encode_lookup_command(LookupUnregister("t", "c#ephemeral")) == (
        b"UNREGISTER t c#ephemeral\n")
    assert encode_lookup_command(LookupPing()) == b"PING\n"


def test_response_bytes() -> None:
    assert encode_lookup_response(b"OK") == b"\x00\x00\x00\x02OK"
    assert encode_lookup_response(b"") == b"\x00\x00\x00\x00"


def test_lookupd_info_round_trip_and_sorted_keys() -> None:
    info = LookupdInfo("lookupd", "host", 4161, 4160, "1.3.0")
    assert info.encode() == (b'{"broadcast_address":"lookupd","hostname":"host",'
                             b'"http_port":4161,"tcp_port":4160,"version":"1.3.0"}')
    assert decode_lookupd_info(info.encode()) == info
    assert decode_lookupd_info(b'{"tcp_port":1}') == LookupdInfo("", "", 0, 1, "")
    with pytest.raises(ValueError):
        decode_lookupd_info(b"OK")


def test_response_error() -> None:
    assert lookup_response_error(b"OK") is None
    assert lookup_response_error(b"{}") is None
    err = lookup_response_error(b"E_INVALID client must IDENTIFY")
    assert err is not None and (err.code, err.description) == ("E_INVALID", "client must IDENTIFY")
    bare = lookup_response_error(b"E_BAD_PROTOCOL")
    assert bare is not None and (bare.code, bare.description) == ("E_BAD_PROTOCOL", "")


def test_response_reader() -> None:
    reader = LookupResponseReader()
    data = encode_lookup_response(b"OK") + encode_lookup_response(b"E_INVALID x")
    reader.receive_data(data[:3])
    assert reader.next_event() is None
    reader.receive_data(data[3:5])
    assert reader.next_event() is None
    reader.receive_data(data[5:8])
    assert reader.next_event() == b"OK"
    assert reader.next_event() is None
    reader.receive_data(data[8:])
    assert reader.next_event() == b"E_INVALID x"
    assert reader.next_event() is None


def test_response_reader_limits() -> None:
    reader = LookupResponseReader(max_size=10)
    reader.receive_data(struct.pack(">i", 11))
    with pytest.raises(FrameTooBig):
        reader.next_event()
    reader = LookupResponseReader()
    reader.receive_data(struct.pack(">i", -1))
    with pytest.raises(ConnectionAbort):
        reader.next_event()


# --- server reader ----------------------------------------------------------------------------


def test_session() -> None:
    data = (MAGIC_V1 + b"PING\n" + identify_bytes(IDENTIFY_BODY) + b"REGISTER t c\n"
            + b"REGISTER t\nUNREGISTER t c\r\nUNREGISTER t\n")
    assert events(data) == [LookupPing(), NSQD, LookupRegister("t", "c"), LookupRegister("t"),
                            LookupUnregister("t", "c"), LookupUnregister("t"),
                            LookupSignal.NEED_DATA]


def test_identified_flag_and_magic() -> None:
    reader = LookupReader()
    assert events(MAGIC_V1, reader=reader) == [LookupSignal.NEED_DATA]
    assert reader.magic == MAGIC_V1 and not reader.identified
    events(identify_bytes(IDENTIFY_BODY), reader=reader)
    assert reader.identified


def test_clean_close() -> None:
    assert events(b"", eof=True) == [LookupSignal.CLOSED]
    assert events(b"  V", eof=True) == [LookupSignal.CLOSED]
    assert events(MAGIC_V1 + b"PING\nPIN", eof=True) == [LookupPing(), LookupSignal.CLOSED]


def test_line_trimming_and_params() -> None:
    ident = MAGIC_V1 + identify_bytes(IDENTIFY_BODY)
    assert events(ident + b"  REGISTER t c \t\r\n")[1] == LookupRegister("t", "c")
    # Go's strings.TrimSpace also takes Unicode spaces (NBSP here)
    assert events(ident + "REGISTER t\u00a0\n".encode())[1] == LookupRegister("t")
    # an empty second param means "no channel"; extra params are ignored
    assert events(ident + b"REGISTER t  c\n")[1] == LookupRegister("t")
    assert events(ident + b"REGISTER t c x y\n")[1] == LookupRegister("t", "c")
    assert events(MAGIC_V1 + b"PING extra\n")[0] == LookupPing()


def test_bad_magic() -> None:
    with pytest.raises(LookupBadMagic) as info:
        events(b"  V2PING\n")
    assert info.value.text == b"E_BAD_PROTOCOL"
    assert info.value.code == "E_BAD_PROTOCOL"
    assert encode_lookup_response(info.value.text) == b"\x00\x00\x00\x0eE_BAD_PROTOCOL"


# What comes before the refused command: the magic alone, or the magic and an IDENTIFY.
BEFORE_IDENTIFY = MAGIC_V1
IDENTIFIED = MAGIC_V1 + identify_bytes(IDENTIFY_BODY)


@pytest.mark.parametrize(("before", "data", "text"), [
    (BEFORE_IDENTIFY, b"FOO\n", b"E_INVALID invalid command FOO"),
    (BEFORE_IDENTIFY, b"\n", b"E_INVALID invalid command "),
    (BEFORE_IDENTIFY, b"ping\n", b"E_INVALID invalid command ping"),
    (BEFORE_IDENTIFY, b"\xff\xfe bar\n", b"E_INVALID invalid command \xff\xfe"),
    (BEFORE_IDENTIFY, b"REGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (BEFORE_IDENTIFY, b"UNREGISTER t c\n", b"E_INVALID client must IDENTIFY"),
    (BEFORE_IDENTIFY, b"REGISTER\n", b"E_INVALID client must IDENTIFY"),
    (IDENTIFIED, b"IDENTIFY\n", b"E_INVALID cannot IDENTIFY again"),
    (IDENTIFIED, b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
    (IDENTIFIED, b"UNREGISTER \n", b"E_INVALID UNREGISTER insufficient number of params"),
    (IDENTIFIED, b"REGISTER bad!topic\n", b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid"),
    (IDENTIFIED, b"UNREGISTER  t\n", b"E_BAD_TOPIC UNREGISTER topic name '' is not valid"),
    (IDENTIFIED, b"REGISTER " + b"x" * 65 + b"\n",
     b"E_BAD_TOPIC REGISTER topic name '" + b"x" * 65 + b"' is not valid"),
    (IDENTIFIED, b"REGISTER t bad/chan\n", b"E_BAD_CHANNEL REGISTER channel name 'bad/chan' is not valid"),
    (IDENTIFIED, b"UNREGISTER t c\xff\n", b"E_BAD_CHANNEL UNREGISTER channel name 'c\xff' is not valid"),
])
def test_refusals(before: bytes, data: bytes, text: bytes) -> None:
    assert refusal(before + data) == text


NOT_JSON = b"E_BAD_BODY IDENTIFY failed to decode JSON body"
MISSING_FIELDS = b"E_BAD_BODY IDENTIFY missing fields"


@pytest.mark.parametrize(("body", "text"), [
    (b"", NOT_JSON),
    (b"not json", NOT_JSON),
    (b"[1,2]", NOT_JSON),
    (b'"str"', NOT_JSON),
    (b'{"tcp_port":"4150"}', NOT_JSON),
    (b'{"tcp_port":4150.5}', NOT_JSON),
    (b'{"tcp_port":1e3}', NOT_JSON),
    (b'{"tcp_port":true}', NOT_JSON),
    (b'{"tcp_port":99999999999999999999}', NOT_JSON),
    (b'{"version":1}', NOT_JSON),
    (b'{"hostname":NaN}', NOT_JSON),
    (b'{"a":1} {}', NOT_JSON),
    (b"[" * 100000, NOT_JSON),
    (b"null", MISSING_FIELDS),
    (b"{}", MISSING_FIELDS),
    (b'{"broadcast_address":"a","tcp_port":1,"http_port":2}', MISSING_FIELDS),
    (b'{"broadcast_address":"","tcp_port":1,"http_port":2,"version":"v"}', MISSING_FIELDS),
    (b'{"broadcast_address":"a","tcp_port":0,"http_port":2,"version":"v"}', MISSING_FIELDS),
    (b'{"broadcast_address":"a","tcp_port":1,"http_port":null,"version":"v"}', MISSING_FIELDS),
])
def test_identify_body_refusals(body: bytes, text: bytes) -> None:
    assert refusal(MAGIC_V1 + identify_bytes(body)) == text


def test_identify_size_refusals() -> None:
    start = MAGIC_V1 + b"IDENTIFY\n"
    assert refusal(start + b"\x00\x00", eof=True) == b"E_BAD_BODY IDENTIFY failed to read body size"
    assert refusal(start, eof=True) == b"E_BAD_BODY IDENTIFY failed to read body size"
    assert refusal(start + struct.pack(">i", 10) + b"{}", eof=True) == (
        b"E_BAD_BODY IDENTIFY failed to read body")
    assert refusal(start + struct.pack(">i", -1)) == b"E_BAD_BODY IDENTIFY invalid body size -1"
    reader = LookupReader(max_identify_size=100)
    reader.receive_data(start + struct.pack(">i", 101))
    with pytest.raises(ProtocolError) as info:
        reader.next_event()
    assert info.value.text == b"E_BAD_BODY IDENTIFY body too big 101 > 100"


def test_identify_waits_for_its_body() -> None:
    reader = LookupReader()
    data = MAGIC_V1 + identify_bytes(IDENTIFY_BODY)
    for i in range(len(data) - 1):
        reader.receive_data(data[i : i + 1])
        assert reader.next_event() is LookupSignal.NEED_DATA
    reader.receive_data(data[-1:])
    assert reader.next_event() == NSQD


def test_second_identify_refused_before_its_body() -> None:
    # nsqlookupd answers at once, without waiting for a body that may never come
    assert refusal(MAGIC_V1 + identify_bytes(IDENTIFY_BODY) + b"IDENTIFY\n") == (
        b"E_INVALID cannot IDENTIFY again")


def test_over_long_line_aborts() -> None:
    reader = LookupReader(max_line=32)
    reader.receive_data(MAGIC_V1 + b"P" * 33)
    with pytest.raises(ConnectionAbort):
        reader.next_event()
    reader = LookupReader(max_line=32)
    reader.receive_data(MAGIC_V1 + b"P" * 32)
    assert reader.next_event() is LookupSignal.NEED_DATA


def test_reader_stays_failed() -> None:
    reader = LookupReader()
    reader.receive_data(MAGIC_V1 + b"FOO\nPING\n")
    with pytest.raises(ProtocolError):
        reader.next_event()
    with pytest.raises(ProtocolError):
        reader.next_event()


def test_identify_body_go_json_rules() -> None:
    # unknown keys ignored, case-insensitive keys, last duplicate wins, remote_address ignored
    body = json.dumps({"BROADCAST_ADDRESS": "x", "Tcp_Port": 1, "http_port": 2, "version": "v",
                       "remote_address": "1.2.3.4:5", "short_id": "s", "hostname": None}).encode()
    assert decode_lookup_identify(body) == LookupIdentify("x", 1, 2, "v")
    dup = b'{"broadcast_address":"a","broadcast_address":"b","tcp_port":1,"http_port":2,"version":"v"}'
    assert decode_lookup_identify(dup).broadcast_address == "b"
    # invalid UTF-8 and lone surrogates become U+FFFD, as Go's decoder does
    odd = (b'{"broadcast_address":"a\xff","hostname":"\\ud800","tcp_port":-1,"http_port":2,'
           b'"version":"v"}')
    assert decode_lookup_identify(odd) == LookupIdentify("a\ufffd", -1, 2, "v", "\ufffd")


# --- properties -------------------------------------------------------------------------------

_names = st.from_regex(r"[.a-zA-Z0-9_-]{1,54}(#ephemeral)?", fullmatch=True)
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
_ports = st.integers(-(2**63), 2**63 - 1).filter(bool)
_identify = st.builds(LookupIdentify, _text.filter(bool), _ports, _ports, _text.filter(bool),
                      _text)
_topic_cmd = st.builds(LookupRegister, _names, st.none() | _names) | st.builds(
    LookupUnregister, _names, st.none() | _names)
_after = st.lists(_topic_cmd | st.just(LookupPing()), max_size=12)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at ``cuts``, never an empty piece (``b""`` would mean EOF)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    return [p for p in pieces if p]


# No deadline: Hypothesis' default, 200 ms of wall clock per example, is what a slow, busy
# machine breaks.
@settings(deadline=None)
@given(pings=st.integers(0, 2), identify=_identify, rest=_after,
       cuts=st.lists(st.integers(0, 10**6), max_size=20))
def test_round_trip_any_chunking(pings: int, identify: LookupIdentify, rest: list[LookupCommand],
                                 cuts: list[int]) -> None:
    commands: list[LookupCommand] = [LookupPing()] * pings + [identify, *rest]
    data = MAGIC_V1 + b"".join(encode_lookup_command(c) for c in commands)
    reader = LookupReader()
    got: list[object] = []
    for chunk in _chunks(data, cuts):
        reader.receive_data(chunk)
        while not isinstance(event := reader.next_event(), LookupSignal):
            got.append(event)
        assert event is LookupSignal.NEED_DATA
    reader.receive_data(b"")
    assert reader.next_event() is LookupSignal.CLOSED
    assert got == commands


@settings(deadline=None)
@given(answers=st.lists(st.binary(max_size=300), max_size=10),
       cuts=st.lists(st.integers(0, 10**6), max_size=20))
def test_responses_any_chunking(answers: list[bytes], cuts: list[int]) -> None:
    data = b"".join(encode_lookup_response(a) for a in answers)
    reader = LookupResponseReader()
    got = []
    for chunk in _chunks(data, cuts):
        reader.receive_data(chunk)
        while (answer := reader.next_event()) is not None:
            got.append(answer)
    assert got == answers


@settings(deadline=None)
@given(st.binary(max_size=400))
def test_garbage_only_ever_raises_protocol_errors(data: bytes) -> None:
    for prefix in (b"", MAGIC_V1, MAGIC_V1 + identify_bytes(IDENTIFY_BODY)):
        reader = LookupReader(max_line=64)
        reader.receive_data(prefix + data)
        reader.receive_data(b"")
        try:
            while not isinstance(reader.next_event(), LookupSignal):
                pass
        except (ProtocolError, ConnectionAbort):
            pass
