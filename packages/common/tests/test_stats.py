"""nsqd's /stats read as nsqadmin and nsq_stat read it: per-node values, sums across nodes,
nsqadmin's JSON API shapes (Go's internal/clusterinfo)."""

from nsq_common import ChannelStats, ClientStats, Latency, TopicStats, aggregate_channel, aggregate_topic


def client(name: str, connect_ts: int = 1000) -> dict:
    return {"client_id": name, "hostname": name, "version": "V2", "remote_address": f"{name}:1",
            "state": 3, "ready_count": 5, "in_flight_count": 1, "message_count": 7,
            "finish_count": 6, "requeue_count": 0, "connect_ts": connect_ts, "sample_rate": 0,
            "deflate": False, "snappy": True, "user_agent": "test/1.0", "tls": False,
            "tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
            "tls_negotiated_protocol_is_mutual": False}


def topic(name: str, depth: int, backend: int, messages: int, channels: list[dict],
          paused: bool = False) -> dict:
    return {"topic_name": name, "channels": channels, "depth": depth, "backend_depth": backend,
            "message_count": messages, "message_bytes": 0, "paused": paused,
            "e2e_processing_latency": {"count": 0, "percentiles": None}}


def channel(name: str, depth: int, clients: list[dict] | None, paused: bool = False,
            latency: dict | None = None) -> dict:
    return {"channel_name": name, "depth": depth, "backend_depth": 1, "in_flight_count": 2,
            "deferred_count": 3, "message_count": 10, "requeue_count": 4, "timeout_count": 5,
            "client_count": len(clients or []), "clients": clients, "paused": paused,
            "e2e_processing_latency": latency or {"count": 0, "percentiles": None}}


def test_per_node_parse_derives_memory_depth_and_connected():
    raw = topic("t", 10, 4, 100, [channel("c", 6, [client("a", connect_ts=1000)])])
    stats = TopicStats.parse(raw, "n1:4151", "host1", now=1060.5)
    assert (stats.node, stats.hostname, stats.memory_depth) == ("n1:4151", "host1", 6)
    only = stats.channels[0]
    assert (only.topic_name, only.memory_depth, only.node) == ("t", 5, "n1:4151")
    assert only.clients[0].connected == 60 * 10**9
    assert only.clients[0].node == "n1:4151"


def test_aggregate_sums_nodes_and_merges_channels():
    one = TopicStats.parse(topic("t", 10, 4, 100, [channel("a", 1, [client("x")]),
                                                   channel("b", 2, [])]), "n1:1", "h1")
    two = TopicStats.parse(topic("t", 5, 0, 50, [channel("a", 3, [client("w")], paused=True)],
                                 paused=True), "n2:1", "h0")
    total = aggregate_topic("t", [one, two])
    assert (total.node, total.depth, total.memory_depth, total.message_count) == ("*", 15, 11, 150)
    assert total.paused
    assert [n.node for n in total.nodes] == ["n2:1", "n1:1"]  # by hostname
    a, b = total.channels
    assert (a.channel_name, a.depth, a.client_count, a.paused) == ("a", 4, 2, True)
    assert [c.hostname for c in a.clients] == ["w", "x"]
    assert b.clients is None  # Go leaves an empty client list as null
    assert [n.node for n in a.nodes] == ["n2:1", "n1:1"]


def test_json_field_order_matches_go():
    total = aggregate_topic("t", [TopicStats.parse(
        topic("t", 1, 0, 1, [channel("c", 1, [client("x")])]), "n:1", "h")])
    assert list(total.to_json()) == [
        "node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth",
        "message_count", "nodes", "channels", "paused", "e2e_processing_latency"]  # Go's
    assert list(total.channels[0].to_json()) == [
        "node", "hostname", "topic_name", "channel_name", "depth", "memory_depth",
        "backend_depth", "in_flight_count", "deferred_count", "requeue_count", "timeout_count",
        "message_count", "client_count", "nodes", "clients", "paused", "e2e_processing_latency"]
    assert list(total.channels[0].clients[0].to_json())[:8] == [
        "node", "remote_address", "version", "client_id", "hostname", "user_agent",
        "connect_ts", "connected"]
    assert total.to_json()["e2e_processing_latency"] == {
        "count": 0, "percentiles": None, "topic": "t", "channel": "", "host": "*"}


