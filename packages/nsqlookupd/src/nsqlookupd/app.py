"""nsqlookupd as one Trio task: bind both listeners, serve TCP and HTTP in one nursery.

We bind the sockets ourselves, before serving, for three reasons: a bad address fails at
once with NSQ's ``listen (<addr>) failed - <err>``; port 0 yields the real port for the
``TCP: listening on`` / ``HTTP: listening on`` lines and for lookupd's IDENTIFY answer; and
SO_REUSEADDR lets a restarted nsqlookupd take its ports back right after a crash.
nsq_serving then serves HTTP on the pre-bound socket.
"""

from __future__ import annotations

import socket
from functools import partial

import attrs
import trio
from nsq_common import NSQ_VERSION, LookupdInfo
from nsq_serving import ConnectionCounts, ListenError, listen_tcp, serve_http, warm_up

from .http_api import create_app
from .logger import Logger
from .options import Options
from .registry import Clock, RegistrationDB
from .tcp import TCPServer, format_address

BACKLOG = 1024


@attrs.define(eq=False)
class Listeners:
    tcp: socket.socket
    http: socket.socket

    @property
    def tcp_address(self) -> str:
        return format_address(self.tcp.getsockname())

    @property
    def http_address(self) -> str:
        return format_address(self.http.getsockname())

    def close(self) -> None:
        self.tcp.close()
        self.http.close()


@attrs.frozen
class Addresses:
    """Where a running nsqlookupd listens, ``ip:port`` each."""

    tcp: str
    http: str


def bind(address: str) -> socket.socket:
    """A listening TCP socket on ``address`` (port 0: any free port).

    Raises:
        ListenError: ``listen (<address>) failed - listen tcp <addr>: bind: <reason>``.
    """
    return listen_tcp(address, BACKLOG)


def bind_listeners(options: Options) -> Listeners:
    """Both listeners, or ListenError (and nothing left open)."""
    tcp = bind(options.tcp_address)
    try:
        return Listeners(tcp, bind(options.http_address))
    except ListenError:
        tcp.close()
        raise


async def serve(options: Options, *, log: Logger | None = None,
                listeners: Listeners | None = None, clock: Clock | None = None,
                task_status: trio.TaskStatus[Addresses] = trio.TASK_STATUS_IGNORED) -> None:
    """Run nsqlookupd until cancelled; ``task_status.started`` gets the bound addresses.

    Args:
        listeners: pre-bound sockets (taken over and closed at the end); bound from
            ``options`` when None.
        clock: ns since the epoch, for the registry (tests); the wall clock by default.

    Raises:
        ListenError: when binding here fails.
    """
    log = log or Logger(options.log_prefix, options.log_level)
    listeners = listeners or bind_listeners(options)
    addresses = Addresses(listeners.tcp_address, listeners.http_address)
    db = RegistrationDB(inactive_timeout=round(options.inactive_producer_timeout * 1e9),
                        tombstone_lifetime=round(options.tombstone_lifetime * 1e9))
    if clock is not None:
        db.clock = clock
    info = LookupdInfo(broadcast_address=options.broadcast_address,
                       hostname=socket.gethostname(), http_port=listeners.http.getsockname()[1],
                       tcp_port=listeners.tcp.getsockname()[1], version=NSQ_VERSION)
    tcp = TCPServer(db, info, log)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.write_batched)
            listener = trio.SocketListener(trio.socket.from_stdlib_socket(listeners.tcp))
            await nursery.start(tcp.serve, listener)
            log.info(f"TCP: listening on {addresses.tcp}")
            log.stdlib_logger("nsq_serving").setLevel("WARNING")  # its errors in NSQ's format
            http_counts = ConnectionCounts()
            app = create_app(db, log, tcp.counts, http_counts)
            await nursery.start(partial(serve_http, app, [listeners.http],
                                        endpoints=app.state.endpoints, counts=http_counts))
            log.info(f"HTTP: listening on {addresses.http}")
            nursery.start_soon(warm_up, "nsq_serving._metrics", "nsqlookupd.metrics")
            task_status.started(addresses)
    finally:
        log.info(f"TCP: closing {addresses.tcp}")
        log.info(f"HTTP: closing {addresses.http}")
        listeners.close()
