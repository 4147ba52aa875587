"""serve(): one Trio process running nsqd's TCP server, HTTP API and its loops.

Task tree::

    serve
    ├── tcp: trio.serve_listeners ── one task per connection ─┬─ reader
    │                                                         └─ writer (output buffer, heartbeats)
    ├── http: hypercorn worker (Starlette app)
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

import errno
import fcntl
import logging
import os
import socket
import ssl
from pathlib import Path

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve

from .broker import Broker
from .http_api import build_app
from .options import Options
from .tcp import serve_tcp

log = logging.getLogger("nsqd")


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def bind_socket(address: str) -> socket.socket:
    host, port = split_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _shown(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def lock_data_path(path: str) -> int:
    """Take nsqd's exclusive lock on the data directory; a second nsqd on it fails."""
    directory = Path(path or ".")
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RuntimeError(f"--data-path={directory} in use (possibly by another instance of "
                               "nsqd)") from None
        raise
    return fd


async def serve(opts: Options, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Run nsqd until cancelled."""
    lock_fd = lock_data_path(opts.data_path)
    broker = Broker(opts)
    tcp_sock = bind_socket(opts.tcp_address)
    http_sock = bind_socket(opts.http_address) if opts.http_address else None
    https_sock = (bind_socket(opts.https_address)
                  if broker.tls_context is not None and opts.https_address else None)
    broker.tcp_port = tcp_sock.getsockname()[1]
    log.info("TCP: listening on %s", _shown(tcp_sock))
    if http_sock is not None:
        broker.http_port = http_sock.getsockname()[1]
        log.info("HTTP: listening on %s", _shown(http_sock))
    if https_sock is not None:
        broker.https_port = https_sock.getsockname()[1]
        log.info("HTTPS: listening on %s", _shown(https_sock))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)  # metadata and saved messages load before clients
            listener = trio.SocketListener(trio.socket.from_stdlib_socket(tcp_sock))
            nursery.start_soon(serve_tcp, broker, [listener])
            if http_sock is not None or https_sock is not None:
                await nursery.start(_serve_http, broker, _http_config(opts), http_sock,
                                    https_sock)
            task_status.started(broker)
    finally:
        os.close(lock_fd)


def _http_config(opts: Options) -> Config:
    config = Config()
    config.accesslog = None
    config.errorlog = logging.getLogger("nsqd.http")
    config.errorlog.setLevel(logging.WARNING)
    config.keep_alive_timeout = 75
    if opts.tls_cert and opts.tls_key:
        config.certfile = opts.tls_cert
        config.keyfile = opts.tls_key
        if opts.tls_client_auth_policy:
            config.verify_mode = ssl.CERT_REQUIRED
            config.ca_certs = opts.tls_root_ca_file or None
    return config


async def _serve_http(broker: Broker, config: Config, http_sock: socket.socket | None,
                      https_sock: socket.socket | None, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    from hypercorn.utils import wrap_app

    app = wrap_app(build_app(broker), config.wsgi_max_body_size, "asgi")
    sockets = Sockets(secure_sockets=[https_sock] if https_sock else [],
                      insecure_sockets=[http_sock] if http_sock else [], quic_sockets=[])
    await worker_serve(app, config, sockets=sockets, task_status=task_status)
