"""Jinja filters: numbers with thousands separators, durations, rates, percentages."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from nsq_common import format_go_duration

if TYPE_CHECKING:
    import jinja2


def commafy(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def human_duration(nanoseconds: float) -> str:
    """``3h 4m``, ``5m 2s``, ``12s``, ``250ms``, ``17µs``: two units at most."""
    seconds = nanoseconds / 1e9
    if seconds < 1e-3:
        return f"{nanoseconds / 1e3:.0f}µs"
    if seconds < 1:
        return f"{seconds * 1e3:.0f}ms"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n]
    return " ".join(shown[:2]) or "0s"


def rate(value: float | None) -> str:
    if value is None:
        return "\u2013"
    if value >= 100:
        return f"{value:,.0f}/s"
    return f"{value:,.1f}/s"


def timestamp(unix_seconds: int) -> str:
    """ISO time in UTC, for ``<time datetime=...>``."""
    moment = datetime.datetime.fromtimestamp(unix_seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def go_duration(nanoseconds: int) -> str:
    """``24h0m0s``: as nsqd takes a duration (``retention=``)."""
    return format_go_duration(nanoseconds / 1e9)


def percent(quantile: float) -> str:
    text = f"{quantile * 100:.2f}".rstrip("0").rstrip(".")
    return f"p{text}"


def path_segment(value: str) -> str:
    """A topic, channel or node name as one URL path segment (``#ephemeral`` -> ``%23``)."""
    return quote(value, safe=":[]")


def install_filters(env: jinja2.Environment) -> None:
    env.filters.update(commafy=commafy, duration=human_duration, rate=rate,
                       timestamp=timestamp, percent=percent, seg=path_segment,
                       go_duration=go_duration)
