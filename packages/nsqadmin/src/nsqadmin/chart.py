"""Full SVG line charts, drawn on the server: a value axis with tick labels and its unit, a
time axis with clock times, a line per series, a legend with the latest values, and hover
values without JavaScript.

Hover is the browser's own: the plot is covered by transparent vertical strips, one per sample
(the latest in each of ``MAX_STRIPS`` slots of the plot's width), each with a ``<title>`` (the
tooltip: time and every line's value) and ``data-t`` / ``data-values`` attributes; CSS shades
the strip under the pointer. The legend's values carry ``data-latest`` so tests and scripts
read what the chart shows.

Value axes start at zero (depths and rates are never negative) and end on a "nice" number;
time ticks fall on round clock times in the server's time zone, which the axis names.
A line breaks where samples are missing (a gap much longer than the usual spacing), rather
than drawing a straight line across a time nsqadmin did not see.
"""

from __future__ import annotations

import datetime
import itertools
import math
import statistics
from collections.abc import Sequence

import attrs
from markupsafe import Markup, escape

WIDTH, HEIGHT = 560, 230
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 44, 38  # margins: tick labels, title + legend, time axis
MAX_STRIPS = 160
NICE = (1.0, 2.0, 2.5, 5.0, 10.0)
TIME_STEPS = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)

NO_VALUE = "\u2013"
Points = Sequence[tuple[float, float | None]]


@attrs.frozen
class Line:
    label: str  # in the legend and tooltips: "Depth"
    points: Points  # (unix time, value or None for "no value here"), oldest first
    style: str = "s1"  # CSS class: s1, s2, s3


@attrs.frozen
class Chart:
    title: str  # "Depth of channel billing"
    unit: str  # the value axis' unit: "messages", "messages/s"
    lines: tuple[Line, ...]
    start: float  # unix times of the left and right edges
    end: float
    integer: bool = True  # values are counts (ticks at whole numbers)
    suffix: str = ""  # after values in the legend and tooltips: "/s"


@attrs.frozen
class Scale:
    """Where values and times land in the plot area."""

    start: float
    end: float
    top: float  # the value at the top edge

    x0: float = LEFT
    x1: float = WIDTH - RIGHT
    y0: float = TOP
    y1: float = HEIGHT - BOTTOM

    def x(self, t: float) -> float:
        return self.x0 + (t - self.start) / (self.end - self.start) * (self.x1 - self.x0)

    def y(self, v: float) -> float:
        return self.y1 - v / self.top * (self.y1 - self.y0)


def value_ticks(high: float, integer: bool) -> list[float]:
    """0 up to the first "nice" number at or above ``high``, in 3 to 6 steps."""
    high = max(high, 1.0 if integer else 0.0) or 1.0
    raw = high / 4
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(n * power for n in NICE if n * power >= raw * 0.999)
    if integer:
        step = max(1.0, math.ceil(step))
    count = math.ceil(high / step - 1e-9)
    return [i * step for i in range(count + 1)]


def time_ticks(start: float, end: float, tz: datetime.tzinfo) -> tuple[list[float], str]:
    """Round clock times between ``start`` and ``end`` (at most 6), and their strftime format."""
    step = next((s for s in TIME_STEPS if (end - start) / s <= 6), TIME_STEPS[-1])
    offset = datetime.datetime.fromtimestamp(start, tz).utcoffset()
    shift = offset.total_seconds() if offset is not None else 0.0
    first = math.ceil((start + shift) / step) * step - shift
    ticks = []
    t = first
    while t <= end + 1e-6:
        ticks.append(t)
        t += step
    return ticks, "%H:%M:%S" if step < 60 else "%H:%M"


def number(value: float) -> str:
    """Legend and tooltip values: ``1,234``, ``12.5``, ``0.25``."""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.1f}"
    return f"{value:.2g}"


def shown(value: float | None, suffix: str = "") -> str:
    return NO_VALUE if value is None else number(value) + suffix


