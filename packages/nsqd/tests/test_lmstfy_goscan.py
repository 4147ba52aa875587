"""A body that is not JSON, refused where Go's ``encoding/json`` scanner refuses it: the
``SyntaxError.Offset`` Go reports counts the bytes read up to and including the first that
cannot continue the value (the table follows ``scanner.go``'s states), input that ends inside a
value is ``io.ErrUnexpectedEOF`` (``{}`` once marshalled), and a limiter's JSON answered so."""

from __future__ import annotations

import pytest
from nsq_serving import HttpError
from nsqd.lmstfy.goscan import MAX_DEPTH, EndOfInput, SyntaxError_, scan_value
from nsqd.lmstfy.limiter_json import decode_limiter


@pytest.mark.parametrize(("data", "offset"), [
    (b"not json", 2),        # 'n' begins null, 'o' is not its 'u'
    (b"x", 1),               # looking for beginning of value
    (b"  x", 3),             # spaces are read too
    (b"nul!", 4), (b"fals3", 5), (b"-x", 2), (b"1.x", 3), (b"1e+x", 4),
    (b"[01]", 3), (b"[1x]", 3), (b"[1,]", 4), (b"[,", 2),
    (b'{"a" 1}', 6), (b"{a}", 2), (b"{,}", 2), (b'{"a":}', 6), (b'{"a":1,}', 8),
    (b'{"a":1 "b":2}', 8), (b'"a\x01"', 3), (b'"\\x"', 3), (b'"\\u12G4"', 6),
    (b"\xef\xbb\xbf{}", 1),  # no BOM
])
def test_syntax_errors_at_go_s_offsets(data, offset):
    with pytest.raises(SyntaxError_) as caught:
        scan_value(data)
    assert caught.value.offset == offset


@pytest.mark.parametrize("data", [b"tru", b"-", b"1.", b"1e", b"[", b'{"a":1', b'"\\u12',
                                  b'"abc', b"", b" \n\t"])
def test_input_that_ends_inside_a_value(data):
    with pytest.raises(EndOfInput):
        scan_value(data)


@pytest.mark.parametrize(("data", "end"), [
    (b"01", 1), (b"1x", 1), (b"12 3", 2),  # a top-level number ends where it cannot go on
    (b"{}x", 2), (b"[]", 2), (b"nullx", 4), (b' "s"', 4),
    (b'"\xff\xfe"', 4),      # bytes, not UTF-8: any byte from 0x20 up is a string's
])
def test_where_the_first_value_ends(data, end):
    assert scan_value(data) == end


def test_nesting_deeper_than_go_s_limit():
    assert scan_value(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) == 2 * MAX_DEPTH
    with pytest.raises(SyntaxError_) as caught:
        scan_value(b"[" * (MAX_DEPTH + 1))
    assert caught.value.offset == MAX_DEPTH + 1


@pytest.mark.parametrize(("body", "error"), [
    (b"not json", b'{"error":{"Offset":2}}'),
    (b'{"read":1,"write":2 "interval":3}', b'{"error":{"Offset":21}}'),
    (b'{"read":tru}', b'{"error":{"Offset":12}}'),
    (b'{"read":1', b'{"error":{}}'),
    (b'{"read":' + b"[" * 5000 + b"]" * 5000 + b"}",
     b'{"error":{"Value":"array","Type":{},"Offset":9,"Struct":"Limiter","Field":"read"}}'),
])
def test_a_limiter_that_is_not_json(body, error):
    with pytest.raises(HttpError) as caught:
        decode_limiter(body)
    assert (caught.value.status, caught.value.body) == (400, error)


def test_a_limiter_with_any_bytes_in_an_ignored_string():
    assert decode_limiter(b'{"read":1,"note":"\xff","write":2,"interval":3}') == (1, 2, 3)
