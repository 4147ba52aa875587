"""``serve_http``: an ASGI app on listening sockets, plain and TLS, until cancelled.

Task tree::

    serve_http
    ├── lifespan: the app's startup and shutdown (shielded: it ends when the server has
    │   stopped taking requests, not when the cancellation arrives)
    ├── sweep_late: closes connections idle past the keep-alive timeout, and those whose
    │   client sends a request slower than the request timeout (408)
    └── one task per listener ── one task per connection (Connection.serve)
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Sequence
from functools import partial
from typing import Any

import trio

from . import _early
from ._connection import REQUEST_TIMEOUT, Connection
from ._direct import Endpoints, direct_endpoints
from ._lifespan import Lifespan
from ._transport import SocketTransport, StreamTransport, Transport

log = logging.getLogger("nsq_serving")

#: Go's net/http keeps an idle connection until the client closes it; NSQ's Go daemons set
#: no idle timeout. A bound is kept so that forgotten connections do not pile up.
#: (``REQUEST_TIMEOUT`` bounds a request being sent: see ``_connection``.)
KEEP_ALIVE_TIMEOUT = 75.0


class ConnectionCounts:
    """Connections of one server, for the daemons' ``/metrics``: counted when a connection
    opens and closes, never per request."""

    __slots__ = ("accepted", "open")

    def __init__(self) -> None:
        self.accepted = 0
        self.open = 0


async def serve_http(app: Any, sockets: Sequence[socket.socket] = (), *,
                     tls_sockets: Sequence[socket.socket] = (),
                     ssl_context: ssl.SSLContext | None = None,
                     endpoints: Endpoints | None = None,
                     keep_alive_timeout: float = KEEP_ALIVE_TIMEOUT,
                     request_timeout: float = REQUEST_TIMEOUT,
                     counts: ConnectionCounts | None = None,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on listening ``sockets`` (HTTP) and ``tls_sockets`` (HTTPS with
    ``ssl_context``) until cancelled. ``task_status.started()`` once the app's lifespan has
    started and requests are being accepted. Connections the daemon's early start accepted
    on ``sockets`` and did not finish (``_early``) are served first.

    Args:
        endpoints: routes called directly (see ``direct_endpoints``); by default those of
            ``app`` when it is a ``Router`` or a plain Starlette app.
        keep_alive_timeout: seconds a connection may wait for its next request.
        request_timeout: seconds for a request's head from its first byte, and for its body
            from the app's first read; a client slower than that gets 408 and is closed.
        counts: kept up to date with the connections accepted and open.

    Raises:
        RuntimeError: the app's lifespan startup failed.
    """
    if tls_sockets and ssl_context is None:
        raise ValueError("tls_sockets need an ssl_context")
    table = direct_endpoints(app) if endpoints is None else endpoints
    listeners = [(trio.SocketListener(trio.socket.from_stdlib_socket(sock)), "http")
                 for sock in sockets]
    listeners += [(trio.SocketListener(trio.socket.from_stdlib_socket(sock)), "https")
                  for sock in tls_sockets]

    tally = ConnectionCounts() if counts is None else counts

    async def connection(scheme: str, stream: trio.SocketStream) -> None:
        tally.accepted += 1
        tally.open += 1
        try:
            await _serve_connection(scheme, stream)
        finally:
            tally.open -= 1

    async def _serve_connection(scheme: str, stream: trio.SocketStream) -> None:
        sock = stream.socket
        try:
            server, client = _address(sock.getsockname()), _address(sock.getpeername())
        except OSError:
            await stream.aclose()  # gone before it was served
            return
        transport: Transport = SocketTransport(stream)
        if scheme == "https":
            assert ssl_context is not None
            transport = StreamTransport(trio.SSLStream(stream, ssl_context, server_side=True,
                                                       https_compatible=True))
        conn = Connection(transport, app, table, scheme=scheme, server=server, client=client,
                          keep_alive_timeout=keep_alive_timeout, request_timeout=request_timeout)
        connections.add(conn)
        try:
            await conn.serve()
        except Exception:  # one connection's bug must not stop the server
            log.exception("HTTP connection from %s failed", client)
        finally:
            connections.discard(conn)

    async def sweep_late() -> None:
        """Close connections whose client is late: idle past the keep-alive timeout, or
        sending a request slower than the request timeout (each connection keeps its
        deadline; one sweep over them all every eighth of the shorter timeout)."""
        while True:
            await trio.sleep(min(keep_alive_timeout, request_timeout) / 8)
            now = trio.current_time()
            for conn in connections:
                if conn.reading_until is not None and conn.reading_until < now:
                    conn.expire()

    connections: set[Connection] = set()
    async with Lifespan(app), trio.open_nursery() as nursery:
        nursery.start_soon(sweep_late)
        for sock in sockets:
            for early in _early.take_connections(sock):
                stream = trio.SocketStream(trio.socket.from_stdlib_socket(early))
                nursery.start_soon(connection, "http", stream)
        for listener, scheme in listeners:
            nursery.start_soon(partial(trio.serve_listeners, partial(connection, scheme),
                                       [listener], handler_nursery=nursery))
        task_status.started()


def _address(sockaddr: Any) -> tuple[str, int] | None:
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        return str(sockaddr[0]), int(sockaddr[1])
    return None
