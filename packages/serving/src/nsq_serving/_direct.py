"""Direct calls: a request for a plain route of a Starlette app goes straight to its endpoint.

Starlette's own path to an endpoint (its middleware stack, the router's scan of every route,
the per-request exception-handling wrappers, the ASGI messages of the response) costs more
than the endpoint itself on NSQ's hot routes. When an app has no middleware of its own, a
route with a fixed path and an ``async def endpoint(request) -> Response`` can be called
with a ``Request`` and its ``Response`` written out by the server: the same endpoint, the same
answer, from the app's one routing table. Errors an endpoint raises are answered by the
app's own exception handlers, as Starlette would.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette._utils import is_async_callable
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

Endpoint = Callable[[Request], Awaitable[Response]]
#: path -> method -> endpoint
Endpoints = Mapping[str, Mapping[str, Endpoint]]

log = logging.getLogger("nsq_serving")


def direct_endpoints(app: object) -> dict[str, dict[str, Endpoint]]:
    """The routes of ``app`` that can be called directly (none when it is not a plain Starlette
    app: middleware of its own must see every request)."""
    if not isinstance(app, Starlette) or app.user_middleware:
        return {}
    table: dict[str, dict[str, Endpoint]] = {}
    for route in app.router.routes:
        if (isinstance(route, Route) and not route.param_convertors and route.methods
                and is_async_callable(route.endpoint)):
            methods = table.setdefault(route.path, {})
            for method in route.methods:
                methods.setdefault(method, route.endpoint)
    return table


async def error_response(app: Any, request: Request, exc: Exception) -> Response:
    """What Starlette answers when an endpoint raises ``exc``: the app's handler for its status
    code (an HTTPException) or its class, else Starlette's defaults."""
    handlers: Mapping[Any, Callable[..., Any]] = getattr(app, "exception_handlers", {})
    handler = None
    if isinstance(exc, HTTPException):
        handler = handlers.get(exc.status_code)
    if handler is None:
        handler = next((handlers[cls] for cls in type(exc).__mro__ if cls in handlers), None)
    if handler is None:
        if isinstance(exc, HTTPException):
            return PlainTextResponse(exc.detail, exc.status_code, headers=exc.headers)
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return PlainTextResponse("Internal Server Error", 500)
    response: Response = (await handler(request, exc) if is_async_callable(handler)
                          else handler(request, exc))
    return response
