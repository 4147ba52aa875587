import json

import pytest
from nsq_common import ProtocolError, ServerFeatures, decode_identify, negotiate, response_json

SERVER = ServerFeatures(version="1.3.0")


def test_defaults_and_response_order():
    neg = negotiate(decode_identify(b'{"feature_negotiation":true}'), SERVER)
    assert response_json(neg, SERVER) == (
        b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,'
        b'"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,'
        b'"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}')


def test_values_applied():
    req = decode_identify(json.dumps({
        "client_id": "c", "hostname": "h", "user_agent": "ua", "heartbeat_interval": 1000,
        "output_buffer_size": -1, "sample_rate": 50, "msg_timeout": 5000, "short_id": "x",
        "unknown": [1, 2]}).encode())
    neg = negotiate(req, SERVER)
    assert (req.client_id, req.hostname, req.user_agent) == ("c", "h", "ua")
    assert (neg.heartbeat_interval, neg.output_buffer_size, neg.output_buffer_timeout) == (1000, 1, 0)
    assert (neg.sample_rate, neg.msg_timeout) == (50, 5000)


def test_heartbeat_disabled():
    assert negotiate(decode_identify(b'{"heartbeat_interval":-1}'), SERVER).heartbeat_interval == 0


@pytest.mark.parametrize(("body", "text"), [
    (b"{", "IDENTIFY failed to decode JSON body"),
    (b"[]", "IDENTIFY failed to decode JSON body"),
    (b'{"heartbeat_interval":"x"}', "IDENTIFY failed to decode JSON body"),
    (b'{"heartbeat_interval":1.5}', "IDENTIFY failed to decode JSON body"),
    (b'{"tls_v1":1}', "IDENTIFY failed to decode JSON body"),
    (b'{"heartbeat_interval":999}', "IDENTIFY heartbeat interval (999) is invalid"),
    (b'{"heartbeat_interval":60001}', "IDENTIFY heartbeat interval (60001) is invalid"),
    (b'{"output_buffer_timeout":24}', "IDENTIFY output buffer timeout (24) is invalid"),
    (b'{"output_buffer_size":63}', "IDENTIFY output buffer size (63) is invalid"),
    (b'{"sample_rate":100}', "IDENTIFY sample rate (100) is invalid"),
    (b'{"msg_timeout":999}', "IDENTIFY msg timeout (999) is invalid"),
    (b'{"heartbeat_interval":5,"sample_rate":100}', "IDENTIFY heartbeat interval (5) is invalid"),
])
def test_errors_in_nsqd_order(body, text):
    with pytest.raises(ProtocolError) as info:
        negotiate(decode_identify(body), SERVER)
    assert info.value.code == "E_BAD_BODY"
    assert info.value.description == text
    assert info.value.fatal


def test_compression_offered_only_when_enabled():
    both = decode_identify(b'{"feature_negotiation":true,"snappy":true,"deflate":true}')
    assert not negotiate(both, SERVER).snappy
    server = ServerFeatures(version="1.3.0", snappy_enabled=True, deflate_enabled=True)
    with pytest.raises(ProtocolError, match="cannot enable both deflate and snappy"):
        negotiate(both, server)
