"""nsqd's HTTP API: NSQ's routes, status codes and texts.

How NSQ's daemons speak HTTP is ``nsq_serving``'s, shared with nsqlookupd: routing as Go's
httprouter (HEAD and other methods without a route are 405 with ``Allow``, trailing-slash and
case redirects, 404 ``NOT_FOUND``), V1 answers (``X-NSQ-Content-Type: nsq; version=1.0``,
errors ``{"message": "<TEXT>"}``), ``HttpError`` (here ``ApiError``) for every refusal. nsqd's
own errors (``nsqd.errors``) become answers at this edge: ``Exiting`` is 503 ``EXITING``,
``StoreFailed`` 500 ``INTERNAL_ERROR``; any other exception is a bug, logged with its traceback
and answered 500 ``INTERNAL_ERROR``. A body that cannot be read whole (a bad chunk, the client
gone) is 500 ``INTERNAL_ERROR`` as Go's nsqd answers a failed ``io.ReadAll``, without a log
line. Query parameters come from the URL only, read as Go's url.ParseQuery reads them (the
first of repeated keys wins).

The request's arguments and body are read by ``http_args``; the job routes beyond NSQ
(consuming over HTTP, dead letters) live in ``http_jobs``; this module keeps NSQ's own routes
and puts them all on one router (``build_app``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from nsq_common import (
    JSON_CONTENT_TYPE,
    NSQ_LOG_LEVELS,
    PYTHON_LOG_LEVELS,
    ProtocolError,
    decode_mpub_body,
    go_json,
    put_config,
)
from nsq_serving import (
    V1_EMPTY,
    HttpError,
    HttpGate,
    Router,
    declared_length,
    metrics_endpoint,
    plain_text,
    v1_error,
    v1_json,
    v1_query,
    v1_text,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Scope

from . import openapi
from .broker import Broker
from .channel import Channel
from .errors import Exiting, StoreFailed
from .http_args import (
    ApiError,
    bool_param,
    channel_args,
    duration_ns,
    existing_channel,
    existing_topic,
    flag,
    max_attempts,
    message_count,
    read_limited,
    replicas,
    size,
    still_existing,
    timestamp_ns,
    topic_arg,
    ttl_seconds,
)
from .http_jobs import JobApi, configure_channel, message_json
from .message import QueuedMessage
from .options import Options, Settings
from .record import Records, decode_record
from .relay import Relay
from .replicas import FORWARDED
from .stats import stats, stats_text
from .topic import STARTS, Topic

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

log = logging.getLogger("nsqd")

_json = v1_json
_text = v1_text
_query = v1_query
_content_length = declared_length
error_response = v1_error

_OK = v1_text("OK")  # /pub and /mpub's answer, built once (the server only reads it)


def _empty() -> Response:
    return V1_EMPTY


class HttpApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.opts = broker.opts

    # -- endpoints ---------------------------------------------------------------------------
    async def ping(self, request: Request) -> Response:
        health = self.broker.health
        if health != "OK":
            return plain_text(health, 500)
        return _PONG

    async def info(self, request: Request) -> Response:
        o = self.opts
        doc = {
            "version": self.broker.features.version,
            "broadcast_address": o.broadcast_address,
            "hostname": _hostname(),
            "http_port": self.broker.http_port,
            "tcp_port": self.broker.tcp_port,
            "start_time": self.broker.start_time,
            "max_heartbeat_interval": int(o.max_heartbeat_interval * 1e9),
            "max_output_buffer_size": o.max_output_buffer_size,
            "max_output_buffer_timeout": int(o.max_output_buffer_timeout * 1e9),
            "max_deflate_level": o.max_deflate_level,
        }
        # beyond NSQ, only when served: where lmstfy's APIs listen (bound, so :0 is known)
        for key, address in zip(("lmstfy_http_address", "lmstfy_admin_http_address"),
                                self.broker.lmstfy_addresses, strict=False):
            if address:
                doc[key] = address
        return _json(doc)

    def _new(self, bodies: list[bytes], defer: float = 0.0, ttl: int = 0
             ) -> list[QueuedMessage] | Records:
        """What to publish for ``bodies``: records, as PUB and MPUB publish (see
        ``nsqd.record``), unless they are deferred or have an expiry of their own."""
        if defer or ttl:
            return self.broker.new_messages(bodies, defer, ttl)
        return self.broker.new_records(bodies)

    async def _publish(self, topic: str, msgs: list[QueuedMessage] | Records) -> None:
        try:
            await self.broker.publish(topic, msgs)
        except (Exiting, StoreFailed) as exc:
            log.error("PUB to %s failed: %s", topic, exc)
            raise

    async def pub(self, request: Request) -> Response:
        limit = self.opts.max_msg_size
        body = await read_limited(request, limit, "MSG_TOO_BIG")
        if not body:
            raise ApiError(400, "MSG_EMPTY")
        q = _query(request)
        topic = topic_arg(self.broker, q)
        self.broker.topic_before_body(topic)
        defer = 0.0
        if "defer" in q:
            try:
                ms = int(q["defer"], 10)
            except ValueError:
                raise ApiError(400, "INVALID_DEFER") from None
            if ms < 0 or ms > self.opts.max_req_timeout * 1000:
                raise ApiError(400, "INVALID_DEFER")
            defer = ms / 1000
        ttl = ttl_seconds(q, "ttl")
        await self._publish(topic, self._new([body], defer, ttl))
        return _OK

    async def mpub(self, request: Request) -> Response:
        o = self.opts
        length = _content_length(request)
        if length is not None and length > o.max_body_size:
            raise ApiError(413, "BODY_TOO_BIG")
        q = _query(request)
        topic = topic_arg(self.broker, q)
        self.broker.topic_before_body(topic)
        ttl = ttl_seconds(q, "ttl")
        binary = q.get("binary")
        body = await read_limited(request, o.max_body_size, "BODY_TOO_BIG")
        if binary is not None and binary not in ("false", "0"):
            try:
                bodies = decode_mpub_body(body, o.max_msg_size, o.max_body_size)
            except ProtocolError as exc:
                raise ApiError(413, exc.code.removeprefix("E_")) from None
        else:
            bodies = [line for line in body.split(b"\n") if line]
            if any(len(b) > o.max_msg_size for b in bodies):
                raise ApiError(413, "MSG_TOO_BIG")
        if bodies:
            await self._publish(topic, self._new(bodies, ttl=ttl))
        return _OK

    async def stats(self, request: Request) -> Response:
        # Let every task woken with this request run first: a FIN that arrived before this
        # request is applied before the figures are read (Go's nsqd has no such ordering
        # problem only because its goroutines run in parallel).
        await trio.lowlevel.checkpoint()
        q = _query(request)
        doc = stats(
            self.broker, topic=q.get("topic"), channel=q.get("channel"),
            include_clients=bool_param(q.get("include_clients"), True),
            include_mem=bool_param(q.get("include_mem"), True),
            include_offsets=bool_param(q["include_offsets"], False)
            if "include_offsets" in q else None,
        )
        if q.get("format") == "json":
            return _json(doc)
        return _text(stats_text(doc, self.broker.clock.wall_ns() // 1_000_000_000))

    async def topic_create(self, request: Request) -> Response:
        """Beyond NSQ: ``message_ttl`` (seconds), ``retention`` (a Go duration: keep what
        every channel has read that long) and ``retention_bytes``; with --etcd-endpoints,
        ``replicas``: the topic is placed on that many nodes (docs/design/replication.md),
        and made here only if this node holds one of them (without, it is ignored, as Go's
        nsqd ignores any parameter it does not know)."""
        q = _query(request)
        name = topic_arg(self.broker, q)
        ttl = ttl_seconds(q, "message_ttl")
        retention = duration_ns(q, "retention", "INVALID_RETENTION")
        retention_bytes = size(q, "retention_bytes", "INVALID_RETENTION_BYTES")
        cluster = self.broker.replication
        if (cluster is not None and not name.endswith("#ephemeral")
                and not await cluster.create(name, replicas(q))):
            return _empty()  # placed on other nodes only
        topic = self.broker.get_topic(name)
        if topic.configure(message_ttl=ttl if "message_ttl" in q else None,
                           retention_ns=retention, retention_bytes=retention_bytes):
            self.broker.metadata_changed()
            topic.log.poke()
        await self.broker.keep_topics()  # listed in nsqd.dat before the answer
        return _empty()

    async def topic_replicas(self, request: Request) -> Response:
        """With --etcd-endpoints: a placed topic's number of replicas changed, by its leader
        (forwarded to it from any other node: ``nsqd.replication.edge``)."""
        q = _query(request)
        name = topic_arg(self.broker, q)
        count = replicas(q)
        if count is None:
            raise ApiError(400, "MISSING_ARG_REPLICAS")
        cluster = self.broker.replication
        if cluster is None:  # not started yet, or stopping
            raise ApiError(503, "ETCD_UNAVAILABLE")
        await cluster.change(name, count, forwarded=request.headers.get(FORWARDED))
        return _empty()

    async def topic_read(self, request: Request) -> Response:
        """Beyond NSQ: up to ``n`` messages of a topic's log from ``offset`` (or from the
        first published at or after ``timestamp``), touching no channel (replay, Spark's
        offset-based source)."""
        q = _query(request)
        topic = existing_topic(self.broker, q)
        offset = size(q, "offset", "INVALID_OFFSET")
        n = message_count(q, self.opts.max_rdy_count)
        log_ = topic.log
        if offset is None and "timestamp" in q:  # from the first published at or after it
            offset = await log_.find_time(timestamp_ns(q))
        start = log_.start
        # a replicated topic's readers see the committed records only, on every replica
        end = log_.end if topic.replica is None else min(log_.end, topic.replica.hw)
        first = max(offset if offset is not None else start, start)
        runs = await log_.read_at(first, n) if first < end else []
        messages: list[dict[str, Any]] = []
        next_offset = first
        for run_first, records, _ in runs:
            for i, record in enumerate(records):
                if run_first + i >= end or len(messages) >= n:
                    break
                entry = message_json(decode_record(record, run_first + i))
                entry["offset"] = run_first + i
                messages.append(entry)
                next_offset = run_first + i + 1
        return _json({"messages": messages, "next_offset": max(next_offset, first),
                      "earliest_offset": start, "latest_offset": end - 1})

    async def topic_delete(self, request: Request) -> Response:
        q = _query(request)
        name = q.get("topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        cluster = self.broker.replication
        if cluster is not None and await cluster.delete(
                name, forwarded=request.headers.get(FORWARDED)):
            return _empty()  # deleted on every replica, and in etcd
        if not self.broker.delete_topic(name):
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return _empty()

    async def topic_empty(self, request: Request) -> Response:
        await self.broker.empty_topic(existing_topic(self.broker, _query(request)))
        return _empty()

    async def topic_pause(self, request: Request) -> Response:
        return self._pause_or_unpause(request, existing_topic(self.broker, _query(request)))

    async def channel_create(self, request: Request) -> Response:
        q = _query(request)
        topic, name = channel_args(self.broker, q)
        attempts = max_attempts(q)
        dead_expired = flag(q, "dead_letter_expired")
        start = q.get("start")
        if start is not None and start not in STARTS:
            raise ApiError(400, "INVALID_START")
        channel = self.broker.get_channel(topic, name, start=start)
        configure_channel(self.broker, channel, attempts, dead_expired)
        await self.broker.keep_channel(channel)  # on disk before the answer
        return _empty()

    async def channel_rewind(self, request: Request) -> Response:
        """Beyond NSQ: deliver again everything the log holds from ``timestamp`` (unix
        seconds) or ``offset``. An offset outside [earliest stored, end], or a time after now,
        is ``E_INVALID`` with the valid range (as nsqd's ``RDY count 3000 out of range
        0-2500``): nothing a client sends moves a cursor past the end, and an offset the log
        no longer holds is not taken for another. A time before everything stored is the
        earliest (``timestamp=0``: everything the log still holds), as Kafka's offsets for a
        time are the first at or after it."""
        q = _query(request)
        channel = existing_channel(self.broker, q)[1]
        log_ = channel.log
        offset = size(q, "offset", "INVALID_OFFSET")
        if offset is None:
            ts = timestamp_ns(q)
            now = -(-self.broker.clock.wall_ns() // 1_000_000_000)  # (rounded up)
            if ts > now * 1_000_000_000:
                raise ApiError(400, f"E_INVALID rewind timestamp {q['timestamp']} out of range "
                                    f"0-{now}")
            offset = await log_.find_time(ts)
            still_existing(self.broker, channel)
        elif not log_.start <= offset <= log_.end:
            raise ApiError(400, f"E_INVALID rewind offset {offset} out of range "
                                f"{log_.start}-{log_.end}")
        await self.broker.rewind_channel(channel, offset)
        still_existing(self.broker, channel)
        return _json({"offset": channel.cursor.read})

    async def channel_delete(self, request: Request) -> Response:
        topic, channel = existing_channel(self.broker, _query(request))
        self.broker.delete_channel(topic, channel.name)
        return _empty()

    async def channel_empty(self, request: Request) -> Response:
        channel = existing_channel(self.broker, _query(request))[1]
        await self.broker.empty_channel(channel)  # (its own queue's files, on disk)
        still_existing(self.broker, channel)
        return _empty()

    async def channel_pause(self, request: Request) -> Response:
        return self._pause_or_unpause(request, existing_channel(self.broker, _query(request))[1])

    def _pause_or_unpause(self, request: Request, queue: Topic | Channel) -> Response:
        """/topic/pause, /topic/unpause, /channel/pause and /channel/unpause, once found."""
        if request.url.path.endswith("unpause"):
            queue.unpause()
        else:
            queue.pause()
        self.broker.metadata_changed()
        return _empty()

    async def config(self, request: Request) -> Response:
        opt = request.path_params["opt"]
        if opt not in _CONFIG_KEYS:
            raise ApiError(400, "INVALID_OPTION")
        settings = self.broker.settings
        if request.method == "PUT":
            body = await read_limited(request, self.opts.max_msg_size, "INVALID_VALUE")
            if not body:
                raise ApiError(413, "INVALID_VALUE")
            error = put_config(opt, body, "nsqlookupd_tcp_addresses", self._set_lookupd_addresses,
                               self._set_log_level)
            if error is not None:
                raise ApiError(400, error)
        value = getattr(settings, opt) if opt in _SETTINGS_KEYS else self.opts.value(opt)
        return _json(_config_value(opt, value))

    def _set_lookupd_addresses(self, addresses: list[str]) -> None:
        self.broker.settings.nsqlookupd_tcp_addresses = addresses
        self.broker.lookup.set_addresses(addresses)

    def _set_log_level(self, level: str) -> None:
        self.broker.settings.log_level = level
        logging.getLogger("nsqd").setLevel(PYTHON_LOG_LEVELS[level])


#: What /config/<key> shows: every option but the command line's own, and not the lmstfy
#: admin accounts' passwords.
_CONFIG_KEYS = frozenset(Options.keys()) - {"config", "version", "verbose",
                                            "lmstfy_admin_accounts"}
_SETTINGS_KEYS = frozenset(Settings.keys())


def _config_value(opt: str, value: Any) -> Any:
    if opt == "log_level":
        return NSQ_LOG_LEVELS[value]
    if isinstance(value, float) and opt not in ("e2e_processing_latency_percentiles",):
        return int(value * 1e9)  # Go durations are nanoseconds in JSON
    return value


def _hostname() -> str:
    return socket.gethostname()


#: the routes that change what a channel holds outside delivery: with --etcd-endpoints, on a
#: placed topic answered by its leader (a follower's change would be lost, or undone by the
#: leader's next records), forwarded to it from any other node (``nsqd.relay``)
LEADERS_ONLY = frozenset({"/topic/empty", "/channel/empty", "/channel/rewind",
                          "/channel/deadletter/respawn", "/channel/deadletter/empty"})


def led(broker: Broker, relay: Relay,
        handler: Callable[[Request], Awaitable[Response]]
        ) -> Callable[[Request], Awaitable[Response]]:
    """``handler``, answered by the topic's leader when another node leads it."""
    async def route(request: Request) -> Response:
        if broker.replication is None:
            return await handler(request)
        topic = request.query_params.get("topic")
        if not topic:
            return await handler(request)
        return await relay.answered(topic, request, handler, read)

    async def read(request: Request) -> bytes:
        return await read_limited(request, broker.opts.max_body_size, "BODY_TOO_BIG")

    return route


