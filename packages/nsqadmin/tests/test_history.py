"""The graphs' history: tiers and their bounds, decimation, monotonic counters and rates,
node totals, the series bound. Time is passed in (``now=``) or a fake clock: no sleeping."""

import itertools

from nsq_common import TopicStats, aggregate_topic
from nsqadmin.history import STALE_WHEN_FULL, History


def per_node(node: str, depth: int, messages: int, *, topic: str = "t", channel: str = "c",
             in_flight: int = 0) -> TopicStats:
    raw = {"topic_name": topic, "depth": depth, "backend_depth": 0, "message_count": messages,
           "paused": False, "channels": [{"channel_name": channel, "depth": depth,
                                          "in_flight_count": in_flight,
                                          "message_count": messages}]}
    return TopicStats.parse(raw, node, "h")


def totals(depth: int, messages: int) -> TopicStats:
    return aggregate_topic("t", [per_node("n:1", depth, messages)])


def test_rates_from_message_counts():
    history = History()
    history.record([totals(5, 100)], now=10.0)
    history.record([totals(7, 150)], now=20.0)
    history.record([totals(2, 250)], now=30.0)
    assert history.values("depth", "t") == [5, 7, 2]
    assert history.rates("t") == [5.0, 10.0]
    assert history.rate("t", "c") == 10.0


def test_counter_fed_directly_gives_no_rate_across_a_drop():
    history = History()
    for now, count in ((0.0, 100), (5.0, 120), (10.0, 3), (15.0, 13)):
        history.observe(("messages", "t", "", ""), count, now)
    assert history.rates("t") == [4.0, 2.0]
    assert history.rate_points(("messages", "t", "", ""))[1] == (10.0, None)


def test_nsqd_restart_counts_from_zero_never_negative():
    history = History()
    counts = [("a:1", 1000), ("b:1", 500)]
    history.record([per_node(n, 0, c) for n, c in counts], now=0.0)
    history.record([per_node("a:1", 0, 1100), per_node("b:1", 0, 550)], now=10.0)
    history.record([per_node("a:1", 0, 30), per_node("b:1", 0, 600)], now=20.0)  # a restarted
    assert history.rates("t") == [15.0, 8.0]  # (100 + 50) / 10, (30 + 50) / 10
    assert all(r >= 0 for r in history.rates("t", "c"))


def test_a_node_missing_for_a_while_is_not_a_burst():
    history = History()
    history.record([per_node("a:1", 0, 1000), per_node("b:1", 0, 1_000_000)], now=0.0)
    history.record([per_node("a:1", 0, 1010)], now=10.0)  # b did not answer
    history.record([per_node("a:1", 0, 1020), per_node("b:1", 0, 1_000_100)], now=20.0)
    assert history.rates("t") == [1.0, 11.0]  # b's 100 arrive when it answers again
    assert history.values("depth", "t") == [0, 0, 0]


def test_sliding_point_then_settles_at_the_spacing():
    history = History(min_spacing=1.0)
    key = ("depth", "t", "", "")
    for now, value in ((0.0, 1), (0.5, 2), (0.9, 3), (1.2, 4), (1.5, 5)):
        history.observe(key, value, now)
    # 0.5 and 0.9 were replaced by 1.2 (less than 1 s after 0): every point a real sample
    assert history.points(key) == [(0.0, 1), (1.2, 4), (1.5, 5)]
    assert history.latest(key) == 5


def test_tiers_are_bounded_and_cover_their_windows():
    history = History(min_spacing=1.0)
    key = ("messages", "t", "", "")
    for second in range(0, 7 * 3600):  # 7 hours of one sample a second
        history.observe(key, second * 10.0, float(second))
    fine, hour, six = (history.points(key, w) for w in ("10m", "1h", "6h"))
    assert len(fine) <= 602 and len(hour) <= 362 and len(six) <= 362
    end = 7 * 3600 - 1
    assert fine[-1] == hour[-1] == six[-1] == (end, end * 10.0)  # the latest, everywhere
    assert end - fine[0][0] <= 600 and end - fine[0][0] >= 590
    assert end - hour[0][0] <= 3600 and end - hour[0][0] >= 3580
    assert end - six[0][0] <= 21600 and end - six[0][0] >= 21500
    for points, spacing in ((hour, 10.0), (six, 60.0)):
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(points)]
        assert min(gaps[:-1]) >= spacing
    # decimated, not averaged: rates between kept points are exact
    assert {r for _, r in history.rate_points(key, "6h")} == {10.0}


