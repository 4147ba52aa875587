"""The HTML pages: topics, a topic, a channel (and a peek at its next messages), nodes, a
node, counter, lookup.

Each page has a loader (cluster queries -> template context) and one template pair:
``pages/<name>.html`` for a normal request and ``partials/<name>.html`` (the ``#live``
region, which refreshes itself every few seconds) when htmx asks (``HX-Request``).
A daemon that fails to answer shows up in the page's warnings; the rest still renders.
POSTs to the page URLs are admin actions, handled in ``actions.py``.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from nsq_common import TopicStats, aggregate_topic
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import actions, graphs
from .cluster_actions import RESPAWN_BATCH
from .pages import Context, Warnings, page_path, render
from .state import Admin, admin_of
from .stats import Node, PeekedMessage, channel_positions, display_names
from .upstream import ClusterError

if TYPE_CHECKING:
    from .cluster import Stats

DEAD_LETTERS_SHOWN = 10  # per node, on the channel page
PEEK_SHOWN, PEEK_MOST = 20, 100  # per node, on the peek page (``?n=``)


def record_history(admin: Admin, stats: Stats, nodes: Iterable[str] = ()) -> list[TopicStats]:
    """Sample the per-node topic stats for the graphs (and ``nodes``' totals: the nodes whose
    every topic is in ``stats``), and sum them into one per topic."""
    admin.history.record(stats.topics, nodes=nodes, started=stats.started)
    by_topic: dict[str, list[TopicStats]] = {}
    for topic in stats.topics:
        by_topic.setdefault(topic.topic_name, []).append(topic)
    return [aggregate_topic(name, parts) for name, parts in sorted(by_topic.items())]


def record_counter(admin: Admin, stats: Stats) -> int:
    """Sample the counter: every message every channel has been given, over all nodes."""
    total = sum(c.message_count for c in stats.channels.values())
    admin.history.observe(("messages", "*", "*", ""), total)
    return total


Loader = Callable[[Request], Awaitable[Context]]


def page(name: str, loader: Loader) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if request.method == "POST":
            return await actions.handle(request, name, lambda: loader(request))
        context = await loader(request)
        return render(request, name, context, status=context.pop("status", 200))

    endpoint.__name__ = f"{name}_page"
    return endpoint


async def _nodes_and_stats(admin: Admin, warnings: Warnings, *, topic: str = "",
                           channel: str = "", clients: bool = False,
                           producers: bool = False, offsets: bool = False
                           ) -> tuple[list[Node], list[TopicStats], Any]:
    """Nodes (all, or the topic's producers) and their stats (``offsets``: with the logs'
    offsets); failures go to ``warnings``."""
    cluster = admin.cluster
    found = await (cluster.topic_producers(topic) if producers else cluster.nodes())
    warnings.add(found.errors)
    stats = await cluster.stats(found.value, topic=topic, channel=channel,
                                include_clients=clients, include_offsets=offsets)
    warnings.add(stats.errors)
    return found.value, list(stats.value.topics), stats.value


async def load_topics(request: Request) -> Context:
    admin = admin_of(request)
    warnings = Warnings()
    try:
        names: set[str] = set()
        if admin.cluster.lookupd_mode:
            listed = await admin.cluster.lookupd_topics()
            warnings.add(listed.errors)
            names.update(listed.value)
        nodes, _, stats = await _nodes_and_stats(admin, warnings)
    except ClusterError as exc:
        warnings.add(exc.errors)
        return {"fatal": exc.kind, "warnings": warnings, "topics": [], "nodes": []}
    totals = {t.topic_name: t for t in record_history(admin, stats, stats.health)}
    rows = [totals.get(name) or TopicStats(node="", hostname="", topic_name=name)
            for name in sorted(names | totals.keys())]
    return {"topics": rows, "nodes": nodes, "warnings": warnings}


async def load_topic(request: Request) -> Context:
    admin = admin_of(request)
    topic = request.path_params["topic"]
    warnings = Warnings()
    drawn = graphs.lazily(graphs.for_topic, admin.history, topic, graphs.window_of(request))
    try:
        producers, _, found = await _nodes_and_stats(admin, warnings, topic=topic,
                                                     producers=True, offsets=True)
    except ClusterError as exc:
        warnings.add(exc.errors)
        return {"fatal": exc.kind, "warnings": warnings, "topic": topic, "stats": None,
                "producers": [], "unreachable": [], "graphs": drawn}
    totals = record_history(admin, found)
    stats = totals[0] if totals else aggregate_topic(topic, [])
    unreachable = [p for p in producers if p.address in warnings]
    return {"topic": topic, "stats": stats, "producers": producers,
            "unreachable": unreachable, "warnings": warnings, "graphs": drawn}


async def load_channel(request: Request) -> Context:
    admin = admin_of(request)
    topic, channel = request.path_params["topic"], request.path_params["channel"]
    warnings = Warnings()
    drawn = graphs.lazily(graphs.for_channel, admin.history, topic, channel,
                          graphs.window_of(request))
    try:
        producers, per_node, stats = await _nodes_and_stats(admin, warnings, topic=topic,
                                                            channel=channel, clients=True,
                                                            producers=True, offsets=True)
    except ClusterError as exc:
        warnings.add(exc.errors)
        return {"fatal": exc.kind, "warnings": warnings, "topic": topic, "channel": channel,
                "stats": None, "unreachable": [], "graphs": drawn, "positions": []}
    record_history(admin, stats)
    unreachable = [p for p in producers if p.address in warnings]
    totals = stats.channels.get(channel)
    dead_letters: list[PeekedMessage] = []
    if totals is not None and totals.dead_letter_count:
        found = await admin.cluster.channel_messages(topic, channel, "deadletter",
                                                     DEAD_LETTERS_SHOWN)
        warnings.add(found.errors)
        dead_letters = found.value
    return {"topic": topic, "channel": channel, "stats": totals, "dead_letters": dead_letters,
            "respawn_batch": RESPAWN_BATCH, "unreachable": unreachable, "warnings": warnings,
            "graphs": drawn, "positions": channel_positions(per_node, channel),
            "rewind_from": rewind_default()}


def rewind_default(now: float | None = None) -> str:
    """Now, in UTC as the rewind form's time input takes it (and as the pages show times)."""
    moment = datetime.datetime.fromtimestamp(time.time() if now is None else now, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


async def load_peek(request: Request) -> Context:
    """The next messages of a channel on each of its nodes, taken from none (beyond NSQ)."""
    admin = admin_of(request)
    topic, channel = request.path_params["topic"], request.path_params["channel"]
    raw = request.query_params.get("n", "")
    n = int(raw) if raw.isdigit() and 0 < int(raw) <= PEEK_MOST else PEEK_SHOWN
    warnings = Warnings()
    try:
        found = await admin.cluster.channel_messages(topic, channel, "peek", n)
    except ClusterError as exc:
        warnings.add(exc.errors)
        return {"fatal": exc.kind, "warnings": warnings, "topic": topic, "channel": channel,
                "n": n, "messages": []}
    warnings.add(found.errors)
    here = page_path("peek", dict(request.path_params))
    return {"topic": topic, "channel": channel, "n": n, "messages": found.value,
            "warnings": warnings, "live_url": admin.path(f"{here}?n={n}")}


async def load_nodes(request: Request) -> Context:
    admin = admin_of(request)
    warnings = Warnings()
    cluster = admin.cluster
    try:
        found = await cluster.nodes()
        warnings.add(found.errors)
        nodes = found.value
        health = {n.http_address: n.health for n in nodes}
        if cluster.lookupd_mode:
            # lookupd does not know whether a node is healthy: ask each node.
            try:
                stats = await cluster.stats(nodes, include_clients=False)
                warnings.add(stats.errors)
                health.update(stats.value.health)
            except ClusterError as exc:
                warnings.add(exc.errors)
    except ClusterError as exc:
        warnings.add(exc.errors)
        nodes, health = [], {}
    known = {n.address for n in nodes}
    missing = [e for e in warnings if e.address not in known
               and e.address in cluster.nsqd_addresses]
    return {"nodes": nodes, "names": display_names(nodes), "health": health,
            "missing": missing, "warnings": warnings}


async def load_node(request: Request) -> Context:
    admin = admin_of(request)
    name = request.path_params["node"]
    warnings = Warnings()
    cluster = admin.cluster
    try:
        found = await cluster.nodes()
        warnings.add(found.errors)
    except ClusterError as exc:
        warnings.add(exc.errors)
        return {"node_name": name, "node": None, "warnings": warnings, "status": 404}
    node = cluster.find_node(found.value, name)
    if node is None:
        return {"node_name": name, "node": None, "warnings": warnings, "status": 404}
    topics: list[TopicStats] = []
    health = node.health
    try:
        stats = await cluster.stats([node], include_clients=True)
        topics = sorted(stats.value.topics, key=lambda t: t.topic_name)
        health = stats.value.health.get(node.http_address, health)
        admin.history.record(topics, nodes=[node.http_address], topics=False,
                             started=stats.value.started)
    except ClusterError as exc:
        warnings.add(exc.errors)
    return {
        "graphs": graphs.lazily(graphs.for_node, admin.history, node.http_address,
                                graphs.window_of(request)),
        "node_name": name, "node": node, "topics": topics, "health": health,
        "total_messages": sum(t.message_count for t in topics),
        "total_clients": sum(len(c.clients or ()) for t in topics for c in t.channels or ()),
        # replicated topics (nsqd with --etcd-endpoints): those it holds a replica of, leads
        "replicas_held": [t for t in topics if t.replication
                          and node.tcp_address in t.replication["replicas"]],
        "replicas_led": [t for t in topics if t.replication
                         and t.replication["leader"] == node.tcp_address],
        "warnings": warnings,
    }


async def load_counter(request: Request) -> Context:
    admin = admin_of(request)
    warnings = Warnings()
    try:
        _, _, stats = await _nodes_and_stats(admin, warnings)
    except ClusterError as exc:
        warnings.add(exc.errors)
        return {"fatal": exc.kind, "warnings": warnings, "total": None}
    record_history(admin, stats)
    total = record_counter(admin, stats)
    return {"total": total, "channels": len(stats.channels), "warnings": warnings}


async def load_lookup(request: Request) -> Context:
    admin = admin_of(request)
    registrations = await admin.cluster.lookupd_registrations()
    warnings = Warnings()
    warnings.add(r.error for r in registrations if r.error is not None)
    inactive: dict[str, set[str]] = {}
    for reg in registrations:
        for topic, (channels, producers) in reg.topics.items():
            if not producers:
                inactive.setdefault(topic, set()).update(channels)
    return {"registrations": registrations, "warnings": warnings,
            "inactive": {t: sorted(c) for t, c in sorted(inactive.items())}}


topics_page = page("topics", load_topics)
topic_page = page("topic", load_topic)
channel_page = page("channel", load_channel)
peek_page = page("peek", load_peek)
nodes_page = page("nodes", load_nodes)
node_page = page("node", load_node)
counter_page = page("counter", load_counter)
lookup_page = page("lookup", load_lookup)


def routes() -> list[Route]:
    both = ["GET", "POST"]
    return [
        Route("/", topics_page, methods=both),
        Route("/topics", topics_page, methods=both),
        Route("/topics/{topic}", topic_page, methods=both),
        Route("/topics/{topic}/{channel}", channel_page, methods=both),
        Route("/topics/{topic}/{channel}/peek", peek_page, methods=["GET"]),
        Route("/nodes", nodes_page, methods=["GET"]),
        Route("/nodes/{node}", node_page, methods=both),
        Route("/counter", counter_page, methods=["GET"]),
        Route("/lookup", lookup_page, methods=both),
    ]