def build_app(broker: Broker) -> ASGIApp:
    """nsqd's HTTP API: a ``Router`` (its routes called directly by ``serve_http``), behind
    ``--tls-required``'s gate when set."""
    api = HttpApi(broker)
    jobs = JobApi(broker)
    description = go_json(openapi.document(bool(broker.opts.etcd_endpoints)))

    async def openapi_json(request: Request) -> Response:
        return Response(description, media_type="application/json")

    def collector() -> Collector:
        from .metrics import NsqdCollector  # deferred to the first scrape: see nsqd.metrics

        return NsqdCollector(broker)

    router = Router(error_log=lambda line, exc: log.error(line, exc_info=exc),
                    translate=_translate)
    relay = Relay(broker, "http", keep=False)
    for method, path, handler in (
        ("GET", "/ping", api.ping),
        ("GET", "/info", api.info),
        ("POST", "/pub", api.pub),
        ("POST", "/mpub", api.mpub),
        ("GET", "/stats", api.stats),
        ("GET", "/metrics", metrics_endpoint(collector)),
        ("POST", "/topic/create", api.topic_create),
        ("POST", "/topic/delete", api.topic_delete),
        ("POST", "/topic/empty", api.topic_empty),
        ("POST", "/topic/pause", api.topic_pause),
        ("POST", "/topic/unpause", api.topic_pause),
        ("GET", "/topic/read", api.topic_read),
        ("POST", "/channel/create", api.channel_create),
        ("POST", "/channel/delete", api.channel_delete),
        ("POST", "/channel/empty", api.channel_empty),
        ("POST", "/channel/pause", api.channel_pause),
        ("POST", "/channel/unpause", api.channel_pause),
        ("POST", "/channel/update", jobs.channel_update),
        ("POST", "/channel/rewind", api.channel_rewind),
        ("GET", "/channel/deadletter", jobs.deadletter_peek),
        ("POST", "/channel/deadletter/respawn", jobs.deadletter_respawn),
        ("POST", "/channel/deadletter/empty", jobs.deadletter_empty),
        ("POST", "/message/deadletter", jobs.message_deadletter),
        ("GET", "/channel/peek", jobs.channel_peek),
        ("POST", "/channel/consume", jobs.channel_consume),
        ("POST", "/message/fin", jobs.message_fin),
        ("POST", "/message/req", jobs.message_req),
        ("POST", "/message/touch", jobs.message_touch),
        ("GET", "/config/:opt", api.config),
        ("PUT", "/config/:opt", api.config),
        ("GET", "/openapi.json", openapi_json),
    ):
        if path in LEADERS_ONLY and broker.opts.etcd_endpoints:
            handler = led(broker, relay, handler)
        router.add(method, path, handler, logged=False)  # (Go's nsqd logs no API request)
    if broker.opts.etcd_endpoints:  # a replication cluster's route only (none in Go's nsqd)
        router.add("POST", "/topic/replicas", api.topic_replicas, logged=False)
    if broker.tls_required == "true":
        return tls_required(router, broker)
    return router


_PONG = plain_text("OK")


def _translate(exc: Exception) -> HttpError | None:
    """nsqd's errors as HTTP answers (``nsqd.errors``); None for a bug."""
    if isinstance(exc, Exiting):
        return HttpError(503, "EXITING")
    if isinstance(exc, StoreFailed):
        return HttpError(500, "INTERNAL_ERROR")
    return None


def tls_required(app: ASGIApp, broker: Broker) -> HttpGate:
    """--tls-required=true: plain-HTTP requests get nsqd's 403, with the HTTPS port to use."""

    async def refusal(scope: Scope) -> Response | None:
        if scope.get("scheme") == "https":
            return None
        body = f'{{"message": "TLS_REQUIRED", "https_port": {broker.https_port}}}'.encode()
        return Response(body, 403, headers={"X-NSQ-Content-Type": "nsq; version=1.0"},
                        media_type=JSON_CONTENT_TYPE)

    return HttpGate(app, refusal)
