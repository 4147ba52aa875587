"""How NSQ's daemons speak HTTP, independent of what they serve.

- Routing is httprouter's: exact paths; a trailing-slash or case mismatch redirects (301 for
  GET, 307 otherwise); an unknown path is 404 ``{"message":"NOT_FOUND"}``; a known path with
  another method is 405 ``{"message":"METHOD_NOT_ALLOWED"}`` with an ``Allow`` header; OPTIONS
  on a known path is an empty 200 with ``Allow``. HEAD is not GET: it gets a 405.
- "V1" answers (NSQ's conventions: ``nsq_common._httpv1``) always carry
  ``X-NSQ-Content-Type: nsq; version=1.0``; an object is compact JSON in Go's field order,
  nothing is an empty body, an error is ``{"message":"<TEXT>"}``.
- "plain" answers (``/ping``) are bare text without that header.
- Query strings are parsed as Go's ``url.ParseQuery`` does (``nsq_common.parse_query``): a bad
  ``%`` escape or a ``;`` makes the whole query invalid (NSQ's ``INVALID_REQUEST``); the first
  value of a key wins.
- A handler that raises is a 500 ``INTERNAL_ERROR``, logged, never a dead server.
- Every answer of a route, and every 404/405/500, is logged as
  ``<status> <method> <uri> (<remote>) <elapsed>``.
"""

from __future__ import annotations

import html
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import attrs
from nsq_common import (
    JSON_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    error_json,
    format_go_duration,
    go_json,
    join_host_port,
    parse_query,
    v1_headers,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .logger import Logger

Handler = Callable[[Request], Awaitable[Response]]


class HTTPError(Exception):
    """An NSQ API error: a status and the text that goes into ``{"message": ...}``."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def v1_response(data: Any = None, status: int = 200, *, json: bool = False) -> Response:
    """A V1 answer: None is an empty body, bytes/str go raw (as JSON already encoded with
    ``json=True``), anything else as JSON."""
    headers = v1_headers()
    if data is None:
        return Response(b"", status, headers)
    if isinstance(data, bytes | str):
        return Response(data, status, headers,
                        media_type=JSON_CONTENT_TYPE if json else TEXT_CONTENT_TYPE)
    return Response(go_json(data), status, headers, media_type=JSON_CONTENT_TYPE)


def v1_error(status: int, text: str) -> Response:
    return Response(error_json(text), status, v1_headers(), media_type=JSON_CONTENT_TYPE)


def plain_text(text: str, status: int = 200) -> Response:
    return Response(text, status, media_type=TEXT_CONTENT_TYPE)


class Params:
    """The query of a request, read the NSQ way (``reqParams.Get``: first value, or missing)."""

    def __init__(self, values: Mapping[str, list[str]]) -> None:
        self._values = values

    @classmethod
    def of(cls, request: Request) -> Params:
        """Raises: HTTPError 400 ``INVALID_REQUEST`` for a query Go would refuse."""
        try:
            return cls(parse_query(request.scope.get("query_string", b"")))
        except ValueError:
            raise HTTPError(400, "INVALID_REQUEST") from None

    def get(self, key: str) -> str | None:
        values = self._values.get(key)
        return values[0] if values else None


@attrs.define(eq=False)
class Router:
    """An ASGI app dispatching on exact (method, path), with httprouter's fallbacks."""

    log: Logger
    _routes: dict[str, dict[str, Handler]] = attrs.field(factory=dict, init=False)
    _logged: set[Handler] = attrs.field(factory=set, init=False)

    def add(self, method: str, path: str, handler: Handler, *, logged: bool = True) -> None:
        self._routes.setdefault(path, {})[method] = handler
        if logged:
            self._logged.add(handler)

    def endpoints(self) -> dict[str, dict[str, Callable[[Request], Awaitable[Response]]]]:
        """Every route as a server may call it directly (``nsq_serving``): path -> method ->
        ``endpoint(request)``, with the errors and the log line of ``__call__``."""
        return {path: {method: partial(self._run, handler=handler, logged=handler in self._logged)
                       for method, handler in methods.items()}
                for path, methods in self._routes.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        request = Request(scope, receive)
        response = await self._dispatch(request)
        await response(scope, receive, send)

    async def _dispatch(self, request: Request) -> Response:
        method, path = request.method, request.scope["path"]
        handler = self._routes.get(path, {}).get(method)
        if handler is not None:
            return await self._run(request, handler, logged=handler in self._logged)
        if method != "CONNECT" and path != "/":
            target = self._redirect_target(method, path)
            if target is not None:
                return _redirect(request, target)
        allowed = self._allowed(path, method)
        if method == "OPTIONS" and allowed:
            return Response(b"", 200, {"Allow": allowed})
        if allowed:
            response = await self._run(request, _fail(405, "METHOD_NOT_ALLOWED"))
            response.headers["Allow"] = allowed
            return response
        return await self._run(request, _fail(404, "NOT_FOUND"))

    async def _run(self, request: Request, handler: Handler, *, logged: bool = True) -> Response:
        start = time.perf_counter()
        try:
            response = await handler(request)
        except HTTPError as exc:
            response = v1_error(exc.status, exc.text)
        except Exception as exc:
            self.log.error(f"panic in HTTP handler - {exc!r}")
            response = v1_error(500, "INTERNAL_ERROR")
        if logged:
            elapsed = format_go_duration(time.perf_counter() - start)
            client = request.scope.get("client")
            remote = join_host_port(client[0], client[1]) if client else "-"
            uri = _request_uri(request.scope)
            self.log.info(f"{response.status_code} {request.method} {uri} ({remote}) {elapsed}")
        return response

    def _redirect_target(self, method: str, path: str) -> str | None:
        """The route path a mistyped one redirects to: trailing slash, then case and cleanup."""
        routes = [p for p, methods in self._routes.items() if method in methods]
        toggled = path[:-1] if path.endswith("/") else path + "/"
        if toggled in routes:
            return toggled
        clean = _clean_path(path)
        wanted = {clean.lower(), clean.rstrip("/").lower() or "/"}
        return next((p for p in routes if p.lower() in wanted), None)

    def _allowed(self, path: str, method: str) -> str:
        methods = self._routes.get(path, {})
        others = sorted({m for m in methods if m not in (method, "OPTIONS")} | {"OPTIONS"})
        return ", ".join(others) if len(others) > 1 else ""


def _fail(status: int, text: str) -> Handler:
    async def handler(request: Request) -> Response:
        raise HTTPError(status, text)
    return handler


def _request_uri(scope: Scope) -> str:
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    query: bytes = scope.get("query_string", b"")
    return (raw_path + (b"?" + query if query else b"")).decode("latin-1")


def _redirect(request: Request, target: str) -> Response:
    query = request.scope.get("query_string", b"").decode("latin-1")
    location = target + (f"?{query}" if query else "")
    if request.method == "GET":
        body = f'<a href="{html.escape(location)}">Moved Permanently</a>.\n\n'
        return Response(body, 301, {"Location": location}, media_type="text/html; charset=utf-8")
    return Response(b"", 307, {"Location": location})


def _clean_path(path: str) -> str:
    """httprouter's CleanPath: resolve ``.``, ``..`` and ``//``, keep a trailing slash."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    clean = "/" + "/".join(parts)
    if path.endswith("/") and clean != "/":
        clean += "/"
    return clean
