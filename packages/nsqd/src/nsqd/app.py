"""serve(): one Trio process running nsqd's TCP server, HTTP API and its loops.

Task tree::

    serve
    ├── tcp: trio.serve_listeners ── one task per connection ─┬─ reader
    │                                                         └─ writer (output buffer, heartbeats)
    ├── http: nsq_serving (Starlette app; hot routes called directly)
    ├── lmstfy (with --lmstfy-http-address / --lmstfy-admin-http-address): its two APIs
    ├── coordinator (with --etcd-endpoints): membership and leaders in etcd (nsqd.replication)
    └── broker
        ├── pump: delivers messages for dirty channels
        ├── queue scan: in-flight timeouts and deferred messages, every 100 ms
        ├── metadata writer: nsqd.dat after topics/channels change
        ├── one per topic: held messages -> channels (and its disk queue's read-ahead)
        └── one per channel: its disk queue's read-ahead

The listeners are bound before anything is served, so the real ports (port 0 included) are
known to tell the lookupds and to print. Everything that serves is imported and built
before them (the apps, lmstfy's state), and nothing is served before the broker has loaded
its metadata and told every lookupd about it (``Lookup.run``), nor, with --etcd-endpoints,
before the topics this node held as replicas are held as followers of no leader (they take
no publish until etcd gives them their role: ``DataPath.hold_replicas``). HTTP is served last: the
first ``/ping`` answered OK means nsqd is registered and serves every listener (the early
start answers "not yet" before). Nothing is imported on the event loop from then on.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from nsq_common import go_errno_text, join_host_port
from nsq_serving import ListenError, listen_tcp, serve_http, warm_up
from starlette.types import ASGIApp

from .broker import Broker
from .errors import StartError
from .http_api import build_app
from .options import Options
from .tcp import serve_tcp

if TYPE_CHECKING:
    from .lmstfy.state import State

log = logging.getLogger("nsqd")


def bind_socket(address: str) -> socket.socket:
    """A non-blocking listening socket; ListenError names the address as Go's nsqd does."""
    sock: socket.socket = listen_tcp(address, 1024)
    sock.setblocking(False)
    return sock