def compact(value: float) -> str:
    """Axis tick labels: ``750``, ``2.5k``, ``1M``, ``0.5``."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def render(chart: Chart, tz: datetime.tzinfo | None = None) -> Markup:
    """The chart as an ``<svg>`` element, scaled to its container's width (viewBox)."""
    zone = tz or datetime.datetime.now().astimezone().tzinfo or datetime.UTC
    values = [v for line in chart.lines for _, v in line.points if v is not None]
    ticks = value_ticks(max(values, default=0.0), chart.integer)
    scale = Scale(chart.start, chart.end, ticks[-1])
    latest = [(line, _last(line.points)) for line in chart.lines]
    summary = _summary(chart, latest, values)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(summary)}" preserveAspectRatio="xMidYMid meet">',
        f"<title>{escape(summary)}</title>",
        f'<text class="chart-title" x="{LEFT}" y="15">{escape(chart.title)}</text>',
        _legend(chart, latest),
        _value_axis(chart, scale, ticks),
        _time_axis(scale, zone),
    ]
    if not values:
        parts.append(f'<text class="chart-empty" x="{(scale.x0 + scale.x1) / 2:.1f}" '
                     f'y="{(scale.y0 + scale.y1) / 2:.1f}" text-anchor="middle">'
                     "collecting samples…</text>")
    for line in chart.lines:
        parts.append(_line(line, scale))
    parts.append(_hover(chart, scale, zone))
    parts.append("</svg>")
    return Markup("".join(parts))


def _last(points: Points) -> float | None:
    return next((v for _, v in reversed(points) if v is not None), None)


def _summary(chart: Chart, latest: list[tuple[Line, float | None]],
             values: list[float]) -> str:
    if not values:
        return f"{chart.title}: collecting samples"
    if len(chart.lines) == 1:
        return (f"{chart.title}: now {shown(latest[0][1], chart.suffix)}, low {number(min(values))}, "
                f"high {number(max(values))}")
    now = ", ".join(f"{line.label} {shown(v, chart.suffix)}" for line, v in latest)
    return f"{chart.title}: now {now}"


def _legend(chart: Chart, latest: list[tuple[Line, float | None]]) -> str:
    out = ['<g class="legend">']
    x = float(LEFT)
    for line, value in latest:
        text = shown(value, chart.suffix)
        data = "" if value is None else f' data-latest="{value:g}"'
        out.append(f'<rect class="swatch {line.style}" x="{x:.0f}" y="24" width="10" '
                   f'height="10" rx="2"/><text class="legend-item" x="{x + 14:.0f}" y="33" '
                   f'data-label="{escape(line.label)}"{data}>{escape(line.label)} '
                   f'<tspan class="legend-value">{text}</tspan></text>')
        x += 14 + 7.2 * (len(line.label) + len(text) + 1) + 18
    out.append("</g>")
    return "".join(out)


def _value_axis(chart: Chart, scale: Scale, ticks: list[float]) -> str:
    out = ['<g class="axis axis-y">']
    for tick in ticks:
        y = scale.y(tick)
        out.append(f'<line class="grid" x1="{scale.x0}" x2="{scale.x1}" y1="{y:.1f}" '
                   f'y2="{y:.1f}"/><text class="tick ytick" x="{scale.x0 - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end" data-value="{tick:g}">{compact(tick)}</text>')
    middle = (scale.y0 + scale.y1) / 2
    out.append(f'<text class="unit" x="12" y="{middle:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 12 {middle:.1f})">{escape(chart.unit)}</text>')
    out.append(f'<line class="axis-line" x1="{scale.x0}" x2="{scale.x0}" y1="{scale.y0}" '
               f'y2="{scale.y1}"/></g>')
    return "".join(out)


