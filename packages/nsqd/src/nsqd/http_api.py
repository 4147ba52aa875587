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
"""

from __future__ import annotations

import base64
import logging
import socket
from typing import TYPE_CHECKING, Any

import trio
from nsq_common import (
    JSON_CONTENT_TYPE,
    NSQ_LOG_LEVELS,
    PYTHON_LOG_LEVELS,
    ProtocolError,
    decode_mpub_body,
    go_json,
    is_valid_name,
    parse_go_duration,
    parse_query,
    put_config,
)
from nsq_serving import (
    V1_EMPTY,
    HttpError,
    HttpGate,
    Router,
    client_gone,
    declared_length,
    metrics_endpoint,
    plain_text,
    read_body,
    v1_error,
    v1_json,
    v1_query,
    v1_text,
    while_connected,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Scope

from . import openapi
from .broker import Broker
from .channel import Channel
from .errors import DiskQueueError, Exiting, StoreFailed
from .message import QueuedMessage
from .options import Options, Settings
from .record import Records, decode_record
from .stats import stats, stats_text
from .topic import STARTS, Topic

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

log = logging.getLogger("nsqd")

ApiError = HttpError  # nsq_serving's one HTTP error, by the name nsqd's handlers use
_json = v1_json
_text = v1_text
_query = v1_query
_content_length = declared_length
error_response = v1_error

_OK = v1_text("OK")  # /pub and /mpub's answer, built once (the server only reads it)
_UNREADABLE = HttpError(500, "INTERNAL_ERROR")  # Go's nsqd when io.ReadAll fails


def _empty() -> Response:
    return V1_EMPTY


#: The refusals of a body too large, made once (``read_body`` raises a copy).
_TOO_BIG = {code: HttpError(413, code) for code in ("MSG_TOO_BIG", "BODY_TOO_BIG",
                                                    "INVALID_VALUE")}


async def _read_limited(request: Request, limit: int, too_big: str) -> bytes:
    """The whole body, refused (413 ``too_big``) by its declared length before a byte of it
    is read, or as soon as more than ``limit`` bytes arrive."""
    return await read_body(request, limit, too_large=_TOO_BIG[too_big],
                           unreadable=_UNREADABLE)


def _max_attempts(q: dict[str, str]) -> int | None:
    """``max_attempts`` (0 to 65535; 0: nsqd's --max-attempts), or None when absent."""
    text = q.get("max_attempts")
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        raise ApiError(400, "INVALID_MAX_ATTEMPTS")
    return int(text)


def _flag(q: dict[str, str], key: str) -> bool | None:
    """``true``/``1`` or ``false``/``0``, or None when absent. Raises 400 INVALID_<KEY>."""
    text = q.get(key)
    if text is None:
        return None
    if text not in ("true", "1", "false", "0"):
        raise ApiError(400, f"INVALID_{key.upper()}")
    return text in ("true", "1")


MAX_TTL = 2**32 - 1  # seconds, as lmstfy bounds it


def _ttl(q: dict[str, str], key: str) -> int:
    """A TTL in whole seconds (0 when absent: none of its own). Raises 400 INVALID_TTL."""
    text = q.get(key)
    if text is None:
        return 0
    # ASCII digits only: no sign, no spaces, and no "²", which isdigit() accepts and int() refuses
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_TTL:
        raise ApiError(400, "INVALID_TTL")
    return int(text)


def _size(q: dict[str, str], key: str, error: str) -> int | None:
    """A non-negative integer (an offset, a size in bytes), or None when absent."""
    text = q.get(key)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) >= 1 << 63:
        raise ApiError(400, error)
    return int(text)


def _timestamp_ns(q: dict[str, str]) -> int:
    """``timestamp``, unix seconds (a fraction allowed), in ns."""
    text = q.get("timestamp")
    if text is None:
        raise ApiError(400, "MISSING_ARG_TIMESTAMP")
    try:
        seconds = float(text)
    except ValueError:
        raise ApiError(400, "INVALID_TIMESTAMP") from None
    if not 0 <= seconds < 1e11:  # NaN fails this too
        raise ApiError(400, "INVALID_TIMESTAMP")
    return int(seconds * 1e9)