def _shown(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return join_host_port(host, port)


def lock_data_path(path: str) -> int:
    """Take nsqd's exclusive lock on the data directory; a second nsqd on it fails.

    The directory must exist, as in Go's nsqd: a mistyped --data-path stops nsqd instead of
    starting an empty broker somewhere new.

    Raises:
        StartError: ``failed to lock data-path: open <path>: no such file or directory``.
    """
    directory = path or os.getcwd()
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        raise StartError(f"failed to lock data-path: open {directory}: {go_errno_text(exc)}"
                         ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StartError(f"failed to lock data-path: cannot flock directory {directory} - "
                         f"{go_errno_text(exc)} (possibly in use by another instance of nsqd)"
                         ) from None
    return fd


async def serve(opts: Options, *, data_lock: int | None = None,
                task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
    """Run nsqd until cancelled. ``data_lock``: the data path's lock, taken already
    (``lock_data_path``, by the command's early start); closed at the end."""
    try:
        lock_fd = lock_data_path(opts.data_path) if data_lock is None else data_lock
    except StartError as exc:
        raise StartError(f"failed to instantiate nsqd - {exc}") from None
    bound: list[socket.socket] = []
    try:
        broker = Broker(opts)
        app = build_app(broker)
        lmstfy = (_lmstfy(opts) if opts.lmstfy_http_address or opts.lmstfy_admin_http_address
                  else None)
        coordinate = _replication() if opts.etcd_endpoints else None
        tcp_sock = bind_socket(opts.tcp_address)
        bound.append(tcp_sock)
        http_sock = bind_socket(opts.http_address) if opts.http_address else None
        if http_sock is not None:
            bound.append(http_sock)
        https_sock = (bind_socket(opts.https_address)
                      if broker.tls_context is not None and opts.https_address else None)
        if https_sock is not None:
            bound.append(https_sock)
        lmstfy_socks: list[socket.socket | None] = []
        for address in (opts.lmstfy_http_address, opts.lmstfy_admin_http_address):
            lmstfy_sock = bind_socket(address) if address else None
            lmstfy_socks.append(lmstfy_sock)
            if lmstfy_sock is not None:
                bound.append(lmstfy_sock)
    except BaseException as exc:
        for sock in bound:
            sock.close()
        os.close(lock_fd)
        if isinstance(exc, (ListenError, StartError)):
            raise StartError(f"failed to instantiate nsqd - {exc}") from None
        raise
    broker.bound(tcp_sock.getsockname()[1],
                 http_sock.getsockname()[1] if http_sock is not None else 0,
                 https_sock.getsockname()[1] if https_sock is not None else 0,
                 tuple(_shown(sock) if sock is not None else "" for sock in lmstfy_socks))
    try:
        async with trio.open_nursery() as nursery:
            # Metadata and saved messages load, and every lookupd hears of them, before
            # any client is served, and before the lines that say where (as Go's nsqd logs
            # them when it starts serving): whoever waits for them finds nsqd registered.
            await nursery.start(broker.run)
            if coordinate is not None:  # (its topics held before any client is served)
                await nursery.start(coordinate, opts, broker)
            log.info("TCP: listening on %s", _shown(tcp_sock))
            if http_sock is not None:
                log.info("HTTP: listening on %s", _shown(http_sock))
            if https_sock is not None:
                log.info("HTTPS: listening on %s", _shown(https_sock))
            for lmstfy_sock, what in zip(lmstfy_socks, ("LMSTFY", "LMSTFY_ADMIN"), strict=True):
                if lmstfy_sock is not None:
                    log.info("%s: listening on %s", what, _shown(lmstfy_sock))
            if lmstfy is not None:
                serve_lmstfy, state = lmstfy
                accounts = dict(a.split(":", 1) for a in opts.lmstfy_admin_accounts)
                await nursery.start(serve_lmstfy, broker, state, *lmstfy_socks, accounts)
            listener = trio.SocketListener(trio.socket.from_stdlib_socket(tcp_sock))
            await nursery.start(serve_tcp, broker, [listener])
            # HTTP last: its /ping says OK from now on (the early start's said "not yet"),
            # and every other listener serves already
            if http_sock is not None or https_sock is not None:
                await nursery.start(_serve_http, app, broker, http_sock, https_sock)
            # loaded on first use: /metrics' collector, the lookupds' HTTP client
            nursery.start_soon(warm_up, "nsq_serving._metrics", "nsqd.metrics",
                               *(["httpx"] if opts.nsqlookupd_tcp_addresses else []))
            task_status.started(broker)
    finally:
        os.close(lock_fd)


def _lmstfy(opts: Options) -> tuple[Callable[..., Awaitable[None]], State]:
    """What serves lmstfy's APIs and its tokens, limits and queue list (only nsqds that
    serve them import and load these).

    Raises:
        StartError: they cannot be read.
    """
    from .lmstfy import serve_lmstfy
    from .lmstfy.state import State

    state = State(opts.data_path)
    try:
        state.load()
    except ValueError as exc:
        raise StartError(str(exc)) from None
    return serve_lmstfy, state


def _replication() -> Callable[[Options, Broker], Awaitable[None]]:
    """What takes part in the replication cluster of ``--etcd-endpoints``
    (docs/design/replication.md): only nsqds given it import ``nsqd.replication``."""
    from nsq_serving import version_string

    from .flags import etcd_endpoints
    from .replication.coordinator import Coordinator
    from .replication.datapath import DataPath
    from .replication.edge import Edge
    from .replication.keys import NodeInfo

    async def coordinate(opts: Options, broker: Broker, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                         ) -> None:
        """Join in the background: the node serves meanwhile, and while etcd is unreachable.
        Started once the topics this node held as replicas are held as followers of no
        leader (``DataPath.hold_replicas``): none takes a publish or delivers before etcd
        says what it is. Followers' fetch connections are served from now on."""
        tcp_port = opts.broadcast_tcp_port or broker.tcp_port
        lmstfy = broker.lmstfy_addresses[0] if broker.lmstfy_addresses else ""
        info = NodeInfo(join_host_port(opts.broadcast_address, tcp_port),
                        opts.broadcast_address, tcp_port,
                        opts.broadcast_http_port or broker.http_port, version_string("nsqd"),
                        lmstfy_port=int(lmstfy.rpartition(":")[2]) if lmstfy else 0)
        coordinator = Coordinator(etcd_endpoints({"etcd_endpoints": opts.etcd_endpoints}),
                                  info, broker.clock, local=broker,
                                  down_timeout=opts.replica_down_timeout)
        data = DataPath(broker, coordinator, min_insync=opts.min_insync_replicas,
                        lag_max=opts.replica_lag_max)
        coordinator.attach(host_topic=data.host, on_change=data.sync,
                           progress_of=data.progress, may_lead=data.may_lead)
        data.hold_replicas()
        broker.serve_replication(data.server.handle)
        broker.replicated(Edge(coordinator, opts.default_replicas, data.forward))
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(data.run)
                await coordinator.run()
        finally:
            broker.replicated(None)

    return coordinate


async def _serve_http(app: ASGIApp, broker: Broker, http_sock: socket.socket | None,
                      https_sock: socket.socket | None, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """The HTTP API on --http-address and, with TLS configured, --https-address (the TCP
    protocol's TLS settings, as Go's nsqd uses them for both)."""
    await serve_http(app, [http_sock] if http_sock else [],
                     tls_sockets=[https_sock] if https_sock else [],
                     ssl_context=broker.tls_context, counts=broker.http_connections,
                     task_status=task_status)
