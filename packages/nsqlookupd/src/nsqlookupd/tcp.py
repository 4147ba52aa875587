"""The TCP listener: one task per nsqd, speaking protocol V1 (codec in ``nsq_common``).

Each connection has a ``Session``: the codec validates commands, the session applies them
to the registry and says what to answer. The task around it only moves bytes. Rules, as in
nsqlookupd:

- every protocol error is fatal: write it, then close;
- no read or write deadlines (nsqd PINGs every 15 s; a silent nsqd simply turns inactive);
- when a connection ends, for whatever reason, its peer leaves every registration, while
  the registrations themselves stay;
- one connection's failure, even a bug of ours, never reaches the listener or other peers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio
from nsq_common import (
    ConnectionAbort,
    LookupIdentify,
    LookupPing,
    LookupReader,
    LookupRegister,
    LookupSignal,
    ProtocolError,
    encode_lookup_response,
    format_go_duration,
    join_host_port,
)
from nsq_serving import ConnectionCounts

from .logger import Logger
from .registry import CHANNEL, PeerInfo, Registration, RegistrationDB

if TYPE_CHECKING:  # (annotations only)
    from nsq_common import LookupCommand, LookupdInfo

RECEIVE_SIZE = 65536
OK = b"OK"


@attrs.define(eq=False)
class Session:
    """One nsqd connection's state: who it is, once it has IDENTIFYed."""

    remote: str
    db: RegistrationDB
    info: LookupdInfo
    log: Logger
    peer: PeerInfo | None = None

    def apply(self, command: LookupCommand) -> bytes:
        """Carry out one (already validated) command; returns the answer's data."""
        if isinstance(command, LookupPing):
            if self.peer is not None:  # a PING may come before IDENTIFY; it then does nothing
                since = self.db.touch(self.peer)
                self.log.info(f"CLIENT({self.remote}): pinged "
                              f"(last ping {format_go_duration(since / 1e9)})")
            return OK
        if isinstance(command, LookupIdentify):
            return self._identify(command)
        assert self.peer is not None  # the codec refuses REGISTER/UNREGISTER before IDENTIFY
        if isinstance(command, LookupRegister):
            for reg in self.db.register(self.peer, command.topic, command.channel):
                self._log_db("REGISTER", reg)
        else:
            for reg in self.db.unregister(self.peer, command.topic, command.channel):
                if command.channel is None and reg.category == CHANNEL:
                    # nsqd unregisters its channels before the topic; this is unusual
                    self.log.warn(f"client({self.remote}) unexpected UNREGISTER "
                                  f"category:{reg.category} key:{reg.key} subkey:{reg.subkey}")
                else:
                    self._log_db("UNREGISTER", reg)
        return OK

    def close(self) -> None:
        """The connection ended: the peer leaves every registration."""
        if self.peer is not None:
            for reg in self.db.remove_peer(self.peer):
                self._log_db("UNREGISTER", reg)

    def _identify(self, command: LookupIdentify) -> bytes:
        self.log.info(
            f"CLIENT({self.remote}): IDENTIFY Address:{command.broadcast_address} "
            f"TCP:{command.tcp_port} HTTP:{command.http_port} Version:{command.version}")
        self.peer = PeerInfo(
            id=self.remote, remote_address=self.remote, hostname=command.hostname,
            broadcast_address=command.broadcast_address, tcp_port=command.tcp_port,
            http_port=command.http_port, version=command.version)
        if self.db.identify(self.peer):
            self._log_db("REGISTER", Registration("client", "", ""))
        return self.info.encode()

    def _log_db(self, action: str, reg: Registration) -> None:
        self.log.info(f"DB: client({self.remote}) {action} "
                      f"category:{reg.category} key:{reg.key} subkey:{reg.subkey}")


@attrs.define(eq=False)
class TCPServer:
    db: RegistrationDB
    info: LookupdInfo
    log: Logger
    counts: ConnectionCounts = attrs.field(factory=ConnectionCounts)  # for /metrics

    async def serve(self, listener: trio.SocketListener,
                    *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept connections until cancelled, one task each."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            await trio.serve_listeners(self._accepted, [listener], handler_nursery=nursery)

    async def _accepted(self, stream: trio.SocketStream) -> None:
        try:
            remote = format_address(stream.socket.getpeername())
        except OSError:  # already gone
            await trio.aclose_forcefully(stream)
            return
        await self.handle(stream, remote)

    async def handle(self, stream: trio.abc.Stream, remote: str) -> None:
        """Serve one connection until it closes or fails; never raises (but Cancelled)."""
        self.log.info(f"TCP: new client({remote})")
        session = Session(remote, self.db, self.info, self.log)
        self.counts.accepted += 1
        self.counts.open += 1
        try:
            await self._pump(stream, session)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self.log.error(f"client({remote}) - {exc or type(exc).__name__}")
        except Exception as exc:  # a bug of ours: drop this connection, keep the server
            self.log.error(f"client({remote}) - internal error {exc!r}")
        finally:
            self.log.info(f"PROTOCOL(V1): [{remote}] exiting ioloop")
            try:
                session.close()
            except Exception as exc:  # same as above: never let one peer stop the listener
                self.log.error(f"client({remote}) - internal error on close {exc!r}")
            self.counts.open -= 1
            await trio.aclose_forcefully(stream)

    async def _pump(self, stream: trio.abc.Stream, session: Session) -> None:
        reader = LookupReader()
        magic_seen = False
        while True:
            try:
                event = reader.next_event()
            except ProtocolError as exc:
                self.log.error(f"[{session.remote}] - {exc.code} {exc.description}")
                await stream.send_all(encode_lookup_response(exc.text))
                return
            except ConnectionAbort as exc:
                self.log.error(f"[{session.remote}] - {exc}")
                return
            if not magic_seen and reader.magic is not None:
                magic_seen = True
                self.log.info(f"CLIENT({session.remote}): desired protocol magic '  V1'")
            if event is LookupSignal.NEED_DATA:
                # a socket gives bytes, which bytes() returns as they are (a Stream may give a bytearray)
                reader.receive_data(bytes(await stream.receive_some(RECEIVE_SIZE)))
            elif event is LookupSignal.CLOSED:
                return
            else:
                await stream.send_all(encode_lookup_response(session.apply(event)))


def format_address(sockaddr: tuple[object, ...] | str) -> str:
    """``ip:port``, with brackets for IPv6, as Go prints a TCP address."""
    if isinstance(sockaddr, str):
        return sockaddr
    return join_host_port(str(sockaddr[0]), str(sockaddr[1]))
