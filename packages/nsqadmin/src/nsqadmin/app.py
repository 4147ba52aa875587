"""``create_app(options)``: the nsqadmin Starlette application.

The routes keep the Go nsqadmin's URL layout (pages, ``/api/...``, ``/config/:opt``, ``/ping``,
``/static/...``) under ``--base-path``. The lifespan runs the background tasks: the
notification sender, the sampler that feeds the sparklines and graphs every
``--refresh-interval`` (``sampler.py``; the request log tells it when someone is looking), and
with ``--history-file`` the saver (which also saves on the way out).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
import trio
from nsq_common import format_go_duration
from nsq_serving import ConnectionCounts, metrics_endpoint, warm_up
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import api, graphs, history_file, jobs, views
from .auth import BasicAuth, RequireBasicAuth
from .cluster import ClusterInfo
from .history import History
from .lmstfy import Lmstfy
from .notify import Notifier
from .options import Options
from .pages import render_error
from .sampler import Sampler, Viewers
from .state import PACKAGE_DIR, Admin
from .upstream import Upstream, build_client
from .web import is_api_path, v1_error

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

log = logging.getLogger("nsqadmin")


def create_app(options: Options, cluster: ClusterInfo | None = None, *,
               client: httpx.AsyncClient | None = None, history: History | None = None,
               sampling: bool = True, connections: ConnectionCounts | None = None
               ) -> Starlette:
    """The ASGI app for ``options``.

    Args:
        options: validated options.
        cluster: the cluster to show; by default one built from ``options`` over ``client``.
        client: the HTTP client for daemons and notifications; by default one built from
            ``options`` and closed when the app's lifespan ends.
        history: where samples for the graphs are kept (by default a fresh one of
            ``--history-max-series``); filled from ``--history-file`` when there is one.
        sampling: sample the cluster in the background while the lifespan runs.
        connections: the server's connection counts, for ``/metrics``.

    Raises:
        PasswordFileError: ``--admin-basic-auth-file`` cannot be used.
        ValueError: the ``--http-client-tls-*`` files cannot be loaded.
    """
    basic_auth = (BasicAuth.from_file(options.admin_basic_auth_file)
                  if options.admin_basic_auth_file else None)
    owned = client is None
    http = client if client is not None else build_client(options)
    if cluster is None:
        cluster = ClusterInfo(Upstream(http), list(options.nsqlookupd_http_addresses),
                              list(options.nsqd_http_addresses))
    if history is None:
        history = History(max_series=options.history_max_series)
    if options.history_file:
        history_file.load(history, options.history_file)
    admin = Admin(options, cluster, history,
                  Notifier(options.notification_http_endpoint, http),
                  Lmstfy(Upstream(http), options.lmstfy_admin_account), basic_auth)
    viewers = Viewers(options.base_path)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with trio.open_nursery() as nursery:
                # loaded on first use, so off the start path, but not by the event loop:
                # the HTTP client's transport, the pages' templates, /metrics' collector
                nursery.start_soon(warm_up, "httpcore", "starlette.templating",
                                   "nsq_serving._metrics", "nsqadmin.metrics")
                await nursery.start(admin.notifier.run)
                if sampling:
                    nursery.start_soon(Sampler(admin, options.refresh_interval, viewers).run)
                if options.history_file:
                    nursery.start_soon(history_file.run_saver, history, options.history_file,
                                       options.history_save_interval)
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            if owned:
                await http.aclose()

    counts = connections or ConnectionCounts()

    def collector() -> Collector:
        from .metrics import AdminCollector  # deferred to the first scrape: see nsqadmin.metrics

        return AdminCollector(options, counts)

    static_dir = options.dev_static_dir or str(PACKAGE_DIR / "static")
    routes: list[BaseRoute] = [
        Route("/ping", ping, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Route("/metrics", metrics_endpoint(collector), methods=["GET"]),
        *views.routes(),
        *graphs.routes(),
        *jobs.routes(),
        *api.routes(options),
        Mount("/static", StaticFiles(directory=static_dir), name="static"),
    ]
    if options.base_path != "/":
        routes = [Mount(options.base_path, routes=routes)]
    middleware = [Middleware(RequestLog, viewers=viewers)]
    if basic_auth is not None:
        middleware.append(Middleware(RequireBasicAuth, auth=basic_auth))
    middleware.append(Middleware(GZipMiddleware, minimum_size=1024))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={404: not_found, 405: method_not_allowed})
    app.state.admin = admin
    return app


class RequestLog:
    """One line per request, as the Go nsqadmin logs them: ``200 GET /api/topics (ip:port) 2ms``;
    and ``viewers`` is told of each (the sampler asks for the node list while someone looks)."""

    def __init__(self, app: ASGIApp, viewers: Viewers | None = None) -> None:
        self.app = app
        self.viewers = viewers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client") or ("", 0)
            query = scope.get("query_string", b"").decode("latin-1")
            uri = scope.get("raw_path", scope["path"].encode()).decode("latin-1")
            uri += f"?{query}" if query else ""
            log.info("%d %s %s (%s:%s) %s", status, scope["method"], uri, client[0], client[1],
                     format_go_duration(time.perf_counter() - start))
            if self.viewers is not None:
                self.viewers.saw(scope["path"])


async def favicon(request: Request) -> Response:
    """``/favicon.ico``, which browsers ask for on their own (pages also link the SVG)."""
    return FileResponse(PACKAGE_DIR / "static" / "favicon.ico", media_type="image/x-icon",
                        headers={"Cache-Control": "public, max-age=86400"})


async def ping(request: Request) -> Response:
    return PlainTextResponse("OK")


async def not_found(request: Request, exc: Exception) -> Response:
    if is_api_path(request.url.path):
        return v1_error(404, "NOT_FOUND")
    return render_error(request, 404, "Not found",
                              "There is no page at this address.")


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    headers: dict[str, Any] = dict(getattr(exc, "headers", None) or {})
    response = v1_error(405, "METHOD_NOT_ALLOWED")
    response.headers.update(headers)
    return response
