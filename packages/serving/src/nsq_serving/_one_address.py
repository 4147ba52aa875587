"""``serve_app``: a daemon that is one ASGI app on one HTTP address (nsqadmin, nsq_auth).

The listening socket is bound first, so the real address (port 0 included) is known and
logged as ``HTTP: listening on HOST:PORT`` before anything is served, as the Go daemons do,
and a taken port fails the start with ``ListenError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from ._listen import bound_address, listen_tcp
from ._server import ConnectionCounts, serve_http


async def serve_app(app_for: Callable[[ConnectionCounts], Any], address: str, *, backlog: int,
                    log: logging.Logger,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app_for(counts)`` on ``address`` until cancelled; ``counts`` are the server's
    connections, for the app's ``/metrics``. ``task_status`` gets the bound ``host:port``.

    Raises:
        ListenError: ``address`` cannot be listened on, in Go's words.
    """
    sock = listen_tcp(address, backlog)
    sock.setblocking(False)
    bound = bound_address(sock)
    log.info("HTTP: listening on %s", bound)
    async with trio.open_nursery() as nursery:
        counts = ConnectionCounts()
        await nursery.start(partial(serve_http, app_for(counts), [sock], counts=counts))
        task_status.started(bound)
