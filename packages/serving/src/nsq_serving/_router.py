"""``Router``: an ASGI app that routes as Go's httprouter does, for every daemon's HTTP API.

NSQ's daemons route with julienschmidt/httprouter v1.3.0, lmstfy with gin (httprouter's tree
with other defaults); ``Conventions`` says which answers a router gives for what no route
answers, ``NSQ`` being nsqd's and nsqlookupd's:

- a path matches exactly; ``:name`` is one segment, read as ``request.path_params["name"]``
  (NSQ's routes refuse an empty one, gin's take it but for the last: ``/api//q`` is a match,
  ``/api/ns/`` is not);
- no route for the method, but httprouter's tree recommends a trailing slash added or removed
  (``_tree``: where its walk ends next to a handle, not wherever the other path has a route):
  a redirect, 301 for GET, 307 for any other method (the method and body are kept),
  ``Location`` the path alone (escaped and cleaned as Go's ``http.Redirect`` does, with the
  query). NSQ's also try the cleaned path (``//``, ``.``, ``..``) and another letter case;
- a known path with another method: 405 ``METHOD_NOT_ALLOWED`` with ``Allow`` (NSQ's; gin's
  answer 404), OPTIONS on it an empty 200 with ``Allow``; HEAD is a method like any other
  (no route answers it, so it is a 405);
- an unknown path: the conventions' 404;
- a handler's ``HttpError``: the conventions' error answer; any other exception is a bug,
  logged with its traceback and answered with the conventions' 500.

``Router.get(path)`` gives a server the endpoints that answer ``path`` (method -> endpoint),
with the same errors and log lines as through ``__call__``: ``serve_http`` calls them directly.
"""

from __future__ import annotations

import html
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Protocol
from urllib.parse import quote

import attrs
from nsq_common import format_go_duration, join_host_port, parse_query, query_first
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ._answers import HttpError, v1_error
from ._tree import Conflict, Tree

Handler = Callable[[Request], Awaitable[Response]]
Params = dict[str, str]


@attrs.frozen
class Conventions:
    """How a router answers what its routes do not."""

    #: An ``HttpError`` as an answer.
    error: Callable[[HttpError], Response]
    not_found: HttpError
    #: A known path asked with another method; None: answered as ``not_found`` (gin's way).
    method_not_allowed: HttpError | None
    internal_error: HttpError
    #: OPTIONS on a known path: 200 with ``Allow`` (httprouter's HandleOPTIONS).
    options: bool = True
    #: Redirect to the cleaned path in the routes' letter case (httprouter's RedirectFixedPath).
    fixed_path: bool = True
    #: A ``:name`` segment may be empty (gin's tree takes ``/api//q``, httprouter's does not).
    empty_params: bool = False


def _v1_error(exc: HttpError) -> Response:
    response = v1_error(exc.status, exc.text)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


#: nsqd's and nsqlookupd's routers (httprouter v1.3.0 as NSQ configures it).
NSQ = Conventions(error=_v1_error, not_found=HttpError(404, "NOT_FOUND"),
                  method_not_allowed=HttpError(405, "METHOD_NOT_ALLOWED"),
                  internal_error=HttpError(500, "INTERNAL_ERROR"))


def v1_query(request: Request) -> dict[str, str]:
    """The query as NSQ's handlers read it (Go's ``url.ParseQuery``, the first of repeated
    keys).

    Raises:
        HttpError: 400 ``INVALID_REQUEST`` for a query Go would refuse.
    """
    try:
        return query_first(request.scope.get("query_string", b""))
    except ValueError:
        raise HttpError(400, "INVALID_REQUEST") from None


def v1_query_all(request: Request) -> dict[str, list[str]]:
    """Every value of every key of the query (``v1_query``'s refusals)."""
    try:
        return parse_query(request.scope.get("query_string", b""))
    except ValueError:
        raise HttpError(400, "INVALID_REQUEST") from None


