"""NSQ's HTTP V1 conventions: Go's url.ParseQuery, the first value NSQ reads, error bodies,
and the client's unwrapping of V1 and pre-1.0 answers."""

import pytest
from nsq_common import (
    ACCEPT_V1,
    NSQ_CONTENT_TYPE,
    NSQ_CONTENT_TYPE_V1,
    decode_v1,
    error_json,
    parse_query,
    query_first,
    v1_headers,
)

BAD_QUERIES = (b"t=%", b"t=%g0", b"a=1;b=2", b"%zz=1", b"topic=t;", b"a=%1")


def test_parse_query_like_go() -> None:
    assert parse_query(b"a=1&b=2&a=3") == {"a": ["1", "3"], "b": ["2"]}
    assert parse_query(b"&&k&v=") == {"k": [""], "v": [""]}
    assert parse_query(b"t=a%2Bb+c") == {"t": ["a+b c"]}
    assert parse_query(b"t=%ff") == {"t": ["\udcff"]}
    assert parse_query(b"") == {}
    for bad in BAD_QUERIES:
        with pytest.raises(ValueError):
            parse_query(bad)


@pytest.mark.parametrize("raw", [
    b"", b"topic=t", b"topic=t&channel=c&topic=u", b"&&k&v=", b"t=a%2Bb+c&t=x", b"id=0a%2C0b",
    b"t=%ff", b"t=\xc3\xa9", b"k=1=2",
])
def test_query_first_is_the_first_of_parse_query(raw: bytes) -> None:
    assert query_first(raw) == {key: values[0] for key, values in parse_query(raw).items()}


def test_query_first_refuses_what_go_refuses() -> None:
    for bad in BAD_QUERIES:
        with pytest.raises(ValueError):
            query_first(bad)


def test_headers_and_error_body() -> None:
    assert v1_headers() == {"X-NSQ-Content-Type": "nsq; version=1.0"}
    assert v1_headers() is not v1_headers()
    assert error_json("TOPIC_NOT_FOUND") == b'{"message":"TOPIC_NOT_FOUND"}'
    assert ACCEPT_V1 == "application/vnd.nsq; version=1.0"


def test_decode_v1_and_older_envelopes() -> None:
    v1 = {NSQ_CONTENT_TYPE: NSQ_CONTENT_TYPE_V1}
    assert decode_v1(v1, b'{"producers":[]}') == {"producers": []}
    assert decode_v1(v1, b"") == {}
    assert decode_v1({}, b'{"status_code":200,"status_txt":"OK","data":{"a":1}}') == {"a": 1}
    assert decode_v1({}, b'{"status_code":200,"data":null}') == {}
    assert decode_v1({}, b"[1]") == {}
    with pytest.raises(ValueError):
        decode_v1(v1, b"not json")

