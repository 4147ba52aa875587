"""What every HTML page shares: its warnings, rendering (a full page or its ``#live``
region), error pages, and the path of each page.

Below the page loaders (``views``) and the actions posted to them (``actions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from .formatting import path_segment
from .history import WINDOW_NAMES
from .report import Report, clear_flash, read_flash
from .sparkline import sparkline
from .state import Admin, admin_of
from .upstream import UpstreamError
from .web import is_htmx

Context = dict[str, Any]


@attrs.define(eq=False)
class Warnings:
    """Upstream errors met while loading a page, one per daemon address."""

    errors: dict[str, UpstreamError] = attrs.field(factory=dict)

    def add(self, errors: Iterable[UpstreamError]) -> None:
        for error in errors:
            self.errors.setdefault(error.address, error)

    def __contains__(self, address: str) -> bool:
        return address in self.errors

    def __iter__(self) -> Iterator[UpstreamError]:
        return iter(self.errors.values())

    def __len__(self) -> int:
        return len(self.errors)


def page_path(page: str, params: dict[str, str]) -> str:
    if page == "topic":
        return f"/topics/{path_segment(params['topic'])}"
    if page == "channel":
        return f"/topics/{path_segment(params['topic'])}/{path_segment(params['channel'])}"
    if page == "peek":
        return (f"/topics/{path_segment(params['topic'])}/{path_segment(params['channel'])}"
                "/peek")
    if page == "node":
        return f"/nodes/{path_segment(params['node'])}"
    if page in ("namespace", "queue"):
        path = f"/jobs/{path_segment(params['node'])}/{path_segment(params['namespace'])}"
        return f"{path}/{path_segment(params['queue'])}" if page == "queue" else path
    return {"topics": "/", "lookup": "/lookup", "nodes": "/nodes", "counter": "/counter",
            "jobs": "/jobs"}[page]


def _charts(admin: Admin) -> Context:
    history = admin.history

    def spark(metric: str, topic: str, channel: str = "", label: str = "") -> Markup:
        values = history.rates(topic, channel) if metric == "rate" else history.values(
            metric, topic, channel)
        return sparkline(values, label or f"{metric} of {topic}")

    def rate(topic: str, channel: str = "") -> float | None:
        return history.rate(topic, channel)

    return {"spark": spark, "rate_of": rate}


def render(request: Request, page: str, context: Context, *, status: int = 200,
           report: Report | None = None) -> Response:
    """A full page, or just its ``#live`` region for htmx (plus an out-of-band report)."""
    admin = admin_of(request)
    partial = is_htmx(request)
    ctx: Context = {
        "page": page, "refresh": admin.options.refresh_interval,
        "is_admin": admin.offers_actions(request), "lookupd_mode": admin.cluster.lookupd_mode,
        "lookupds": admin.cluster.lookupd_addresses, "live_url": _live_url(admin, page, request),
        "report": report, "report_oob": partial and report is not None, **_charts(admin),
        "windows": WINDOW_NAMES,
        **context,
    }
    flash = None
    if not partial and report is None:
        flash = read_flash(request)
        ctx["report"] = flash
    full = not partial or page in ("error", "confirm")
    name = f"pages/{page}.html" if full else f"partials/{page}.html"
    response = admin.templates.TemplateResponse(request, name, ctx, status_code=status)
    response.headers["Cache-Control"] = "no-store"
    response.headers["Vary"] = "HX-Request"
    if flash is not None:
        clear_flash(response, admin.path("/"))
    return response


def _live_url(admin: Admin, page: str, request: Request) -> str:
    try:
        return admin.path(page_path(page, dict(request.path_params)))
    except KeyError:
        return ""


def render_error(request: Request, status: int, title: str, text: str) -> Response:
    return render(request, "error", {"title": title, "text": text, "warnings": Warnings()},
                  status=status)
