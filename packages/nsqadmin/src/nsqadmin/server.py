"""``serve(options)``: nsqadmin on Trio through nsq_serving.

The listening socket is bound first, so the real address (port 0 included) is known and
logged as ``HTTP: listening on HOST:PORT`` before anything is served, as the Go daemons do.
"""

from __future__ import annotations

import logging
from functools import partial

import trio
from nsq_serving import ConnectionCounts, bound_address, listen_tcp, serve_http

from .app import create_app
from .options import Options

log = logging.getLogger("nsqadmin")


async def serve(options: Options, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Serve the dashboard until cancelled; ``task_status`` gets the bound ``host:port``."""
    sock = listen_tcp(options.http_address, 1024)  # ListenError in Go's words
    sock.setblocking(False)
    address = bound_address(sock)
    log.info("HTTP: listening on %s", address)
    async with trio.open_nursery() as nursery:
        counts = ConnectionCounts()
        await nursery.start(partial(serve_http, create_app(options, connections=counts), [sock],
                                    counts=counts))
        task_status.started(address)
