"""``serve(options, store)``: the auth API on Trio through nsq_serving.

The socket is bound before anything is served, so the real address (port 0 included) is
logged as ``HTTP: listening on HOST:PORT`` first, as NSQ's daemons do.
"""

from __future__ import annotations

import logging
from functools import partial

import trio
from nsq_serving import ConnectionCounts, bound_address, listen_tcp, serve_http

from .app import build_app
from .options import Options
from .secrets_file import SecretStore

log = logging.getLogger("nsq_auth")


async def serve(options: Options, store: SecretStore, *,
                task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Answer nsqd's auth requests until cancelled; ``task_status`` gets ``host:port``."""
    sock = listen_tcp(options.http_address, 128)  # ListenError in Go's words
    sock.setblocking(False)
    address = bound_address(sock)
    log.info("HTTP: listening on %s", address)
    async with trio.open_nursery() as nursery:
        counts = ConnectionCounts()
        await nursery.start(partial(serve_http, build_app(store, counts), [sock], counts=counts))
        task_status.started(address)
