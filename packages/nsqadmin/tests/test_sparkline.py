"""The tables' SVG sparklines."""

from nsqadmin.sparkline import sparkline


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
