"""nsqd's /stats shapes (nsq_common.nsqd_stats): written in Go's order with omitempty, read
back with zero values for missing keys, null kept apart from []."""

import pytest
from nsq_common import go_json, nsqd_stats


def client(**overrides) -> nsqd_stats.ClientStats:
    fields = dict(client_id="c", hostname="h", version="V2", remote_address="[::1]:5", state=3,
                  ready_count=1, in_flight_count=0, message_count=2, finish_count=2,
                  requeue_count=0, connect_ts=1700000000, sample_rate=0, deflate=False,
                  snappy=True, user_agent="ua", tls=False, tls_cipher_suite="", tls_version="",
                  tls_negotiated_protocol="", tls_negotiated_protocol_is_mutual=False)
    return nsqd_stats.ClientStats(**fields | overrides)


def test_omitempty_fields_only_when_set_and_in_gos_place():
    plain = client().to_json()
    assert "authed" not in plain and "pub_counts" not in plain
    full = client(authed=True, auth_identity="me",
                  pub_counts=(nsqd_stats.PubCount("t", 4),)).to_json()
    keys = list(full)
    assert keys[keys.index("user_agent") + 1:keys.index("tls")] == [
        "authed", "auth_identity", "pub_counts"]
    assert full["pub_counts"] == [{"topic": "t", "count": 4}]


def test_a_document_round_trips():
    channel = nsqd_stats.ChannelStats(
        channel_name="ch", depth=1, backend_depth=0, in_flight_count=0, deferred_count=0,
        message_count=1, requeue_count=0, timeout_count=0, client_count=1,
        clients=(client(),), paused=False,
        e2e_processing_latency={"count": 0, "percentiles": None},
        dead_letter_count=0, max_attempts=5)
    topic = nsqd_stats.TopicStats(
        topic_name="t", channels=(channel,), depth=0, backend_depth=0, message_count=1,
        message_bytes=5, paused=False, e2e_processing_latency={"count": 0, "percentiles": None},
        message_ttl=30)
    doc = nsqd_stats.Stats(version="1.3.0", health="OK", start_time=1, topics=(topic,),
                           producers=None)
    raw = doc.to_json()
    assert list(raw) == ["version", "health", "start_time", "topics", "producers"]
    assert go_json(raw).endswith(b',"producers":null}')
    assert nsqd_stats.TopicStats.from_json(raw["topics"][0]) == topic
    # the job features' keys after Go's, only those in use (a count in use at 0 is written)
    assert list(raw["topics"][0])[-2:] == ["e2e_processing_latency", "message_ttl"]
    assert list(raw["topics"][0]["channels"][0])[-3:] == [
        "e2e_processing_latency", "dead_letter_count", "max_attempts"]


@pytest.mark.parametrize(("clients", "read"), [(None, None), ([], ())])
def test_missing_keys_read_as_zero_and_null_stays_apart_from_empty(clients, read):
    channel = nsqd_stats.ChannelStats.from_json({"channel_name": "c", "clients": clients})
    assert (channel.depth, channel.paused, channel.clients) == (0, False, read)
    assert channel.e2e_processing_latency is None
    topic = nsqd_stats.TopicStats.from_json({"topic_name": "t", "channels": None})
    assert (topic.channels, topic.message_ttl) == ((), 0)
    assert (channel.expired_count, channel.dead_letter_count) == (None, None)
