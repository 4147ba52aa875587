"""serve(): one Trio process running nsqd's TCP server, HTTP API and its loops.

Task tree::

    serve
    ├── tcp: trio.serve_listeners ── one task per connection ─┬─ reader
    │                                                         └─ writer (output buffer, heartbeats)
    ├── http: nsq_serving (Starlette app; hot routes called directly)
    ├── lmstfy (with --lmstfy-http-address / --lmstfy-admin-http-address): its two APIs
    └── broker
        ├── pump: delivers messages for dirty channels
        ├── queue scan: in-flight timeouts and deferred messages, every 100 ms
        ├── metadata writer: nsqd.dat after topics/channels change
        ├── one per topic: held messages -> channels (and its disk queue's read-ahead)
        └── one per channel: its disk queue's read-ahead

The listeners are bound before anything is served, so the real ports (port 0 included) are
known and printed first, as nsqd prints them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from typing import TYPE_CHECKING

import trio
from nsq_common import go_errno_text, join_host_port
from nsq_serving import ListenError, listen_tcp

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


async def serve(opts: Options, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Run nsqd until cancelled."""
    try:
        lock_fd = lock_data_path(opts.data_path)
    except StartError as exc:
        raise StartError(f"failed to instantiate nsqd - {exc}") from None
    bound: list[socket.socket] = []
    try:
        broker = Broker(opts)
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
        lmstfy_state = _lmstfy_state(opts) if any(lmstfy_socks) else None
    except BaseException as exc:
        for sock in bound:
            sock.close()
        os.close(lock_fd)
        if isinstance(exc, (ListenError, StartError)):
            raise StartError(f"failed to instantiate nsqd - {exc}") from None
        raise
    broker.tcp_port = tcp_sock.getsockname()[1]
    log.info("TCP: listening on %s", _shown(tcp_sock))
    if http_sock is not None:
        broker.http_port = http_sock.getsockname()[1]
        log.info("HTTP: listening on %s", _shown(http_sock))
    if https_sock is not None:
        broker.https_port = https_sock.getsockname()[1]
        log.info("HTTPS: listening on %s", _shown(https_sock))
    for lmstfy_sock, what in zip(lmstfy_socks, ("LMSTFY", "LMSTFY_ADMIN"), strict=True):
        if lmstfy_sock is not None:
            log.info("%s: listening on %s", what, _shown(lmstfy_sock))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)  # metadata and saved messages load before clients
            listener = trio.SocketListener(trio.socket.from_stdlib_socket(tcp_sock))
            nursery.start_soon(serve_tcp, broker, [listener])
            if http_sock is not None or https_sock is not None:
                await nursery.start(_serve_http, broker, http_sock, https_sock)
            if lmstfy_state is not None:
                from .lmstfy import serve_lmstfy

                accounts = dict(a.split(":", 1) for a in opts.lmstfy_admin_accounts)
                await nursery.start(serve_lmstfy, broker, lmstfy_state, *lmstfy_socks, accounts)
            task_status.started(broker)
    finally:
        os.close(lock_fd)


def _lmstfy_state(opts: Options) -> State:
    """lmstfy's tokens, limits and queue list (only nsqds that serve its API load it).

    Raises:
        StartError: they cannot be read.
    """
    from .lmstfy.state import State

    state = State(opts.data_path)
    try:
        state.load()
    except ValueError as exc:
        raise StartError(str(exc)) from None
    return state


async def _serve_http(broker: Broker, http_sock: socket.socket | None,
                      https_sock: socket.socket | None, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """The HTTP API on --http-address and, with TLS configured, --https-address (the TCP
    protocol's TLS settings, as Go's nsqd uses them for both)."""
    from nsq_serving import serve_http

    await serve_http(build_app(broker), [http_sock] if http_sock else [],
                     tls_sockets=[https_sock] if https_sock else [],
                     ssl_context=broker.tls_context, counts=broker.http_connections,
                     task_status=task_status)
