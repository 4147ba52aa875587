"""The small SVG sparklines of the tables (the full graphs are ``chart.py``'s): one line of
the last ten minutes, no axes, described for screen readers."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape


def downsample(values: Sequence[float], points: int) -> list[float]:
    """At most ``points`` values: the averages of equal runs of ``values``."""
    if len(values) <= points:
        return list(values)
    size = len(values) / points
    runs = [values[round(i * size):round((i + 1) * size)] for i in range(points)]
    return [sum(run) / len(run) for run in runs if run]


def sparkline(values: Sequence[float], label: str, width: int = 120, height: int = 24) -> Markup:
    """An inline SVG line of ``values`` (oldest first), described for screen readers; long
    series are averaged down to one point per two pixels, to keep pages small."""
    title = escape(label)
    if len(values) < 2:
        return Markup(
            f'<svg class="spark spark-empty" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{title}: collecting samples">'
            f'<title>{title}: collecting samples</title>'
            f'<line x1="1" y1="{height - 2}" x2="{width - 1}" y2="{height - 2}"/></svg>')
    summary = (f"{title}: now {_short(values[-1])}, low {_short(min(values))}, "
               f"high {_short(max(values))}")
    values = downsample(values, width // 2)
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = (width - 2) / (len(values) - 1)
    coords = " ".join(
        f"{1 + i * step:.1f},{height - 2 - (v - low) / span * (height - 4):.1f}"
        for i, v in enumerate(values))
    last_x, last_y = coords.rsplit(" ", 1)[-1].split(",")
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{summary}"><title>{summary}</title>'
        f'<polyline points="{coords}"/><circle cx="{last_x}" cy="{last_y}" r="2"/></svg>')


def _short(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}"
