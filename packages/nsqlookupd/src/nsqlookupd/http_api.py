"""nsqlookupd's HTTP API: the routes, each a thin view over the registry.

Shapes, status codes and texts are NSQ's; how NSQ's daemons speak HTTP (routing as Go's
httprouter, V1 answers, errors) is ``nsq_serving``'s, shared with nsqd.
Go's ``/debug/pprof`` routes exist so that tools probing them get an answer, but there is no Go
runtime to profile: the index and ``cmdline`` work, the profiles answer 501.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from nsq_common import NSQ_VERSION, go_json, is_valid_name
from nsq_serving import (
    V1_EMPTY,
    ConnectionCounts,
    HttpError,
    Router,
    metrics_endpoint,
    plain_text,
    v1_json,
    v1_json_bytes,
    v1_query,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .logger import Logger
from .registry import RegistrationDB

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

_PROFILES = ("profile", "heap", "goroutine", "block", "threadcreate")


class LookupAPI:
    def __init__(self, db: RegistrationDB, log: Logger, tcp_counts: ConnectionCounts | None = None,
                 http_counts: ConnectionCounts | None = None) -> None:
        self.db = db
        self.log = log
        self.tcp_counts = tcp_counts or ConnectionCounts()
        self.http_counts = http_counts or ConnectionCounts()
        self._answers: dict[tuple[object, ...], Response] = {}
        self.metrics = metrics_endpoint(self._collector)

    async def ping(self, request: Request) -> Response:
        return plain_text("OK")

    async def info(self, request: Request) -> Response:
        return v1_json({"version": NSQ_VERSION})

    async def topics(self, request: Request) -> Response:
        return v1_json({"topics": self.db.topics()})

    async def channels(self, request: Request) -> Response:
        topic = _topic(v1_query(request))
        return v1_json({"channels": self.db.channels(topic)})

    async def lookup(self, request: Request) -> Response:
        topic = _topic(v1_query(request))
        found = self.db.lookup(topic)
        if found is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        channels, peers = found
        # Consumers poll /lookup; its answer changes only when the registry does, so the
        # answer is kept by what it is made of (peers by identity: a PeerInfo is fixed once
        # its IDENTIFY is in; only last_update moves, which the answer does not show), and
        # answered again as it is (the server keeps its head too).
        key = (topic, tuple(channels), tuple(peers))
        answer = self._answers.get(key)
        if answer is None:
            if len(self._answers) >= 1024:
                self._answers.clear()
            answer = v1_json_bytes(go_json({"channels": channels,
                                            "producers": [p.to_json() for p in peers]}))
            self._answers[key] = answer
        return answer

    def _collector(self) -> Collector:
        from .metrics import LookupdCollector  # deferred to the first scrape: see its module

        return LookupdCollector(self.db, self.tcp_counts, self.http_counts)

    async def nodes(self, request: Request) -> Response:
        producers = [peer.to_json() | {"tombstones": tombstones, "topics": topics}
                     for peer, topics, tombstones in self.db.nodes()]
        return v1_json({"producers": producers})

    async def debug(self, request: Request) -> Response:
        return v1_json(self.db.debug())

    async def create_topic(self, request: Request) -> Response:
        topic = _topic(v1_query(request))
        if not is_valid_name(topic):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        self.log.info(f"DB: adding topic({topic})")
        self.db.create_topic(topic)
        return V1_EMPTY

    async def delete_topic(self, request: Request) -> Response:
        topic = _topic(v1_query(request))
        for reg in self.db.delete_topic(topic):
            if reg.category == "channel":
                self.log.info(f"DB: removing channel({reg.subkey}) from topic({topic})")
            else:
                self.log.info(f"DB: removing topic({topic})")
        return V1_EMPTY

    async def create_channel(self, request: Request) -> Response:
        topic, channel = _topic_channel(v1_query(request))
        self.log.info(f"DB: adding channel({channel}) in topic({topic})")
        self.log.info(f"DB: adding topic({topic})")
        self.db.create_channel(topic, channel)
        return V1_EMPTY

    async def delete_channel(self, request: Request) -> Response:
        topic, channel = _topic_channel(v1_query(request))
        if not self.db.delete_channel(topic, channel):
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        self.log.info(f"DB: removing channel({channel}) from topic({topic})")
        return V1_EMPTY

    async def tombstone(self, request: Request) -> Response:
        params = v1_query(request)
        topic = _topic(params)
        node = params.get("node")
        if node is None:
            raise HttpError(400, "MISSING_ARG_NODE")
        self.log.info(f"DB: setting tombstone for producer@{node} of topic({topic})")
        self.db.tombstone_topic_producer(topic, node)
        return V1_EMPTY

    async def pprof_index(self, request: Request) -> Response:
        rows = "".join(f'<a href="{name}?debug=1">{name}</a><br>\n' for name in _PROFILES)
        page = f"<html><head><title>/debug/pprof/</title></head><body>\n{rows}</body></html>\n"
        return Response(page, media_type="text/html; charset=utf-8")

    async def pprof_cmdline(self, request: Request) -> Response:
        return plain_text("\x00".join(sys.argv))

    async def pprof_unavailable(self, request: Request) -> Response:
        return plain_text("profiling is not available in this implementation\n", 501)


def _topic(params: dict[str, str]) -> str:
    topic = params.get("topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    return topic


def _topic_channel(params: dict[str, str]) -> tuple[str, str]:
    """NSQ's GetTopicChannelArgs: both present and valid, checked in this order."""
    topic = _topic(params)
    if not is_valid_name(topic):
        raise HttpError(400, "INVALID_ARG_TOPIC")
    channel = params.get("channel")
    if channel is None:
        raise HttpError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise HttpError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def create_router(db: RegistrationDB, log: Logger, tcp_counts: ConnectionCounts | None = None,
                  http_counts: ConnectionCounts | None = None) -> Router:
    api = LookupAPI(db, log, tcp_counts, http_counts)
    router = Router(access_log=log.info, error_log=lambda line, exc: log.error(line))
    for path, handler in (("/ping", api.ping), ("/info", api.info), ("/debug", api.debug),
                          ("/lookup", api.lookup), ("/topics", api.topics),
                          ("/channels", api.channels), ("/nodes", api.nodes)):
        router.add("GET", path, handler)
    for path, handler in (("/topic/create", api.create_topic), ("/topic/delete", api.delete_topic),
                          ("/channel/create", api.create_channel),
                          ("/channel/delete", api.delete_channel),
                          ("/topic/tombstone", api.tombstone)):
        router.add("POST", path, handler)
    router.add("GET", "/metrics", api.metrics, logged=False)
    router.add("GET", "/debug/pprof", api.pprof_index, logged=False)
    router.add("GET", "/debug/pprof/cmdline", api.pprof_cmdline, logged=False)
    router.add("GET", "/debug/pprof/symbol", api.pprof_unavailable, logged=False)
    router.add("POST", "/debug/pprof/symbol", api.pprof_unavailable, logged=False)
    for name in _PROFILES:
        router.add("GET", f"/debug/pprof/{name}", api.pprof_unavailable, logged=False)
    return router


def create_app(db: RegistrationDB, log: Logger, tcp_counts: ConnectionCounts | None = None,
               http_counts: ConnectionCounts | None = None) -> Starlette:
    """The ASGI app: Starlette for the ASGI plumbing (lifespan), the router for every path.

    ``app.state.endpoints`` is the router, for a server to call its routes directly (the same
    handlers, errors and log lines as through the app). ``/metrics`` reports the connection
    counts given (the servers keep them)."""
    router = create_router(db, log, tcp_counts, http_counts)
    app = Starlette(routes=[Route("/{path:path}", endpoint=router)])
    app.state.endpoints = router
    return app
