"""The server-drawn SVG charts: axes and their labels, where values land, gaps, hover values."""

import datetime
import itertools
import re
import xml.etree.ElementTree as ET

from nsqadmin.chart import Chart, Line, Scale, compact, number, render, time_ticks, value_ticks

SVG = "{http://www.w3.org/2000/svg}"
UTC = datetime.UTC
T0 = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=UTC).timestamp()  # 12:00:00 UTC


def parse(chart: Chart) -> ET.Element:
    svg = str(render(chart, tz=UTC)).replace("<svg ", f'<svg xmlns="{SVG[1:-1]}" ', 1)
    return ET.fromstring(svg)


def texts(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}text") if cls in e.get("class", "").split()]


def path_points(root: ET.Element, label: str) -> list[tuple[float, float]]:
    group = next(g for g in root.iter(f"{SVG}g") if g.get("data-label") == label)
    d = group.find(f"{SVG}path").get("d")
    return [(float(x), float(y)) for x, y in re.findall(r"([\d.]+),([\d.]+)", d)]


def depth_chart(points, **kw) -> Chart:
    return Chart("Depth of channel c", "messages", (Line("Depth", points),), T0 - 600, T0, **kw)


def test_value_ticks_are_nice_and_cover_the_maximum():
    assert value_ticks(1000, True) == [0, 250, 500, 750, 1000]
    assert value_ticks(0, True) == [0, 1]
    assert value_ticks(3, True) == [0, 1, 2, 3]
    assert value_ticks(1234, True) == [0, 500, 1000, 1500]
    assert value_ticks(0.7, False) == [0, 0.2, 0.4, 0.6000000000000001, 0.8]
    assert compact(2500) == "2.5k" and compact(1_000_000) == "1M" and compact(0.5) == "0.5"
    assert number(1234) == "1,234" and number(12.34) == "12.3" and number(0.125) == "0.12"


def test_time_ticks_fall_on_round_clock_times():
    ticks, fmt = time_ticks(T0 - 600, T0, UTC)
    assert fmt == "%H:%M" and [t - T0 for t in ticks] == [-600, -480, -360, -240, -120, 0]
    hour, _ = time_ticks(T0 - 3600 + 30, T0 + 30, UTC)
    assert [t - T0 for t in hour] == [-3000, -2400, -1800, -1200, -600, 0]
    six, _ = time_ticks(T0 - 21600, T0, UTC)
    assert len(six) == 7 and all(t % 3600 == 0 for t in six)
    plus_half = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
    local, _ = time_ticks(T0 - 3600, T0, plus_half)  # 17:30 local: ticks on local :00/:10
    assert all((t + 5.5 * 3600) % 600 == 0 for t in local)


def test_axes_labels_units_and_time():
    root = parse(depth_chart([(T0 - 300, 10), (T0 - 200, 400), (T0, 1000)]))
    assert [e.text for e in texts(root, "ytick")] == ["0", "250", "500", "750", "1k"]
    assert [e.text for e in texts(root, "xtick")] == ["11:50", "11:52", "11:54", "11:56",
                                                      "11:58", "12:00"]
    units = [e.text for e in texts(root, "unit")]
    assert units == ["messages", "time (UTC)"]
    assert texts(root, "chart-title")[0].text == "Depth of channel c"
    assert root.get("aria-label") == "Depth of channel c: now 1,000, low 10, high 1,000"


def test_values_are_placed_on_their_ticks():
    points = [(T0 - 600, 0), (T0 - 300, 500), (T0, 1000)]
    root = parse(depth_chart(points))
    tick_y = {float(e.get("data-value")): float(e.get("y")) - 4 for e in texts(root, "ytick")}
    tick_x = {float(e.get("data-t")): float(e.get("x")) for e in texts(root, "xtick")}
    drawn = path_points(root, "Depth")
    assert drawn[0] == (tick_x[T0 - 600], tick_y[0])
    assert drawn[1][1] == tick_y[500]
    assert drawn[2] == (tick_x[T0], tick_y[1000])
    scale = Scale(T0 - 600, T0, 1000)
    assert abs(drawn[1][0] - scale.x(T0 - 300)) < 0.06
    dot = next(root.iter(f"{SVG}circle"))
    assert float(dot.get("data-value")) == 1000 and float(dot.get("cx")) == tick_x[T0]


