"""Samples of the last minutes, rates from counters, and the SVG sparklines."""

from nsqadmin.history import History, sparkline
from nsqadmin.stats import TopicStats, aggregate_topic


def totals(depth: int, messages: int) -> TopicStats:
    raw = {"topic_name": "t", "depth": depth, "backend_depth": 0, "message_count": messages,
           "paused": False, "channels": [{"channel_name": "c", "depth": depth,
                                          "message_count": messages}]}
    return aggregate_topic("t", [TopicStats.parse(raw, "n:1", "h")])


def test_rates_from_message_counts():
    history = History()
    history.record([totals(5, 100)], now=10.0)
    history.record([totals(7, 150)], now=20.0)
    history.record([totals(2, 250)], now=30.0)
    assert history.values("depth", "t") == [5, 7, 2]
    assert history.rates("t") == [5.0, 10.0]
    assert history.rate("t", "c") == 10.0


def test_counter_reset_gives_no_negative_rate():
    history = History()
    for now, count in ((0.0, 100), (5.0, 120), (10.0, 3), (15.0, 13)):
        history.observe(("messages", "t", ""), count, now)
    assert history.rates("t") == [4.0, 2.0]


def test_close_samples_replace_and_old_ones_expire():
    history = History(window=60.0, min_spacing=1.0)
    history.observe(("depth", "t", ""), 1, now=0.0)
    history.observe(("depth", "t", ""), 2, now=0.5)
    assert history.values("depth", "t") == [2]
    history.observe(("depth", "t", ""), 3, now=30.0)
    history.observe(("depth", "t", ""), 4, now=70.0)
    assert history.values("depth", "t") == [3, 4]
    history.record([], now=500.0)
    assert history.values("depth", "t") == []


def test_sparkline_is_accessible_svg():
    svg = str(sparkline([1, 5, 3], "Depth of t"))
    assert svg.startswith("<svg") and 'role="img"' in svg
    assert "<title>Depth of t: now 3, low 1, high 5</title>" in svg
    assert svg.count(",") >= 3 and "<polyline" in svg
    waiting = str(sparkline([1], "Rate of <t>"))
    assert "collecting samples" in waiting and "&lt;t&gt;" in waiting


def test_long_series_are_averaged_down():
    svg = str(sparkline(list(range(600)), "Depth"))
    assert svg.split('points="')[1].split('"')[0].count(" ") == 59
    assert "now 599, low 0, high 599" in svg  # the summary reads the real values