@attrs.define(eq=False)
class _Pattern:
    """A route with ``:name`` segments."""

    parts: tuple[str | None, ...]  # a fixed segment, or None for a parameter
    names: tuple[str, ...]
    methods: dict[str, Handler]
    #: the fixed segments with their positions, and the parameters' positions (from parts)
    fixed: tuple[tuple[int, str], ...] = attrs.field(init=False)
    params: tuple[int, ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.fixed = tuple((i, part) for i, part in enumerate(self.parts) if part is not None)
        self.params = tuple(i for i, part in enumerate(self.parts) if part is None)

    def match(self, segments: list[str], *, empty: bool, fold: bool = False) -> Params | None:
        if len(segments) != len(self.parts):
            return None
        for index, part in self.fixed:
            segment = segments[index]
            if part != segment and not (fold and part.lower() == segment.lower()):
                return None
        values = [segments[index] for index in self.params]
        if not all(values):  # an empty parameter: only before the last segment, if allowed
            last = len(segments) - 1
            for index, value in zip(self.params, values, strict=True):
                if not value and not (empty and index < last):
                    return None
        return dict(zip(self.names, values, strict=True))

    def path(self, params: Params) -> str:
        values = iter(params[name] for name in self.names)
        return "/".join(next(values) if part is None else part for part in self.parts)


class Router:
    """An ASGI app dispatching on (method, path) by ``conventions``.

    Args:
        access_log: called with ``<status> <method> <uri> (<remote>) <elapsed>`` after each
            answer of a route added with ``logged=True`` and each 404/405, as Go's
            ``http_api.Log`` logs; None logs nothing.
        error_log: called with a line and the exception when a handler fails with a bug.
        translate: the daemon's own errors as answers (nsqd's ``Exiting`` is a 503), None
            for an exception that is a bug.
    """

    def __init__(self, conventions: Conventions = NSQ, *,
                 access_log: Callable[[str], object] | None = None,
                 error_log: Callable[[str, BaseException], object] | None = None,
                 translate: Callable[[Exception], HttpError | None] | None = None) -> None:
        self.conventions = conventions
        self.access_log = access_log
        self.error_log = error_log
        self.translate = translate
        self._static: dict[str, dict[str, Handler]] = {}
        self._patterns: list[_Pattern] = []
        self._by_length: dict[int, list[_Pattern]] = {}  # patterns by their segment count
        self._direct: dict[str, dict[str, Handler]] = {}
        self._logged: set[Handler] = set()
        #: httprouter's trees by method, for its trailing-slash redirects (None: routes it
        #: would refuse, then a redirect where the toggled path has a route).
        self._trees: dict[str, Tree] | None = {}

    def add(self, method: str, path: str, handler: Handler, *, logged: bool = True) -> None:
        """Route ``method path`` to ``handler``; ``path`` may have ``:name`` segments."""
        if logged:
            self._logged.add(handler)
        if self._trees is not None:
            try:
                self._trees.setdefault(method, Tree()).add(path)
            except Conflict:
                self._trees = None
        segments = path.split("/")
        if not any(s.startswith(":") for s in segments):
            self._static.setdefault(path, {})[method] = handler
            self._direct.setdefault(path, {})[method] = self._endpoint(handler, None)
            return
        parts = tuple(None if s.startswith(":") else s for s in segments)
        names = tuple(s[1:] for s in segments if s.startswith(":"))
        for pattern in self._patterns:
            if pattern.parts == parts and pattern.names == names:
                pattern.methods[method] = handler
                return
        pattern = _Pattern(parts, names, {method: handler})
        self._patterns.append(pattern)
        self._by_length.setdefault(len(parts), []).append(pattern)

    @property
    def routes(self) -> list[Route]:
        """Every path with its methods as Starlette routes (``:name`` written ``{name}``),
        for what describes the API (an OpenAPI document, its test)."""
        table = [(path, methods) for path, methods in self._static.items()]
        table += [("/".join(f"{{{name}}}" if part is None else part
                            for part, name in _with_names(p)), p.methods)
                  for p in self._patterns]
        return [Route(path, next(iter(methods.values())), methods=list(methods))
                for path, methods in table]

    # -- what a server calls directly --------------------------------------------------------
    def get(self, path: str) -> _Methods | None:
        """The endpoints answering ``path``, by method (None: no route has that path)."""
        direct = self._direct.get(path)
        if direct is not None or not self._patterns:
            return direct
        found = self._pattern_for(path)
        if found is None:
            return None
        return _Bound(self, *found)

    def _endpoint(self, handler: Handler, params: Params | None) -> Handler:
        return partial(self._run, handler=handler, params=params,
                       logged=handler in self._logged)

    def _pattern_for(self, path: str, fold: bool = False) -> tuple[_Pattern, Params] | None:
        segments = path.split("/")
        for pattern in self._by_length.get(len(segments), ()):
            params = pattern.match(segments, empty=self.conventions.empty_params, fold=fold)
            if params is not None:
                return pattern, params
        return None

    def _methods(self, path: str, fold: bool = False) -> tuple[dict[str, Handler], Params]:
        """The handlers of ``path`` by method (and its parameters), empty when none."""
        static = self._static.get(path)
        if static is not None:
            return static, {}
        found = self._pattern_for(path, fold)
        return (found[0].methods, found[1]) if found is not None else ({}, {})

    # -- ASGI ----------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        request = Request(scope, receive)
        response = await self.dispatch(request)
        await response(scope, receive, send)

    async def dispatch(self, request: Request) -> Response:
        """The answer to ``request``: its route's, or the conventions' for a path or method
        that no route answers."""
        method, path = request.method, request.scope["path"]
        methods, params = self._methods(path)
        handler = methods.get(method)
        if handler is not None:
            return await self._run(request, handler=handler, params=params,
                                   logged=handler in self._logged)
        if path == "*" and method == "OPTIONS":  # Go's net/http answers it itself
            return Response(b"", 200)
        if method != "CONNECT" and path != "/":
            target = self._redirect_target(method, path)
            if target is not None:
                return _redirect(request, target)
        c = self.conventions
        allowed = _allowed(methods, method) if c.method_not_allowed or c.options else ""
        if method == "OPTIONS" and allowed and c.options:
            return Response(b"", 200, {"Allow": allowed})
        if allowed and c.method_not_allowed is not None:
            response = await self._run(request, handler=_raise(c.method_not_allowed),
                                       params=None, logged=True)
            response.headers["Allow"] = allowed
            return response
        return await self._run(request, handler=_raise(c.not_found), params=None, logged=True)

    async def _run(self, request: Request, *, handler: Handler, params: Params | None,
                   logged: bool) -> Response:
        if params:
            request.scope["path_params"] = params
        start = time.perf_counter() if logged and self.access_log else 0.0
        try:
            response = await handler(request)
        except HttpError as exc:
            response = self.conventions.error(exc)
        except Exception as exc:
            known = self.translate(exc) if self.translate is not None else None
            if known is None:
                if self.error_log is not None:
                    self.error_log(f"panic in HTTP handler - {exc!r}", exc)
                known = self.conventions.internal_error
            response = self.conventions.error(known)
        if logged and self.access_log is not None:
            self.access_log(_access_line(request, response.status_code, start))
        return response

    def _redirect_target(self, method: str, path: str) -> str | None:
        """httprouter's fallbacks: the path with its trailing slash toggled where its tree
        recommends it, then (NSQ's) the cleaned path in the routes' letter case."""
        toggled = path[:-1] if path.endswith("/") else path + "/"
        if self._trees is None:
            if method in self._methods(toggled)[0]:
                return toggled
        elif (tree := self._trees.get(method)) is not None and tree.redirects(path):
            return toggled
        if not self.conventions.fixed_path:
            return None
        clean = _clean_path(path)
        for candidate in dict.fromkeys((clean, clean.rstrip("/") or "/", clean + "/")):
            for route, methods in self._static.items():
                if method in methods and route.lower() == candidate.lower():
                    return route
            found = self._pattern_for(candidate, fold=True)
            if found is not None and method in found[0].methods:
                return found[0].path(found[1])
        return None


class _Methods(Protocol):
    def get(self, method: str, /) -> Handler | None: ...


class _Bound:
    """The endpoints of a ``:name`` route for one path: an endpoint is made only for the
    method asked."""

    __slots__ = ("params", "pattern", "router")

    def __init__(self, router: Router, pattern: _Pattern, params: Params) -> None:
        self.router = router
        self.pattern = pattern
        self.params = params

    def get(self, method: str, /) -> Handler | None:
        handler = self.pattern.methods.get(method)
        return None if handler is None else self.router._endpoint(handler, self.params)


def _with_names(pattern: _Pattern) -> list[tuple[str | None, str]]:
    names = iter(pattern.names)
    return [(part, next(names) if part is None else "") for part in pattern.parts]


def _allowed(methods: Mapping[str, Handler], method: str) -> str:
    """httprouter's ``Allow``: the path's other methods and OPTIONS, sorted (empty when the
    path has no other method)."""
    others = sorted({m for m in methods if m not in (method, "OPTIONS")} | {"OPTIONS"})
    return ", ".join(others) if len(others) > 1 else ""


def _raise(error: HttpError) -> Handler:
    async def handler(request: Request) -> Response:
        raise error.copy()
    return handler


def _access_line(request: Request, status: int, start: float) -> str:
    elapsed = format_go_duration(time.perf_counter() - start)
    client = request.scope.get("client")
    remote = join_host_port(client[0], client[1]) if client else "-"
    scope = request.scope
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    query: bytes = scope.get("query_string", b"")
    uri = (raw_path + (b"?" + query if query else b"")).decode("latin-1")
    return f"{status} {request.method} {uri} ({remote}) {elapsed}"


def _redirect(request: Request, target: str) -> Response:
    """Go's ``http.Redirect`` to a path (escaped as ``URL.String`` and cleaned, keeping a
    trailing slash): 301 with a small HTML body for GET, 307 for the rest."""
    query = request.scope.get("query_string", b"").decode("latin-1")
    location = _clean_path(quote(target, safe="/!$&'()*+,;=:@")) + (f"?{query}" if query else "")
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


async def _lifespan(receive: Receive, send: Send) -> None:
    """A router has nothing to start or stop: it acknowledges the lifespan's messages."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
