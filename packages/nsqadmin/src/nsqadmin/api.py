"""The JSON API under ``/api`` and ``/config/:opt``, shaped as the Go nsqadmin's (NSQ 1.3.0).

V1 conventions: ``X-NSQ-Content-Type: nsq; version=1.0`` on every answer, errors as
``{"message": "<TEXT>"}``. When some daemons fail, the answer is still 200 and its
``message`` reads ``WARNING: <e1>; <e2>``; when all fail, 502 ``UPSTREAM_ERROR: <err>``
(for an action too: Go's answers 200 with a warning when every nsqd refused it).
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpx
from nsq_common import (
    PYTHON_LOG_LEVELS,
    aggregate_topic,
    is_valid_channel_name,
    is_valid_topic_name,
    put_config,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .cluster_actions import ActionResult, NodeNotFound
from .options import LOG_LEVELS, Options
from .rewind import RewindError
from .rewind import parse as parse_rewind
from .settings import SettingError
from .settings import parse as parse_settings
from .state import admin_of as _admin
from .upstream import ClusterError, UpstreamError, warning_message
from .web import v1_error, v1_json

log = logging.getLogger("nsqadmin")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


Handler = Callable[[Request], Awaitable[Any]]


def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def wrapped(request: Request) -> Response:
        try:
            return v1_json(await handler(request))
        except ApiError as exc:
            return v1_error(exc.status, exc.message)
        except ClusterError as exc:
            log.error("%s: %s", request.url.path, exc)
            return v1_error(502, f"UPSTREAM_ERROR: {exc}")

    wrapped.__name__ = handler.__name__
    return wrapped


def _require_admin(request: Request) -> None:
    if not _admin(request).is_admin(request):
        raise ApiError(403, "FORBIDDEN")


async def _json_body(request: Request, error: str | None = None) -> dict[str, Any]:
    body = await request.body()
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise ApiError(400, error or ("EOF" if not body.strip() else str(exc))) from None
    if not isinstance(value, dict):
        raise ApiError(400, error or "json: cannot unmarshal into a JSON object")
    return value


def _warn(messages: list[UpstreamError]) -> str:
    for error in messages:
        log.warning("%s", error)
    return warning_message(messages)


# --- reads -------------------------------------------------------------------------------

async def topics(request: Request) -> Any:
    cluster = _admin(request).cluster
    found = await cluster.topics()
    errors = list(found.errors)
    if request.query_params.get("inactive") == "true":
        inactive: dict[str, list[str]] = {}
        if cluster.lookupd_mode:
            for topic in found.value:
                producers = await cluster.lookupd_topic_producers(topic)
                if not producers.value:
                    inactive[topic] = (await cluster.lookupd_topic_channels(topic)).value
        return {"topics": inactive, "message": _warn(errors)}
    return {"topics": found.value, "message": _warn(errors)}


async def topic(request: Request) -> Any:
    cluster = _admin(request).cluster
    name = request.path_params["topic"]
    producers = await cluster.topic_producers(name)
    stats = await cluster.stats(producers.value, topic=name, include_clients=False,
                                include_offsets=True)
    total = aggregate_topic(name, stats.value.topics)
    return {**total.to_json(), "message": _warn([*producers.errors, *stats.errors])}


async def channel(request: Request) -> Any:
    cluster = _admin(request).cluster
    name, channel_name = request.path_params["topic"], request.path_params["channel"]
    producers = await cluster.topic_producers(name)
    stats = await cluster.stats(producers.value, topic=name, channel=channel_name,
                                include_offsets=True)
    message = _warn([*producers.errors, *stats.errors])
    found = stats.value.channels.get(channel_name)
    if found is None:
        return {"message": message}
    if found.clients:
        found = attrs.evolve(found, clients=tuple(sorted(found.clients, key=lambda c: c.node)))
    return {**found.to_json(), "message": message}


async def nodes(request: Request) -> Any:
    found = await _admin(request).cluster.nodes()
    return {"nodes": [n.to_json() for n in found.value], "message": _warn(list(found.errors))}


async def node(request: Request) -> Any:
    cluster = _admin(request).cluster
    name = request.path_params["node"]
    found = await cluster.nodes()
    producer = cluster.find_node(found.value, name)
    if producer is None:
        raise ApiError(404, "NODE_NOT_FOUND")
    stats = await cluster.stats([producer], include_clients=True)
    per_node = stats.value.topics
    return {
        "node": name, "topics": [t.to_json() for t in per_node],
        "total_messages": sum(t.message_count for t in per_node),
        "total_clients": sum(len(c.clients or ()) for t in per_node for c in t.channels or ()),
        "message": _warn(list(found.errors)),
    }


async def counter(request: Request) -> Any:
    cluster = _admin(request).cluster
    found = await cluster.nodes()
    stats = await cluster.stats(found.value, include_clients=False)
    counts: dict[str, dict[str, Any]] = {}
    for total in stats.value.channels.values():
        for part in total.nodes or ():
            key = f"{part.topic_name}:{part.channel_name}:{part.node}"
            entry = counts.setdefault(key, {"node": part.node, "topic_name": part.topic_name,
                                            "channel_name": part.channel_name,
                                            "message_count": 0})
            entry["message_count"] += part.message_count
    return {"stats": counts, "message": _warn([*found.errors, *stats.errors])}


# --- actions -----------------------------------------------------------------------------

def _done(result: ActionResult) -> dict[str, str]:
    """The answer to an action: done everywhere, or done somewhere with a warning naming the
    daemons that failed (as the Go nsqadmin answers); an action that failed on every daemon it
    went to is an error, 502 ``UPSTREAM_ERROR`` (Go's answers 200 with a warning then too),
    and one that named a node that is not there 404 ``NODE_NOT_FOUND``."""
    if result.errors and not result.done:
        texts = "; ".join(str(e) for e in result.errors)
        log.error("failed to %s: %s", result.action, texts)
        if all(isinstance(e, NodeNotFound) for e in result.errors):
            raise ApiError(404, f"NODE_NOT_FOUND: {texts}")
        raise ApiError(502, f"UPSTREAM_ERROR: {texts}")
    return {"message": _warn(list(result.errors))}


async def create_topic(request: Request) -> Any:
    _require_admin(request)
    body = await _json_body(request)
    topic_name, channel_name = str(body.get("topic", "")), str(body.get("channel", ""))
    if not is_valid_topic_name(topic_name):
        raise ApiError(400, "INVALID_TOPIC")
    if channel_name and not is_valid_channel_name(channel_name):
        raise ApiError(400, "INVALID_CHANNEL")
    try:  # beyond NSQ: nsqadmin.settings (a TTL, a retention, max_attempts, start, ...)
        settings = parse_settings(body)
    except SettingError as exc:
        raise ApiError(400, str(exc)) from None
    admin = _admin(request)
    result = await admin.actions.create_topic_channel(topic_name, channel_name, settings)
    admin.notifier.notify("create_topic", topic_name, "", "", request)
    if channel_name:
        admin.notifier.notify("create_channel", topic_name, channel_name, "", request)
    return _done(result)


async def topic_action(request: Request) -> Any:
    _require_admin(request)
    body = await _json_body(request)
    verb = body.get("action")
    admin = _admin(request)
    topic_name = request.path_params["topic"]
    channel_name = request.path_params.get("channel", "")
    if verb not in ("pause", "unpause", "empty", "update") and not (
            verb == "rewind" and channel_name):
        raise ApiError(400, "INVALID_ACTION")
    if verb == "rewind":  # beyond NSQ: {"action": "rewind", "timestamp": 1700000000, ...}
        return await _rewind(request, body, topic_name, channel_name)
    if verb == "update":  # beyond NSQ: {"action": "update", "max_attempts": 5, ...}
        try:
            settings = parse_settings(body)
        except SettingError as exc:
            raise ApiError(400, str(exc)) from None
        result = await admin.actions.update_settings(topic_name, channel_name, settings)
        admin.notifier.notify(result.action, topic_name, channel_name, "", request)
        return _done(result)
    result = await admin.actions.topic_action(verb, topic_name, channel_name)
    admin.notifier.notify(result.action, topic_name, channel_name, "", request)
    return _done(result)


async def _rewind(request: Request, body: dict[str, Any], topic_name: str, channel_name: str
                  ) -> dict[str, Any]:
    """``{"message": ..., "offsets": {nsqd: offset}}``: where the channel is on each nsqd."""
    try:
        target = parse_rewind(body)
    except RewindError as exc:
        raise ApiError(400, f"INVALID_REWIND: {exc}") from None
    node = str(body.get("node") or "")
    admin = _admin(request)
    result = await admin.actions.rewind_channel(topic_name, channel_name, target, node)
    admin.notifier.notify(result.action, topic_name, channel_name, node, request)
    return {**_done(result), "offsets": dict(result.offsets)}


async def delete(request: Request) -> Any:
    _require_admin(request)
    admin = _admin(request)
    topic_name = request.path_params["topic"]
    channel_name = request.path_params.get("channel", "")
    if channel_name:
        result = await admin.actions.delete_channel(topic_name, channel_name)
    else:
        result = await admin.actions.delete_topic(topic_name)
    admin.notifier.notify(result.action, topic_name, channel_name, "", request)
    return _done(result)


async def tombstone(request: Request) -> Any:
    _require_admin(request)
    body = await _json_body(request, "INVALID_BODY")
    topic_name = str(body.get("topic", ""))
    if not is_valid_topic_name(topic_name):
        raise ApiError(400, "INVALID_TOPIC")
    admin = _admin(request)
    node_name = request.path_params["node"]
    result = await admin.actions.tombstone_topic_producer(topic_name, node_name)
    admin.notifier.notify(result.action, topic_name, "", node_name, request)
    return _done(result)


def by_method(**handlers: Handler) -> Callable[[Request], Awaitable[Response]]:
    wrapped = {method.upper(): endpoint(h) for method, h in handlers.items()}

    async def dispatch(request: Request) -> Response:
        return await wrapped[request.method](request)

    return dispatch


# --- graphite and /config ----------------------------------------------------------------

async def graphite(request: Request) -> Any:
    options = _admin(request).options
    if request.query_params.get("metric") != "rate":
        raise ApiError(400, "INVALID_ARG_METRIC")
    target = request.query_params.get("target")
    if target is None:
        raise ApiError(400, "INVALID_ARG_TARGET")
    interval = int(options.statsd_interval)
    params = {"from": f"-{interval * 2}sec", "until": f"-{interval}sec", "format": "json",
              "target": target}
    client = _admin(request).cluster.upstream.client
    try:
        response = await client.get(f"{options.graphite_url}/render", params=params)
        rate = response.json()[0]["datapoints"][0][0]
    except (httpx.HTTPError, ValueError, LookupError, TypeError) as exc:
        log.error("graphite request failed - %s", exc)
        raise ApiError(500, "INTERNAL_ERROR") from None
    if rate is None or rate < 0:
        return {"rate": "N/A"}
    return {"rate": f"{rate / interval:.2f}"}


async def render_proxy(request: Request) -> Response:
    """``GET /render`` passed through to Graphite (``--proxy-graphite``)."""
    options = _admin(request).options
    client = _admin(request).cluster.upstream.client
    try:
        upstream = await client.get(f"{options.graphite_url}/render",
                                    params=list(request.query_params.multi_items()))
    except httpx.HTTPError as exc:
        log.error("graphite proxy failed - %s", exc)
        return Response("Bad Gateway", status_code=502)
    return Response(upstream.content, status_code=upstream.status_code,
                    media_type=upstream.headers.get("content-type"))


def config_value(options: Options, name: str) -> Any:
    """``/config/:opt``: an option by its config-file name, durations in nanoseconds."""
    if name not in {f.name for f in attrs.fields(Options)}:
        raise ApiError(400, "INVALID_OPTION")
    value = getattr(options, name)
    if name == "log_level":
        return LOG_LEVELS[value.lower()]
    if name in ("http_client_connect_timeout", "http_client_request_timeout", "statsd_interval",
                "refresh_interval"):
        return int(value * 1e9)
    return list(value) if isinstance(value, tuple) else value


async def config(request: Request) -> Any:
    admin = _admin(request)
    options = admin.options
    if options.allow_config_from_cidr:
        network = ipaddress.ip_network(options.allow_config_from_cidr, strict=False)
        try:
            address = ipaddress.ip_address(request.client.host if request.client else "")
        except ValueError:
            raise ApiError(400, "INVALID_REMOTE_ADDR") from None
        if address not in network:
            raise ApiError(403, "FORBIDDEN")
    name = request.path_params["opt"]
    if request.method == "PUT":
        body = await request.body()
        if not body or len(body) > 1024 * 1024:
            raise ApiError(413, "INVALID_VALUE")

        def set_addresses(addresses: list[str]) -> None:
            admin.options = attrs.evolve(options, nsqlookupd_http_addresses=addresses)
            admin.cluster.lookupd_addresses = list(addresses)

        def set_log_level(level: str) -> None:
            admin.options = attrs.evolve(options, log_level=level)
            logging.getLogger("nsqadmin").setLevel(PYTHON_LOG_LEVELS[level])

        error = put_config(name, body, "nsqlookupd_http_addresses", set_addresses, set_log_level)
        if error is not None:
            raise ApiError(400, error)
    return config_value(admin.options, name)


def routes(options: Options) -> list[Route]:
    table = [
        Route("/api/topics", by_method(get=topics, post=create_topic), methods=["GET", "POST"]),
        Route("/api/topics/{topic}", by_method(get=topic, post=topic_action, delete=delete),
              methods=["GET", "POST", "DELETE"]),
        Route("/api/topics/{topic}/{channel}",
              by_method(get=channel, post=topic_action, delete=delete),
              methods=["GET", "POST", "DELETE"]),
        Route("/api/nodes", endpoint(nodes), methods=["GET"]),
        Route("/api/nodes/{node}", by_method(get=node, delete=tombstone),
              methods=["GET", "DELETE"]),
        Route("/api/counter", endpoint(counter), methods=["GET"]),
        Route("/api/graphite", endpoint(graphite), methods=["GET"]),
        Route("/config/{opt}", endpoint(config), methods=["GET", "PUT"]),
    ]
    if options.proxy_graphite:
        table.append(Route("/render", render_proxy, methods=["GET"]))
    return table
