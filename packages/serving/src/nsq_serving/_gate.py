"""``HttpGate``: ASGI middleware that sees each HTTP request first and may answer it itself.

nsqd's ``--tls-required`` (a 403 for plain HTTP) and nsqadmin's basic auth (a 401 or 403 for
a change without valid credentials) share this shape: their ``refusal`` returns the answer to
send instead of the app's, or None to pass the request on. Anything but an HTTP request
(lifespan, websocket) goes to the app untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.responses import Response
    from starlette.types import ASGIApp, Receive, Scope, Send

#: ``await refusal(scope)``: the answer instead of the app's, or None to let the request
#: through. It may add to ``scope`` what the app should know (who signed in, say).
Refusal = Callable[["Scope"], Awaitable["Response | None"]]


class HttpGate:
    """``app`` behind ``refusal``, for HTTP requests."""

    def __init__(self, app: ASGIApp, refusal: Refusal) -> None:
        self.app = app
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            answer = await self.refusal(scope)
            if answer is not None:
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)
