"""lmstfy's job ids and names, and how they map onto NSQ's message ids and topics."""

import base64
import os
import struct

from nsqd.lmstfy import ids, names


def test_ulids_round_trip_in_crockford_base32():
    for _ in range(200):
        raw = os.urandom(16)
        text = ids.encode_ulid(raw)
        assert len(text) == 26 and text[0] in "01234567"
        assert ids.decode_ulid(text) == raw == ids.decode_ulid(text.lower())
    assert ids.encode_ulid(bytes(16)) == "0" * 26
    assert ids.encode_ulid(b"\xff" * 16) == "7" + "Z" * 25
    for bad in ("8" + "0" * 25, "0" * 25, "0" * 25 + "U", "0" * 25 + "é"):
        assert ids.decode_ulid(bad) is None


def test_a_job_id_carries_time_delay_and_version_and_maps_to_its_message_id():
    msg_id = ids.new_message_id(now_ms=1_795_000_000_123)
    assert len(msg_id) == 16 and base64.urlsafe_b64decode(msg_id)[:6] == (
        1_795_000_000_123).to_bytes(6, "big")
    job = ids.job_id(msg_id, 90, 0)
    raw = ids.decode_ulid(job)
    assert struct.unpack("<I", raw[12:]) == (90,)  # the delay, as lmstfy's uuid package
    assert ids.timestamp_ms(job) == 1_795_000_000_123
    assert ids.message_id(job) == msg_id
    v1 = ids.job_id(msg_id, 90, 1)
    assert v1 == "1" + job and ids.message_id(v1) == msg_id
    assert ids.message_id(ids.job_id(b"0123456789abcdef", 0, 0)) == b"0123456789abcdef"
    for bad in ("", "nope", "x" + job, "12" + job):
        assert ids.message_id(bad) is None


def test_queue_names_and_topics():
    assert names.name_error("ns", "q-1_a") is None
    assert names.name_error("ns", "_q") == "queue name contains forbidden characters"
    assert names.name_error("n.s", "q") == "namespace name contains forbidden characters"
    assert names.name_error("ns", "q" * 256) == "namespace or queue name too long"
    assert names.queue_list_error("ns", "a,b,,c") is None
    assert names.topic_name("ns", "q") == "lmstfy.ns.q"
    long = names.topic_name("n" * 100, "q" * 100)
    assert len(long) == 64 and long.startswith("lmstfy.nnnn")
    assert long != names.topic_name("n" * 100, "q" * 99)