def test_unknown_topic_aggregate_is_the_empty_go_value():
    empty = aggregate_topic("nope", []).to_json()
    assert empty["node"] == "" and empty["nodes"] is None and empty["channels"] is None
    assert empty["e2e_processing_latency"] is None


def test_latency_percentiles_merge_weighted():
    one = Latency.parse({"count": 1, "percentiles": [{"quantile": 0.99, "value": 100.0}]})
    two = Latency.parse({"count": 3, "percentiles": [{"quantile": 0.99, "value": 200.0}]})
    merged = Latency().merged(one, "*", "t").merged(two, "*", "t")
    (p,) = merged.percentiles
    assert (p["min"], p["max"], p["count"], p["average"]) == (100.0, 200.0, 4.0, 175.0)
    assert merged.count == 4


def test_client_parse_tolerates_missing_fields():
    parsed = ClientStats.parse({"hostname": "h"}, "n:1", now=0)
    assert parsed.user_agent == "" and parsed.ready_count == 0


def test_channel_totals_across_nodes_as_nsq_stat_sums_them():
    one = TopicStats.parse(topic("t", 0, 0, 0, [channel("c", 6, None)]), "n1:1", "h1")
    two = TopicStats.parse(topic("t", 0, 0, 0, [channel("c", 2, [client("x")])]), "n2:1", "h2")
    parts = [c for t in (one, two) for c in t.channels if c.channel_name == "c"]
    total = aggregate_channel("t", "c", parts)
    assert (total.depth, total.memory_depth, total.backend_depth) == (8, 6, 2)
    assert (total.in_flight_count, total.deferred_count, total.requeue_count) == (4, 6, 8)
    assert (total.timeout_count, total.message_count, total.client_count) == (10, 20, 1)


def test_the_job_features_keys_in_use_on_some_nodes():
    """A Go nsqd (no job keys) beside ours with a TTL, a limit and dead letters: the sums keep
    what is in use and write it after Go's keys; what no node uses stays out."""
    go = TopicStats.parse(topic("t", 1, 0, 1, [channel("c", 1, []), channel("d", 1, [])]),
                          "go:1", "a")
    ours_raw = topic("t", 1, 0, 1, [{**channel("c", 1, []), "dead_letter_count": 4,
                                     "max_attempts": 3},
                                    channel("d", 1, [])])
    ours_raw["message_ttl"] = 60
    ours = TopicStats.parse(ours_raw, "py:1", "b")
    assert (go.message_ttl, go.channels[0].dead_letter_count, go.channels[0].max_attempts) == (
        0, None, 0)
    total = aggregate_topic("t", [go, ours])
    c, d = total.channels
    assert (c.dead_letter_count, c.expired_count, c.max_attempts) == (4, None, 3)
    assert (d.dead_letter_count, d.expired_count, d.max_attempts) == (None, None, 0)
    raw = total.to_json()
    assert list(raw)[-2:] == ["e2e_processing_latency", "message_ttl"] and raw["message_ttl"] == 60
    assert list(raw["channels"][0])[-3:] == [
        "e2e_processing_latency", "dead_letter_count", "max_attempts"]
    assert list(raw["channels"][1])[-1] == "e2e_processing_latency"
    # a count in use at zero is written: it says the feature is there and nothing happened
    zero = aggregate_channel("t", "c", [ChannelStats.parse(
        {**channel("c", 1, []), "expired_count": 0}, "py:1", "b", "t")])
    assert zero.to_json()["expired_count"] == 0 and "dead_letter_count" not in zero.to_json()
