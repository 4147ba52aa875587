"""The graphs of the topic, channel and node pages, and their refreshable fragment.

A page includes ``partials/graphs.html`` (the ``#graphs`` region: a window chooser and two
charts, queue sizes and a message rate). htmx reloads that region from ``/graphs/...`` (same
path as the page, prefixed) right after each reload of the page's ``#live`` region (every
``--refresh-interval``, and after an action), which recorded its sample: the fragment draws from
the history alone and never asks the cluster, and its legends say what the tables say. The
background sampler keeps the history current between page loads. The window chooser
is plain links to ``?window=10m|1h|6h`` (a whole page without JavaScript; with it, htmx swaps
the region and puts the window in the address bar so a reload keeps it).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from markupsafe import Markup
from nsq_common import LMSTFY_CHANNEL, lmstfy_topic_name
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .chart import Chart, Line, render
from .formatting import path_segment
from .history import DEFAULT_WINDOW, WINDOW_NAMES, WINDOWS, History, Key
from .state import admin_of


@attrs.frozen
class Graphs:
    """What ``partials/graphs.html`` shows."""

    subject: str  # "channel billing"
    path: str  # the page's path (under --base-path); the fragment is /graphs + this
    window: str
    charts: tuple[Markup, ...]


def window_of(request: Request) -> str:
    window = request.query_params.get("window", DEFAULT_WINDOW)
    return window if window in WINDOWS else DEFAULT_WINDOW


def _charts(history: History, window: str, what: str, queue: list[tuple[str, Key]],
            rate_key: Key) -> tuple[Markup, ...]:
    end = history.clock()
    start = end - WINDOWS[window]
    styles = ("s1", "s2", "s3")
    names = " and ".join(label for label, _ in queue).capitalize()
    depths = Chart(f"{names} of {what}", "messages",
                   tuple(Line(label, history.points(key, window), styles[i])
                         for i, (label, key) in enumerate(queue)), start, end)
    rates = Chart(f"Messages per second to {what}", "messages/s",
                  (Line("Rate", history.rate_points(rate_key, window)),), start, end,
                  integer=False, suffix="/s")
    return render(depths), render(rates)


def for_topic(history: History, topic: str, window: str) -> Graphs:
    charts = _charts(history, window, topic, [("Depth", ("depth", topic, "", ""))],
                     ("messages", topic, "", ""))
    return Graphs(f"topic {topic}", f"/topics/{path_segment(topic)}", window, charts)


def for_channel(history: History, topic: str, channel: str, window: str) -> Graphs:
    queue = [("Depth", ("depth", topic, channel, "")),
             ("In flight", ("in_flight", topic, channel, ""))]
    charts = _charts(history, window, f"channel {channel}", queue,
                     ("messages", topic, channel, ""))
    path = f"/topics/{path_segment(topic)}/{path_segment(channel)}"
    return Graphs(f"channel {channel}", path, window, charts)


def for_node(history: History, node: str, window: str) -> Graphs:
    """A node's totals: depth of its topics and channels, in flight, messages published."""
    queue = [("Depth", ("depth", "", "", node)), ("In flight", ("in_flight", "", "", node))]
    charts = _charts(history, window, f"node {node}", queue, ("messages", "", "", node))
    return Graphs(f"node {node}", f"/nodes/{path_segment(node)}", window, charts)


def for_queue(history: History, node: str, namespace: str, queue: str, topic: str,
              window: str) -> Graphs:
    """An lmstfy queue (beyond NSQ): its channel's ready and in-flight jobs, and the jobs
    published to its topic (summed over the nsqd that have the topic, as topic graphs are)."""
    name = f"{namespace}/{queue}"
    ready = [("Ready", ("depth", topic, LMSTFY_CHANNEL, "")),
             ("In flight", ("in_flight", topic, LMSTFY_CHANNEL, ""))]
    end = history.clock()
    start = end - WINDOWS[window]
    depths = Chart(f"Ready and in flight jobs of queue {name}", "jobs",
                   tuple(Line(label, history.points(key, window), style)
                         for (label, key), style in zip(ready, ("s1", "s2"), strict=True)),
                   start, end)
    rates = Chart(f"Jobs published per second to queue {name}", "jobs/s",
                  (Line("Published", history.rate_points(("messages", topic, "", ""), window)),),
                  start, end, integer=False, suffix="/s")
    path = f"/jobs/{path_segment(node)}/{path_segment(namespace)}/{path_segment(queue)}"
    return Graphs(f"queue {name}", path, window, (render(depths), render(rates)))


def lazily(build: Callable[..., Graphs], *args: object) -> Callable[[], Graphs]:
    """For a page's context: drawn only when a full page is rendered, not for its htmx
    refreshes of ``#live`` (which leave ``#graphs`` alone)."""
    return lambda: build(*args)


async def fragment(request: Request) -> Response:
    admin = admin_of(request)
    params, window = request.path_params, window_of(request)
    if "queue" in params:
        graphs = for_queue(admin.history, params["node"], params["namespace"], params["queue"],
                           lmstfy_topic_name(params["namespace"], params["queue"]), window)
    elif "node" in params:
        graphs = for_node(admin.history, params["node"], window)
    elif "channel" in params:
        graphs = for_channel(admin.history, params["topic"], params["channel"], window)
    else:
        graphs = for_topic(admin.history, params["topic"], window)
    response = admin.templates.TemplateResponse(request, "partials/graphs.html", {
        "graphs": lambda: graphs, "refresh": admin.options.refresh_interval,
        "windows": WINDOW_NAMES})
    response.headers["Cache-Control"] = "no-store"
    return response


def routes() -> list[Route]:
    return [
        Route("/graphs/topics/{topic}", fragment, methods=["GET"]),
        Route("/graphs/topics/{topic}/{channel}", fragment, methods=["GET"]),
        Route("/graphs/nodes/{node}", fragment, methods=["GET"]),
        Route("/graphs/jobs/{node}/{namespace}/{queue}", fragment, methods=["GET"]),
    ]