def _duration_ns(q: dict[str, str], key: str, error: str) -> int | None:
    """A Go duration (``24h``, ``90m``; a bare number is seconds) in ns, or None."""
    text = q.get(key)
    if text is None:
        return None
    try:
        seconds = float(text) if text.replace(".", "", 1).isdigit() else parse_go_duration(text)
    except ValueError:
        raise ApiError(400, error) from None
    if not 0 <= seconds < 1e10:
        raise ApiError(400, error)
    return int(seconds * 1e9)


def _bool_param(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value in ("true", "1")


class HttpApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.opts = broker.opts

    def _topic_arg(self, q: dict[str, str], invalid: str = "INVALID_TOPIC") -> str:
        topic = q.get("topic")
        if topic is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if topic not in self.broker.topics and not is_valid_name(topic):  # topics are valid
            raise ApiError(400, invalid)
        return topic

    def _existing_topic(self, q: dict[str, str], invalid: str = "INVALID_TOPIC") -> Topic:
        name = self._topic_arg(q, invalid)
        topic = self.broker.topics.get(name)
        if topic is None:
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return topic

    def _channel_args(self, q: dict[str, str]) -> tuple[Topic, str]:
        topic_name = self._topic_arg(q, "INVALID_ARG_TOPIC")
        channel = q.get("channel")
        if channel is None:
            raise ApiError(400, "MISSING_ARG_CHANNEL")
        topic = self.broker.topics.get(topic_name)
        if not (topic is not None and channel in topic.channels) and not is_valid_name(channel):
            raise ApiError(400, "INVALID_ARG_CHANNEL")  # (a channel that exists is valid)
        if topic is None:
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return topic, channel

    def _existing_channel(self, q: dict[str, str]) -> tuple[Topic, Channel]:
        topic, name = self._channel_args(q)
        channel = topic.channels.get(name)
        if channel is None:
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        return topic, channel

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
        body = await _read_limited(request, limit, "MSG_TOO_BIG")
        if not body:
            raise ApiError(400, "MSG_EMPTY")
        q = _query(request)
        topic = self._topic_arg(q)
        self.broker.get_topic(topic)
        defer = 0.0
        if "defer" in q:
            try:
                ms = int(q["defer"], 10)
            except ValueError:
                raise ApiError(400, "INVALID_DEFER") from None
            if ms < 0 or ms > self.opts.max_req_timeout * 1000:
                raise ApiError(400, "INVALID_DEFER")
            defer = ms / 1000
        ttl = _ttl(q, "ttl")
        await self._publish(topic, self._new([body], defer, ttl))
        return _OK

    async def mpub(self, request: Request) -> Response:
        o = self.opts
        length = _content_length(request)
        if length is not None and length > o.max_body_size:
            raise ApiError(413, "BODY_TOO_BIG")
        q = _query(request)
        topic = self._topic_arg(q)
        self.broker.get_topic(topic)
        ttl = _ttl(q, "ttl")
        binary = q.get("binary")
        body = await _read_limited(request, o.max_body_size, "BODY_TOO_BIG")
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
            include_clients=_bool_param(q.get("include_clients"), True),
            include_mem=_bool_param(q.get("include_mem"), True),
            include_offsets=_bool_param(q["include_offsets"], False)
            if "include_offsets" in q else None,
        )
        if q.get("format") == "json":
            return _json(doc)
        return _text(stats_text(doc))

    async def topic_create(self, request: Request) -> Response:
        """Beyond NSQ: ``message_ttl`` (seconds), ``retention`` (a Go duration: keep what
        every channel has read that long) and ``retention_bytes``."""
        q = _query(request)
        name = self._topic_arg(q)
        ttl = _ttl(q, "message_ttl")
        retention = _duration_ns(q, "retention", "INVALID_RETENTION")
        retention_bytes = _size(q, "retention_bytes", "INVALID_RETENTION_BYTES")
        topic = self.broker.get_topic(name)
        changed = False
        if "message_ttl" in q and topic.message_ttl != ttl:
            topic.message_ttl = ttl
            changed = True
        if retention is not None and topic.log.retention_ns != retention:
            topic.log.retention_ns = retention
            changed = True
        if retention_bytes is not None and topic.log.retention_bytes != retention_bytes:
            topic.log.retention_bytes = retention_bytes
            changed = True
        if changed:
            self.broker.metadata_changed()
            topic.log.poke()
        return _empty()

    async def topic_read(self, request: Request) -> Response:
        """Beyond NSQ: up to ``n`` messages of a topic's log from ``offset`` (or from the
        first published at or after ``timestamp``), touching no channel (replay, Spark's
        offset-based source)."""
        q = _query(request)
        topic = self._existing_topic(q)
        offset = _size(q, "offset", "INVALID_OFFSET")
        n = self._count(q)
        log_ = topic.log
        if offset is None and "timestamp" in q:  # from the first published at or after it
            offset = await log_.find_time(_timestamp_ns(q))
        start = log_.start
        first = max(offset if offset is not None else start, start)
        runs = await log_.read_at(first, n) if first < log_.end else []
        messages: list[dict[str, Any]] = []
        next_offset = first
        for run_first, records, _ in runs:
            for i, record in enumerate(records):
                if run_first + i >= log_.end or len(messages) >= n:
                    break
                entry = message_json(decode_record(record, run_first + i))
                entry["offset"] = run_first + i
                messages.append(entry)
                next_offset = run_first + i + 1
        return _json({"messages": messages, "next_offset": max(next_offset, first),
                      "earliest_offset": start, "latest_offset": log_.end - 1})

    async def topic_delete(self, request: Request) -> Response:
        q = _query(request)
        name = q.get("topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not self.broker.delete_topic(name):
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return _empty()

    async def topic_empty(self, request: Request) -> Response:
        await self.broker.empty_topic(self._existing_topic(_query(request)))
        return _empty()

    async def topic_pause(self, request: Request) -> Response:
        return self._pause_or_unpause(request, self._existing_topic(_query(request)))

    async def channel_create(self, request: Request) -> Response:
        q = _query(request)
        topic, name = self._channel_args(q)
        attempts = _max_attempts(q)
        dead_expired = _flag(q, "dead_letter_expired")
        start = q.get("start")
        if start is not None and start not in STARTS:
            raise ApiError(400, "INVALID_START")
        channel = self.broker.get_channel(topic, name, start=start)
        self._configure(channel, attempts, dead_expired)
        return _empty()

    async def channel_rewind(self, request: Request) -> Response:
        """Beyond NSQ: deliver again everything the log holds from ``timestamp`` (unix
        seconds) or ``offset``."""
        q = _query(request)
        channel = self._existing_channel(q)[1]
        offset = _size(q, "offset", "INVALID_OFFSET")
        if offset is None:
            offset = await channel.log.find_time(_timestamp_ns(q))
        await self.broker.rewind_channel(channel, offset)
        return _json({"offset": channel.cursor.read})

    async def channel_update(self, request: Request) -> Response:
        """Settings of an existing channel (beyond NSQ): ``max_attempts``,
        ``dead_letter_expired``."""
        q = _query(request)
        channel = self._existing_channel(q)[1]
        attempts = _max_attempts(q)
        dead_expired = _flag(q, "dead_letter_expired")
        if attempts is None and dead_expired is None:
            raise ApiError(400, "MISSING_ARG_MAX_ATTEMPTS")
        self._configure(channel, attempts, dead_expired)
        return _empty()

    def _configure(self, channel: Channel, attempts: int | None, dead_expired: bool | None
                   ) -> None:
        changed = False
        if attempts is not None and channel.max_attempts != attempts:
            channel.max_attempts = attempts
            changed = True
        if dead_expired is not None and channel.dead_letter_expired != dead_expired:
            channel.dead_letter_expired = dead_expired
            changed = True
        if changed:
            self.broker.metadata_changed()
            self.broker.mark_dirty(channel)  # messages over a new limit go at the next pump

    # -- dead letters ------------------------------------------------------------------------
    async def deadletter_peek(self, request: Request) -> Response:
        q = _query(request)
        channel = self._existing_channel(q)[1]
        n = self._count(q)
        msgs = await channel.peek_dead(n)
        return _json({"messages": [message_json(m) for m in msgs]})

    async def deadletter_respawn(self, request: Request) -> Response:
        q = _query(request)
        channel = self._existing_channel(q)[1]
        n = self._count(q)
        await self.broker.store_dead_letters(channel)
        try:
            count = await channel.respawn(n)
        except DiskQueueError as exc:
            log.error("respawn on %s:%s failed: %s", channel.topic_name, channel.name, exc)
            raise ApiError(500, "INTERNAL_ERROR") from exc
        return _json({"count": count})

    async def deadletter_empty(self, request: Request) -> Response:
        q = _query(request)
        channel = self._existing_channel(q)[1]
        n = self._count(q) if "n" in q else None
        await self.broker.store_dead_letters(channel)
        if n is not None:
            return _json({"count": await channel.drop_dead(n)})
        return _json({"count": await channel.empty_dead()})

    async def message_deadletter(self, request: Request) -> Response:
        channel, _, ids = self._pulled(request)
        self._check_ids(ids[:1])
        if not channel.dead_letter_pulled(ids[0]):
            raise ApiError(404, "MESSAGE_NOT_IN_FLIGHT")
        await self.broker.store_dead_letters(channel)
        return _empty()

    async def channel_delete(self, request: Request) -> Response:
        topic, channel = self._existing_channel(_query(request))
        self.broker.delete_channel(topic, channel.name)
        return _empty()

    async def channel_empty(self, request: Request) -> Response:
        await self.broker.empty_channel(self._existing_channel(_query(request))[1])
        return _empty()

    async def channel_pause(self, request: Request) -> Response:
        return self._pause_or_unpause(request, self._existing_channel(_query(request))[1])

    def _pause_or_unpause(self, request: Request, queue: Topic | Channel) -> Response:
        """/topic/pause, /topic/unpause, /channel/pause and /channel/unpause, once found."""
        if request.url.path.endswith("unpause"):
            queue.unpause()
        else:
            queue.pause()
        self.broker.metadata_changed()
        return _empty()

    # -- HTTP pulling: consume and answer over HTTP -----------------------------------------
    def _seconds(self, q: dict[str, str], key: str, default: float, *, low: float,
                 high: float, error: str) -> float:
        """A duration in (decimal) seconds from the query, within [low, high]."""
        text = q.get(key)
        if text is None:
            return default
        try:
            value = float(text)
        except ValueError:
            raise ApiError(400, error) from None
        if not low <= value <= high:  # NaN fails this too
            raise ApiError(400, error)
        return value

    async def channel_consume(self, request: Request) -> Response:
        """Up to n waiting messages (long-polling up to ``wait`` seconds), each in flight for
        ``ttr`` seconds until ``/message/fin``, ``/message/req`` or its timeout."""
        q = _query(request)
        channel = self._existing_channel(q)[1]
        o = self.opts
        n = self._count(q)
        wait = self._seconds(q, "wait", 0.0, low=0.0, high=o.max_msg_timeout, error="INVALID_WAIT")
        ttr = self._seconds(q, "ttr", o.msg_timeout, low=0.001, high=o.max_msg_timeout,
                            error="INVALID_TTR")
        # a client that has gone takes nothing: asked before the first pull, then the wait
        # ends when it goes, and it is asked once more before each pull after a wait
        await channel.fetch()
        if client_gone(request):
            return _json({"messages": []})
        msgs = channel.pull(n, ttr, self.broker.now())
        if not msgs and wait > 0:
            async with while_connected(request):
                with trio.move_on_after(wait):
                    while not msgs and not channel.deleted:
                        await channel.wait_pullable()
                        if client_gone(request):
                            break
                        msgs = channel.pull(n, ttr, self.broker.now())
        return _json({"messages": [message_json(m) for m in msgs]})

    async def channel_peek(self, request: Request) -> Response:
        """The next n messages the channel would deliver, left where they are."""
        q = _query(request)
        channel = self._existing_channel(q)[1]
        n = self._count(q)
        return _json({"messages": [message_json(m) for m in channel.peek(n, self.broker.now())]})

    def _count(self, q: dict[str, str]) -> int:
        """``n``: 1 (absent) to --max-rdy-count."""
        try:
            n = int(q.get("n", "1"), 10)
        except ValueError:
            raise ApiError(400, "INVALID_N") from None
        if not 1 <= n <= self.opts.max_rdy_count:
            raise ApiError(400, "INVALID_N")
        return n

    def _pulled(self, request: Request) -> tuple[Channel, dict[str, str], list[bytes]]:
        """The channel and the message ids of a /message/* request (``id`` in the query, or
        one per line of the body for /message/fin's list)."""
        q = _query(request)  # refuses a query Go would refuse, so parse_query takes this one
        channel = self._existing_channel(q)[1]
        raw: bytes = request.scope.get("query_string", b"")
        if 0x25 in raw or 0x2B in raw:  # "%" or "+" (an int's `in` is the fast one on bytes)
            ids = [i.encode("utf-8", "surrogateescape") for i in parse_query(raw).get("id", ())]
        else:  # nothing to unescape: the ids are the query's bytes
            ids = [value for key, _, value in (pair.partition(b"=") for pair in raw.split(b"&"))
                   if key == b"id"]
        return channel, q, ids

    @staticmethod
    def _check_ids(ids: list[bytes]) -> None:
        if not ids:
            raise ApiError(400, "MISSING_ARG_ID")
        if any(len(i) != 16 for i in ids):
            raise ApiError(400, "INVALID_ID")

    async def message_fin(self, request: Request) -> Response:
        channel, _, ids = self._pulled(request)
        if _content_length(request) != 0:  # ids in the body too
            body = await _read_limited(request, self.opts.max_body_size, "BODY_TOO_BIG")
            ids += [line.strip() for line in body.split(b"\n") if line.strip()]
        self._check_ids(ids)
        finished = [channel.finish_pulled(i) for i in ids]
        if not all(finished):
            raise ApiError(404, "MESSAGE_NOT_IN_FLIGHT")
        return _empty()

    async def message_req(self, request: Request) -> Response:
        channel, q, ids = self._pulled(request)
        self._check_ids(ids[:1])
        delay = self._seconds(q, "delay", 0.0, low=0.0, high=self.opts.max_req_timeout,
                              error="INVALID_DELAY")
        if not channel.requeue_pulled(ids[0], delay, self.broker.now()):
            raise ApiError(404, "MESSAGE_NOT_IN_FLIGHT")
        return _empty()

    async def message_touch(self, request: Request) -> Response:
        channel, _, ids = self._pulled(request)
        self._check_ids(ids[:1])
        if not channel.touch_pulled(ids[0], self.broker.now()):
            raise ApiError(404, "MESSAGE_NOT_IN_FLIGHT")
        return _empty()

    async def config(self, request: Request) -> Response:
        opt = request.path_params["opt"]
        if opt not in _CONFIG_KEYS:
            raise ApiError(400, "INVALID_OPTION")
        settings = self.broker.settings
        if request.method == "PUT":
            body = await _read_limited(request, self.opts.max_msg_size, "INVALID_VALUE")
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


def message_json(msg: QueuedMessage) -> dict[str, Any]:
    """A message as the HTTP API shows it: its body in base64, and as text when it is UTF-8."""
    out: dict[str, Any] = {"id": msg.id.decode("latin-1"), "attempts": msg.attempts,
                           "timestamp": msg.timestamp,
                           "body": base64.b64encode(msg.body).decode("ascii")}
    try:
        out["text"] = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return out


def _config_value(opt: str, value: Any) -> Any:
    if opt == "log_level":
        return NSQ_LOG_LEVELS[value]
    if isinstance(value, float) and opt not in ("e2e_processing_latency_percentiles",):
        return int(value * 1e9)  # Go durations are nanoseconds in JSON
    return value


def _hostname() -> str:
    return socket.gethostname()


def build_app(broker: Broker) -> ASGIApp:
    """nsqd's HTTP API: a ``Router`` (its routes called directly by ``serve_http``), behind
    ``--tls-required``'s gate when set."""
    api = HttpApi(broker)
    description = go_json(openapi.document())

    async def openapi_json(request: Request) -> Response:
        return Response(description, media_type="application/json")

    def collector() -> Collector:
        from .metrics import NsqdCollector  # deferred to the first scrape: see nsqd.metrics

        return NsqdCollector(broker)

    router = Router(error_log=lambda line, exc: log.error(line, exc_info=exc),
                    translate=_translate)
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
        ("POST", "/channel/update", api.channel_update),
        ("POST", "/channel/rewind", api.channel_rewind),
        ("GET", "/channel/deadletter", api.deadletter_peek),
        ("POST", "/channel/deadletter/respawn", api.deadletter_respawn),
        ("POST", "/channel/deadletter/empty", api.deadletter_empty),
        ("POST", "/message/deadletter", api.message_deadletter),
        ("GET", "/channel/peek", api.channel_peek),
        ("POST", "/channel/consume", api.channel_consume),
        ("POST", "/message/fin", api.message_fin),
        ("POST", "/message/req", api.message_req),
        ("POST", "/message/touch", api.message_touch),
        ("GET", "/config/:opt", api.config),
        ("PUT", "/config/:opt", api.config),
        ("GET", "/openapi.json", openapi_json),
    ):
        router.add(method, path, handler, logged=False)  # (Go's nsqd logs no API request)
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
