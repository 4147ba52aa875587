"""decode_go_struct: Go's json.Unmarshal into a flat struct, the one decoder of IDENTIFY bodies
(nsqd's from clients, nsqlookupd's from nsqd, nsqd's of lookupd's answer)."""

import pytest
from nsq_common import (
    LookupdInfo,
    LookupIdentify,
    ProtocolError,
    ServerFeatures,
    decode_identify,
    decode_lookup_identify,
    decode_lookupd_info,
    negotiate,
)
from nsq_common._gojson import GoKind, decode_go_struct

FIELDS = {"name": GoKind.STRING, "on": GoKind.BOOL, "small": GoKind.INT32,
          "big": GoKind.INT64}


def test_zero_values_and_null() -> None:
    zero = {"name": "", "on": False, "small": 0, "big": 0}
    assert decode_go_struct(b"{}", FIELDS) == zero
    assert decode_go_struct(b" null ", FIELDS) == zero
    assert decode_go_struct(b'{"name":null,"on":null}', FIELDS) == zero
    # null keeps what an earlier key set, as Go leaves the field alone
    assert decode_go_struct(b'{"name":"a","name":null}', FIELDS)["name"] == "a"


def test_keys_match_exactly_else_case_insensitively_last_wins() -> None:
    assert decode_go_struct(b'{"NAME":"a","On":true,"sMaLl":7,"other":[1,{}]}', FIELDS) == {
        "name": "a", "on": True, "small": 7, "big": 0}
    assert decode_go_struct(b'{"name":"a","Name":"b"}', FIELDS)["name"] == "b"
    assert decode_go_struct(b'{"Name":"b","name":"a"}', FIELDS)["name"] == "a"
    # Unicode folding as Go's: the Kelvin sign is a k, the long s an s
    kinds = {"kind": GoKind.STRING, "size": GoKind.INT64}
    assert decode_go_struct('{"\u212aind":"x","\u017fize":2}'.encode(), kinds) == {
        "kind": "x", "size": 2}
    # but not full case folding: "ß" is no "ss"
    assert decode_go_struct('{"cla\u00df":"x"}'.encode(), {"class": GoKind.STRING}) == {
        "class": ""}


@pytest.mark.parametrize("body", [
    b"", b"{", b"[]", b'"x"', b"1", b'{"name":1}', b'{"on":1}', b'{"on":"true"}',
    b'{"small":1.5}', b'{"small":1.0}', b'{"small":1e2}', b'{"small":true}',
    b'{"small":2147483648}', b'{"small":-2147483649}', b'{"big":9223372036854775808}',
    b'{"other":NaN}', b'{"big":Infinity}', b'{} x', b"[" * 100_000,
])
def test_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_go_struct(body, FIELDS)


def test_int_ranges_and_strings_as_go_reads_them() -> None:
    body = b'{"small":-2147483648,"big":9223372036854775807,"name":"a\xff\\udc00"}'
    assert decode_go_struct(body, FIELDS) == {
        "name": "a\ufffd\ufffd", "on": False, "small": -(2**31), "big": 2**63 - 1}


# --- the decoder behind nsqd's and nsqlookupd's IDENTIFY -----------------------------------------


def test_identify_keys_any_case_as_go_nsqd() -> None:
    server = ServerFeatures(version="1.3.0")
    req = decode_identify(b'{"Heartbeat_Interval":-1}')
    assert req.heartbeat_interval == -1
    assert negotiate(req, server).heartbeat_interval == 0
    req = decode_identify(b'{"CLIENT_ID":"c","Feature_Negotiation":true,"Sample_Rate":5,'
                          b'"heartbeat_interval":null,"Short_Id":"s"}')
    assert (req.client_id, req.feature_negotiation, req.sample_rate) == ("c", True, 5)


@pytest.mark.parametrize("body", [
    b'{"Sample_Rate":2147483648}', b'{"Short_Id":1}', b'{"TLS_V1":"yes"}', b'{"x":NaN}',
])
def test_identify_refused(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="IDENTIFY failed to decode JSON body"):
        decode_identify(body)


def test_lookupd_bodies_keys_any_case() -> None:
    body = (b'{"Broadcast_Address":"h","TCP_PORT":4150,"Http_Port":4151,"VERSION":"1.3.0",'
            b'"Remote_Address":"ignored"}')
    assert decode_lookup_identify(body) == LookupIdentify("h", 4150, 4151, "1.3.0")
    info = b'{"TCP_Port":4160,"http_port":4161,"Hostname":"l","Broadcast_address":"b"}'
    assert decode_lookupd_info(info) == LookupdInfo("b", "l", 4161, 4160, "")
    with pytest.raises(ProtocolError, match="IDENTIFY failed to decode JSON body"):
        decode_lookup_identify(b'{"Tcp_Port":"4150"}')
    with pytest.raises(ValueError):
        decode_lookupd_info(b'{"Http_Port":1.5}')
