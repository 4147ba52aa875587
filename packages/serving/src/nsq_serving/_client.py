"""Whether the client of a request is still there, for handlers that wait (long-polls).

A handler that waits for something to hand over (a message, a job) must not take it for a
client that has gone: ``while_connected`` cancels its block when the client closes the
connection, and ``client_gone`` asks once more, without waiting, right before taking. Both work
once the request's body has been read (reading is the handler's, and what the client sends
after it belongs to its next request).

With ``serve_http`` the disconnect is seen by the server's ``receive`` (``http.disconnect``
when the peer closes) and by the socket itself (``client_gone``); under another ASGI server
``while_connected`` relies on that server's ``http.disconnect``, and ``client_gone`` says
False.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from starlette.requests import Request


def client_gone(request: Request) -> bool:
    """Whether the client of ``request`` has closed the connection (asked of the socket,
    without reading from it or waiting)."""
    served = request.scope.get("nsq_serving.request")
    return served is not None and bool(served.gone())


async def wait_until_gone(request: Request) -> None:
    """Return when the client of ``request`` has gone (its body, if any, already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@asynccontextmanager
async def while_connected(request: Request) -> AsyncIterator[None]:
    """The block runs until it ends or the client of ``request`` goes away, whichever is first
    (then it is cancelled, and the ``async with`` ends normally)."""
    async with trio.open_nursery() as nursery:
        async def watch() -> None:
            await wait_until_gone(request)
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()
