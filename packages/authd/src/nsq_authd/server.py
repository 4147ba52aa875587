"""``serve(options, store)``: the auth API on Trio through ``nsq_serving.serve_app``.

The socket is bound before anything is served, so the real address (port 0 included) is
logged as ``HTTP: listening on HOST:PORT`` first, as NSQ's daemons do.
"""

from __future__ import annotations

import logging
from functools import partial

import trio
from nsq_serving import serve_app

from .app import build_app
from .options import Options
from .secrets_file import SecretStore

log = logging.getLogger("nsq_auth")


async def serve(options: Options, store: SecretStore, *,
                task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Answer nsqd's auth requests until cancelled; ``task_status`` gets ``host:port``."""
    await serve_app(partial(build_app, store), options.http_address, backlog=128, log=log,
                    task_status=task_status)
