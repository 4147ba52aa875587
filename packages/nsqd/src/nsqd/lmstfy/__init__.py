"""lmstfy's job-queue HTTP API, served by nsqd on its own queues (beyond NSQ).

``--lmstfy-http-address`` serves the data API (``api``), ``--lmstfy-admin-http-address`` the
admin API (``admin``). Jobs live in NSQ topics and channels (``names``, ``queues``); tokens,
limits and the queue list in ``lmstfy.dat`` (``state``). See docs/lmstfy.md.
"""

from __future__ import annotations

import socket

import trio
from nsq_serving import serve_http

from ..broker import Broker
from .admin import build_admin_app
from .api import MAX_BULK_BODY, build_data_app
from .leaders import Leaders
from .queues import JobQueues
from .state import State
from .throttle import Throttle


async def serve_lmstfy(broker: Broker, state: State, data_sock: socket.socket | None,
                       admin_sock: socket.socket | None, accounts: dict[str, str], *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the data and admin APIs on the sockets given, until cancelled."""
    queues = JobQueues(broker, state)
    throttle = Throttle(state.limits, broker.now)
    leaders = Leaders(broker, MAX_BULK_BODY) if broker.opts.etcd_endpoints else None
    try:
        async with trio.open_nursery() as nursery:
            if data_sock is not None:
                app = build_data_app(queues, state, throttle, leaders)
                await nursery.start(lambda task_status: serve_http(
                    app, [data_sock], task_status=task_status))
            if admin_sock is not None:
                await nursery.start(lambda task_status: serve_http(
                    build_admin_app(queues, state, throttle, accounts), [admin_sock],
                    task_status=task_status))
            task_status.started()
    finally:
        if leaders is not None:
            await leaders.aclose()