def test_fine_tier_is_capped_even_without_spacing():
    history = History(min_spacing=0.0)
    key = ("depth", "t", "", "")
    for i in range(5000):
        history.observe(key, i, i * 0.01)
    assert len(history.points(key)) == 602


def test_node_totals_only_from_complete_stats():
    history = History()
    stats = [per_node("a:1", 3, 10, topic="t1", in_flight=2),
             per_node("a:1", 4, 20, topic="t2", in_flight=1), per_node("b:1", 7, 5, topic="t1")]
    history.record(stats, now=0.0, nodes=["a:1", "c:1"])  # c answered with no topics
    # depth of a node: its topics' and their channels' depths
    assert history.latest(("depth", "", "", "a:1")) == 3 + 3 + 4 + 4
    assert history.latest(("in_flight", "", "", "a:1")) == 3
    assert history.latest(("messages", "", "", "a:1")) == 30
    assert history.latest(("depth", "", "", "c:1")) == 0
    assert history.latest(("depth", "", "", "b:1")) is None
    assert history.latest(("depth", "t1", "", "")) == 10  # topics summed over nodes
    assert history.latest(("in_flight", "t1", "c", "")) == 2
    # a node page's stats: the node's totals, not (partial) topic sums
    history.record([per_node("b:1", 9, 6, topic="t1")], now=5.0, nodes=["b:1"], topics=False)
    assert history.latest(("depth", "", "", "b:1")) == 18
    assert history.latest(("depth", "t1", "", "")) == 10


def test_rates_of_nodes_topics_and_channels_with_several_topics():
    """Three topics at different rates on two nodes: every rate is the increase of /stats'
    counters over the same interval (the node's from its topics' counts, each kept apart:
    before, the node's rate was a difference between topics, 10,000 times too high)."""
    counts = {("a:1", "big"): 100_000, ("a:1", "mid"): 500, ("a:1", "small"): 7,
              ("b:1", "big"): 90_000, ("b:1", "small"): 1}
    gains = {("a:1", "big"): 200, ("a:1", "mid"): 30, ("a:1", "small"): 1,
             ("b:1", "big"): 100, ("b:1", "small"): 4}
    history = History()
    for step, now in enumerate((100.0, 110.0, 130.0)):
        stats = [per_node(node, 0, counts[(node, topic)] + step * gains[(node, topic)],
                          topic=topic, channel=f"{topic}-c")
                 for node, topic in sorted(counts)]
        history.record(stats, now=now, nodes=["a:1", "b:1"])
    for node in ("a:1", "b:1"):
        gain = sum(g for (n, _), g in gains.items() if n == node)
        assert history.rates("", "", node) == [gain / 10, gain / 20]
    for topic in ("big", "mid", "small"):
        gain = sum(g for (_, t), g in gains.items() if t == topic)
        assert history.rates(topic) == [gain / 10, gain / 20]
        assert history.rates(topic, f"{topic}-c") == [gain / 10, gain / 20]


def test_series_bound_refuses_new_keys_until_old_ones_go_stale():
    history = History(max_series=3)
    for name in ("a", "b", "c", "d"):
        history.observe(("depth", name, "", ""), 1, now=0.0)
    assert len(history) == 3 and history.latest(("depth", "d", "", "")) is None
    history.record([], now=STALE_WHEN_FULL / 2)
    history.observe(("depth", "a", "", ""), 2, now=STALE_WHEN_FULL / 2)
    history.record([], now=STALE_WHEN_FULL + 1)  # b and c unused for too long: dropped
    assert sorted(k[1] for k in history) == ["a"]
    assert history.observe(("depth", "d", "", ""), 1, now=STALE_WHEN_FULL + 1)


def test_series_expire_after_the_longest_window():
    history = History()
    history.record([totals(1, 1)], now=0.0)
    history.record([], now=6 * 3600 - 1)
    assert history.points(("depth", "t", "", ""), "6h") == [(0.0, 1)]
    history.record([], now=6 * 3600 + 1)
    assert len(history) == 0


def test_fake_clock_is_used_when_no_time_is_given():
    ticks = itertools.count(100)
    history = History(clock=lambda: float(next(ticks)))
    history.observe(("depth", "t", "", ""), 1)
    history.observe(("depth", "t", "", ""), 2)
    assert history.points(("depth", "t", "", "")) == [(100.0, 1), (101.0, 2)]


# -- counts seen for the first time: from zero at their origin


