"""``serve(options)``: nsqadmin on Trio through ``nsq_serving.serve_app``.

The listening socket is bound first, so the real address (port 0 included) is known and
logged as ``HTTP: listening on HOST:PORT`` before anything is served, as the Go daemons do.
"""

from __future__ import annotations

import logging

import trio
from nsq_serving import serve_app

from .app import create_app
from .options import Options

log = logging.getLogger("nsqadmin")


async def serve(options: Options, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Serve the dashboard until cancelled; ``task_status`` gets the bound ``host:port``."""
    await serve_app(lambda counts: create_app(options, connections=counts),
                    options.http_address, backlog=1024, log=log, task_status=task_status)