def _time_axis(scale: Scale, zone: datetime.tzinfo) -> str:
    ticks, fmt = time_ticks(scale.start, scale.end, zone)
    out = ['<g class="axis axis-x">',
           f'<line class="axis-line" x1="{scale.x0}" x2="{scale.x1}" y1="{scale.y1}" '
           f'y2="{scale.y1}"/>']
    for t in ticks:
        x = scale.x(t)
        label = datetime.datetime.fromtimestamp(t, zone).strftime(fmt)
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{scale.y0}" '
                   f'y2="{scale.y1 + 4}"/><text class="tick xtick" x="{x:.1f}" '
                   f'y="{scale.y1 + 16}" text-anchor="middle" data-t="{t:.0f}">{label}</text>')
    name = datetime.datetime.fromtimestamp(scale.end, zone).strftime("%Z") or "local"
    out.append(f'<text class="unit" x="{scale.x1}" y="{HEIGHT - 4}" text-anchor="end">'
               f"time ({escape(name)})</text></g>")
    return "".join(out)


def _segments(points: Points, window: float) -> list[list[tuple[float, float]]]:
    """Runs of points to join; a missing value or a long silence starts a new run."""
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(points)]
    usual = statistics.median(gaps) if gaps else 0.0
    longest = max(window / 20, 3 * usual)
    runs: list[list[tuple[float, float]]] = []
    previous: float | None = None
    for t, v in points:
        if v is None:
            previous = None
            continue
        if previous is None or t - previous > longest:
            runs.append([])
        runs[-1].append((t, v))
        previous = t
    return runs


def _line(line: Line, scale: Scale) -> str:
    shown = [(t, v) for t, v in line.points if t >= scale.start - 1e-6]
    runs = _segments(shown, scale.end - scale.start)
    out = [f'<g class="series {line.style}" data-label="{escape(line.label)}">']
    path = " ".join("M" + " L".join(f"{scale.x(t):.1f},{scale.y(v):.1f}" for t, v in run)
                    for run in runs)
    if path:
        out.append(f'<path class="line" d="{path}"/>')
    if runs:
        t, v = runs[-1][-1]
        out.append(f'<circle class="dot" cx="{scale.x(t):.1f}" cy="{scale.y(v):.1f}" r="2.5" '
                   f'data-t="{t:.3f}" data-value="{v:g}"/>')
    out.append("</g>")
    return "".join(out)


def _hover(chart: Chart, scale: Scale, zone: datetime.tzinfo) -> str:
    """Transparent strips over the plot, each with a sample's values.

    The plot is cut into ``MAX_STRIPS`` equal slots; a slot with samples shows its latest one,
    and its strip reaches left to the previous such slot (the first to the plot's left edge,
    the last to its right), so every strip is at least a slot wide: samples a second apart
    on a 10-minute axis are under a pixel apart, too narrow to point at.
    """
    by_time: dict[float, list[float | None]] = {}
    for index, line in enumerate(chart.lines):
        for t, v in line.points:
            if scale.start - 1e-6 <= t <= scale.end + 1e-6:
                by_time.setdefault(t, [None] * len(chart.lines))[index] = v
    slot = (scale.x1 - scale.x0) / MAX_STRIPS
    latest_in: dict[int, float] = {}
    for t in sorted(by_time):
        latest_in[min(max(int((scale.x(t) - scale.x0) / slot), 0), MAX_STRIPS - 1)] = t
    slots = sorted(latest_in.items())
    out = ['<g class="hover">']
    for i, (number, t) in enumerate(slots):
        left = scale.x0 if i == 0 else scale.x0 + (slots[i - 1][0] + 1) * slot
        right = scale.x1 if i == len(slots) - 1 else scale.x0 + (number + 1) * slot
        values = by_time[t]
        when = datetime.datetime.fromtimestamp(t, zone).strftime("%H:%M:%S")
        text = " · ".join([when, *(f"{line.label} {shown(v, chart.suffix)}"
                                   for line, v in zip(chart.lines, values, strict=True))])
        data = ",".join("" if v is None else f"{v:g}" for v in values)
        out.append(f'<rect x="{left:.1f}" y="{scale.y0}" width="{right - left:.1f}" '
                   f'height="{scale.y1 - scale.y0}" data-t="{t:.3f}" data-values="{data}">'
                   f"<title>{escape(text)}</title></rect>")
    out.append("</g>")
    return "".join(out)
