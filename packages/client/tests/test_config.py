import pytest
from nsq_client import Config


def test_defaults_are_go_nsqs() -> None:
    c = Config()
    assert (c.dial_timeout, c.read_timeout, c.write_timeout) == (1.0, 60.0, 1.0)
    assert (c.lookupd_poll_interval, c.lookupd_poll_jitter) == (60.0, 0.3)
    assert (c.max_requeue_delay, c.default_requeue_delay) == (900.0, 90.0)
    assert (c.backoff_strategy, c.max_backoff_duration, c.backoff_multiplier) == ("exponential", 120.0, 1.0)
    assert c.max_attempts == 5 and c.max_in_flight == 1
    assert (c.low_rdy_idle_timeout, c.low_rdy_timeout, c.rdy_redistribute_interval) == (10.0, 30.0, 5.0)
    assert (c.heartbeat_interval, c.output_buffer_size, c.output_buffer_timeout) == (30.0, 16384, 0.25)


@pytest.mark.parametrize("kwargs", [
    {"read_timeout": 0.05}, {"write_timeout": 301}, {"lookupd_poll_jitter": 1.5},
    {"max_attempts": 70000}, {"sample_rate": 100}, {"deflate_level": 0},
    {"backoff_strategy": "linear"}, {"max_in_flight": -1}, {"rdy_redistribute_interval": 6},
    {"heartbeat_interval": 90.0}, {"deflate": True, "snappy": True},
])
def test_out_of_range_options_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Config(**kwargs)


def test_set_parses_text_like_go_nsq() -> None:
    c = Config()
    assert c.set("max_in_flight", "200").max_in_flight == 200
    assert c.set("read-timeout", "1m30s").read_timeout == 90.0
    assert c.set("output_buffer_timeout", "100ms").output_buffer_timeout == 0.1
    assert c.set("lookupd_poll_jitter", "0.5").lookupd_poll_jitter == 0.5
    assert c.set("snappy").snappy is True
    assert c.set("deflate", "false").deflate is False
    assert c.set("user_agent", "x/1").user_agent == "x/1"
    assert c.set("skip_lookupd_authorization", "false").lookupd_authorization is False
    with pytest.raises(ValueError):
        c.set("no_such_option", "1")
    with pytest.raises(ValueError):
        c.set("max_in_flight", "many")
    with pytest.raises(ValueError):
        c.set("max_in_flight")


def test_identify_body_uses_milliseconds_and_minus_one() -> None:
    body = Config(client_id="c", hostname="h", heartbeat_interval=-1, output_buffer_timeout=-1,
                  msg_timeout=30.0, user_agent="ua").identify_body()
    assert body["feature_negotiation"] is True
    assert body["heartbeat_interval"] == -1 and body["output_buffer_timeout"] == -1
    assert body["msg_timeout"] == 30000 and body["output_buffer_size"] == 16384
    assert (body["client_id"], body["short_id"], body["hostname"], body["long_id"]) == ("c", "c", "h", "h")
    assert Config().identify_body()["heartbeat_interval"] == 30000
