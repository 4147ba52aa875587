"""``build_app(store)``: the auth server's HTTP API, as nsqd asks it (NSQ 1.3).

``GET /auth?common_name=&remote_ip=&secret=&tls=`` (or, from a Go nsqd newer than 1.3 started
with ``--auth-http-request-method=post``, a POST whose JSON body holds the same keys, each value a
one-element array) answers 200 with the secret's identity and authorizations::

    {"ttl":3600,"identity":"alice","identity_url":"","authorizations":
     [{"topic":"orders.*","channels":[".*"],"permissions":["publish","subscribe"]}]}

and ``403 {"message":"NOT_AUTHORIZED"}`` for an unknown secret or a client the secret's
restrictions leave out, as the reference auth servers answer; the 403 does not say which.
``GET /ping`` answers ``OK``, ``GET /metrics`` Prometheus's text (``metrics``). Secrets never
reach the log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nsq_common import go_json, parse_bool
from nsq_serving import ConnectionCounts, metrics_endpoint
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from .secrets_file import SecretStore

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

log = logging.getLogger("nsq_auth")
JSON_TYPE = "application/json; charset=utf-8"
MAX_BODY = 64 * 1024


def _json(value: Any, status: int = 200) -> Response:
    return Response(go_json(value), status_code=status, media_type=JSON_TYPE)


async def _post_params(request: Request) -> Mapping[str, str]:
    body = await request.body()
    try:
        raw = json.loads(body) if len(body) <= MAX_BODY else None
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        return {}
    params: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, list):  # url.Values encoded as JSON: {"secret": ["..."]}
            value = value[0] if value else ""
        if isinstance(value, str):
            params[key] = value
    return params


def _flag(text: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError:
        return False


async def auth(request: Request) -> Response:
    store: SecretStore = request.app.state.store
    params = await _post_params(request) if request.method == "POST" else request.query_params
    remote_ip = params.get("remote_ip", "")
    tls = _flag(params.get("tls", "false"))
    common_name = params.get("common_name", "")
    entry = store.current.lookup(params.get("secret", ""))
    if entry is None:
        log.info("AUTH: unknown secret (remote_ip=%s tls=%s)", remote_ip, tls)
        return _json({"message": "NOT_AUTHORIZED"}, 403)
    refusal = entry.refusal(remote_ip=remote_ip, tls=tls, common_name=common_name)
    if refusal is not None:
        log.info("AUTH: refused %s - %s", entry.identity, refusal)
        return _json({"message": "NOT_AUTHORIZED"}, 403)
    log.info("AUTH: %s (remote_ip=%s tls=%s common_name=%s)", entry.identity, remote_ip, tls,
             common_name)
    return _json(entry.answer())


async def ping(request: Request) -> Response:
    return PlainTextResponse("OK")


def build_app(store: SecretStore, connections: ConnectionCounts | None = None) -> Starlette:
    """The app; ``connections`` are the server's counts, for ``/metrics``."""
    counts = connections or ConnectionCounts()

    def collector() -> Collector:
        from .metrics import AuthCollector  # deferred to the first scrape: see nsq_authd.metrics

        return AuthCollector(store, counts)

    app = Starlette(routes=[
        Route("/ping", ping, methods=["GET"]),
        Route("/auth", auth, methods=["GET", "POST"]),
        Route("/metrics", metrics_endpoint(collector), methods=["GET"]),
    ])
    app.state.store = store
    return app