def test_a_topic_new_since_the_nodes_last_sample_counts_from_zero_then():
    """Created and published to between two samples (``make run``: nsqadmin is up first): the
    rate over that interval is all of its messages (before, the first interval had no rate and
    the graph stayed flat)."""
    history = History()
    history.record([per_node("a:1", 0, 5, topic="old")], now=100.0, nodes=["a:1"])
    history.record([per_node("a:1", 0, 5, topic="old"), per_node("a:1", 30, 30)], now=110.0,
                   nodes=["a:1"])
    assert history.points(("messages", "t", "", "")) == [(100.0, 0.0), (110.0, 30.0)]
    assert history.rates("t") == [3.0]
    assert history.rates("t", "c") == [3.0]
    assert history.rates("", "", "a:1") == [3.0]  # the node's: old gained nothing
    assert history.rates("old") == [0.0]
    history.record([per_node("a:1", 0, 5, topic="old"), per_node("a:1", 30, 40)], now=120.0,
                   nodes=["a:1"])
    assert history.rates("t") == [3.0, 1.0]


def test_a_first_sample_counts_from_nsqds_start():
    """nsqadmin's first sample of a node: its counts are averaged since nsqd started."""
    history = History()
    history.record([per_node("a:1", 0, 600)], now=1000.0, nodes=["a:1"],
                   started={"a:1": 700.0})
    assert history.points(("messages", "t", "c", ""), "6h") == [(700.0, 0.0), (1000.0, 600.0)]
    assert history.rates("t") == [2.0]
    assert history.rates("", "", "a:1") == [2.0]
    # a tier keeps the origin only within its window
    history.record([per_node("a:1", 0, 620)], now=1400.0, nodes=["a:1"], started={"a:1": 700})
    assert history.rate_points(("messages", "t", "", ""), "10m") == [(1400.0, 0.05)]
    assert history.rate_points(("messages", "t", "", ""), "1h") == [(1000.0, 2.0),
                                                                  (1400.0, 0.05)]


def test_the_later_origin_wins_and_a_future_start_is_ignored():
    history = History()
    history.record([], now=100.0, nodes=["a:1", "b:1"])
    # a restarted at 105 (its counts are since then); b's clock is ahead: 100 is the origin
    history.record([per_node("a:1", 0, 50), per_node("b:1", 0, 20)], now=110.0,
                   nodes=["a:1", "b:1"], started={"a:1": 105.0, "b:1": 500.0})
    # the nodes' series have points at 100 and 110: the average rates over that interval
    assert history.rate_points(("messages", "", "", "a:1")) == [(110.0, 5.0)]
    assert history.rate_points(("messages", "", "", "b:1")) == [(110.0, 2.0)]
    # the topic's series starts now: b's 20 spread over 100-110, a's 50 over 105-110
    assert history.points(("messages", "t", "", "")) == [(100.0, 0.0), (105.0, 10.0),
                                                         (110.0, 70.0)]


def test_a_node_new_to_an_existing_series_adds_its_share_since_the_last_point():
    history = History()
    history.record([per_node("a:1", 0, 100)], now=0.0, nodes=["a:1"])
    history.record([per_node("a:1", 0, 110)], now=10.0, nodes=["a:1"],
                   started={"b:1": 0.0})  # b does not answer yet
    # b answers at last: up since 0, 40 messages, 20 of them since the series' last point
    history.record([per_node("a:1", 0, 120), per_node("b:1", 0, 40)], now=20.0,
                   nodes=["a:1", "b:1"], started={"a:1": 0.0, "b:1": 0.0})
    assert history.rates("t") == [1.0, 3.0]  # (10 + 20) / 10
    history.record([per_node("a:1", 0, 120), per_node("b:1", 0, 50)], now=30.0,
                   nodes=["a:1", "b:1"])
    assert history.rates("t") == [1.0, 3.0, 1.0]


def test_no_origin_from_partial_stats_nor_a_full_history():
    """A page about one topic fetches only its stats: the node's other topics were not
    absent. And a history that refused a series does not know what it lacked."""
    history = History()
    history.record([per_node("a:1", 0, 5, topic="one")], now=100.0)  # a topic page
    history.record([per_node("a:1", 0, 5, topic="one"), per_node("a:1", 0, 70, topic="two")],
                   now=110.0, nodes=["a:1"])
    assert history.rates("two") == []  # a:1's 70 may be from any time before
    full = History(max_series=1)
    full.observe(("depth", "x", "", ""), 0, now=100.0)
    full.record([per_node("a:1", 0, 70, topic="two")], now=110.0, nodes=["a:1"])
    full.record([], now=110.0 + STALE_WHEN_FULL + 1)  # room again
    full.record([per_node("a:1", 0, 70, topic="two")], now=110.0 + STALE_WHEN_FULL + 2,
                nodes=["a:1"])
    assert full.rates("two") == []
