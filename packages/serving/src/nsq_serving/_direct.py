"""Direct calls: a request for a route whose endpoint can be called as it is goes straight to it.

Starlette's own path to an endpoint (its middleware stack, the router's scan of every route,
the per-request exception-handling wrappers, the ASGI messages of the response) costs more
than the endpoint itself on NSQ's hot routes. Two kinds of app give their endpoints:

- a ``Router`` (the daemons' APIs): ``router.get(path)``, endpoints that answer every error
  themselves;
- a Starlette app without middleware of its own: each route with a fixed path and an
  ``async def endpoint(request) -> Response``. An exception it raises is answered by the app's
  handlers through Starlette's own exception middleware, as Starlette would answer it.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ._router import Router

Endpoint = Callable[[Request], Awaitable[Response]]

log = logging.getLogger("nsq_serving")


class Methods(Protocol):
    """method -> endpoint, for one path."""

    def get(self, method: str, /) -> Endpoint | None: ...


class Endpoints(Protocol):
    """path -> method -> endpoint, for the routes a server may call directly."""

    def get(self, path: str, /) -> Methods | None: ...


def direct_endpoints(app: object) -> Endpoints:
    """The routes of ``app`` that can be called directly (none when it is neither a ``Router``
    nor a plain Starlette app: middleware of its own must see every request)."""
    if isinstance(app, Router):
        return app
    if not isinstance(app, Starlette) or app.user_middleware:
        return {}
    table: dict[str, dict[str, Endpoint]] = {}
    for route in app.router.routes:
        if (isinstance(route, Route) and not route.param_convertors and route.methods
                and _is_async(route.endpoint)):
            methods = table.setdefault(route.path, {})
            for method in route.methods:
                methods.setdefault(method, route.endpoint)
    return table


def _is_async(endpoint: Any) -> bool:
    while isinstance(endpoint, functools.partial):
        endpoint = endpoint.func
    return inspect.iscoroutinefunction(endpoint) or (
        callable(endpoint) and inspect.iscoroutinefunction(type(endpoint).__call__))


async def answer_error(app: Any, scope: Scope, receive: Receive,
                       send: Callable[[dict[str, Any]], Awaitable[None]], exc: Exception) -> None:
    """Answer ``exc``, raised by an endpoint of ``app`` called directly, as the app's own
    middleware stack would: its handlers by class or status (Starlette's exception
    middleware), then its 500 handler or Starlette's plain 500, logged."""
    handlers: Mapping[Any, Any] = getattr(app, "exception_handlers", {})
    for_500 = handlers.get(500) or handlers.get(Exception)
    others = {key: handler for key, handler in handlers.items() if key not in (500, Exception)}

    async def raising(scope: Scope, receive: Receive, send: Send) -> None:
        raise exc

    async def sending(message: MutableMapping[str, Any]) -> None:
        await send(dict(message))

    stack = ServerErrorMiddleware(ExceptionMiddleware(raising, others), handler=for_500)
    try:
        await stack(scope, receive, sending)
    except Exception as unhandled:  # answered with a 500 by then
        log.error("%s %s failed", scope.get("method"), scope.get("path"), exc_info=unhandled)