def test_legend_and_hover_values():
    chart = Chart("Depth and in flight of channel c", "messages",
                  (Line("Depth", [(T0 - 10, 7), (T0, 5)]),
                   Line("In flight", [(T0 - 10, 1), (T0, 2)], "s2")), T0 - 600, T0)
    root = parse(chart)
    legend = {e.get("data-label"): e.get("data-latest") for e in texts(root, "legend-item")}
    assert legend == {"Depth": "5", "In flight": "2"}
    strips = [r for r in root.iter(f"{SVG}rect") if r.get("data-t")]
    assert [r.get("data-values") for r in strips] == ["7,1", "5,2"]
    assert strips[-1].find(f"{SVG}title").text == "12:00:00 · Depth 5 · In flight 2"
    assert root.get("aria-label") == "Depth and in flight of channel c: now Depth 5, In flight 2"


def test_rates_gaps_and_suffix():
    points = [(T0 - 50, 2.0), (T0 - 40, None), (T0 - 30, 4.0), (T0 - 20, 4.5),
              (T0 - 10, 5.0), (T0, 6.0)]
    chart = Chart("Messages per second to t", "messages/s", (Line("Rate", points),),
                  T0 - 600, T0, integer=False, suffix="/s")
    root = parse(chart)
    d = next(root.iter(f"{SVG}path")).get("d")
    assert d.count("M") == 2  # broken where there was no rate
    assert root.get("aria-label").startswith("Messages per second to t: now 6/s")
    strip = [r for r in root.iter(f"{SVG}rect") if r.get("data-t")][1]
    assert strip.find(f"{SVG}title").text.endswith("Rate \u2013")
    # a long silence (nsqadmin was stopped) breaks the line too
    silent = [(T0 - 590, 1), (T0 - 585, 1), (T0 - 100, 2), (T0 - 95, 2)]
    assert parse(depth_chart(silent)).find(f".//{SVG}path").get("d").count("M") == 2


def test_empty_chart_still_has_axes():
    root = parse(depth_chart([]))
    assert texts(root, "chart-empty")[0].text == "collecting samples…"
    assert [e.text for e in texts(root, "ytick")] == ["0", "1"]
    assert len(texts(root, "xtick")) == 6 and root.find(f".//{SVG}path") is None


def test_many_samples_make_at_most_max_strips():
    points = [(T0 - 600 + i, float(i)) for i in range(601)]
    root = parse(depth_chart(points))
    assert len([r for r in root.iter(f"{SVG}rect") if r.get("data-t")]) == 160
    assert len(path_points(root, "Depth")) == 601


def test_samples_a_second_apart_still_make_strips_wide_enough_to_point_at():
    """A page open for a few seconds: its samples are under a pixel apart on the 10-minute
    axis; each strip is at least a slot (1/160 of the plot) wide, the last ends at the plot's
    right edge with the latest values, and the strips tile the plot without gaps."""
    points = [(T0 - 3 + i * 0.9, float(i)) for i in range(4)]
    root = parse(depth_chart(points))
    strips = [r for r in root.iter(f"{SVG}rect") if r.get("data-t")]
    slot = (Scale(T0 - 600, T0, 1).x1 - Scale(T0 - 600, T0, 1).x0) / 160
    assert all(float(r.get("width")) >= slot - 0.1 for r in strips)
    edges = [(float(r.get("x")), float(r.get("x")) + float(r.get("width"))) for r in strips]
    assert all(abs(a[1] - b[0]) < 0.11 for a, b in itertools.pairwise(edges))
    assert strips[-1].get("data-values") == "3" and abs(edges[-1][1] - 546) < 0.11
    assert strips[0].get("x") == "58.0"
