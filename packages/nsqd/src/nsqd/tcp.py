"""The TCP edge: accept connections, check the magic, and pump bytes in and out.

Each connection runs two tasks, never more: the reader (receive, parse, handle every whole
command in the chunk, then receive again) and the writer (send whatever the client's output
buffer holds when it is due, plus heartbeats). Fatal protocol errors are written, then the
connection closes; non-fatal ones (E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED) leave it open.

Deadlines follow nsqd: no bytes from the client for two heartbeat intervals closes it; a send
that cannot finish within one heartbeat interval (a client that stopped reading) closes it.
"""

from __future__ import annotations

import logging
import math
import os

import trio
from nsq_common import (
    HEARTBEAT_FRAME,
    MAGIC_V2,
    OK_FRAME,
    CommandReader,
    ConnectionAbort,
    ProtocolError,
    encode_error,
    join_host_port,
)

from .broker import Broker
from .client import Client
from .protocol import ProtocolV2, Upgrades
from .state import ANSWER_STATES
from .streams import CorruptStream, DeflateStream, PrefixedStream, SnappyStream

log = logging.getLogger("nsqd")

READ_SIZE = 262144
BATCHED = (b"PUB", b"MPUB")
MAGIC_TIMEOUT = 60.0  # nsqd's client timeout
#: a follower's fetch connection (docs/design/replication.md): served only with --etcd-endpoints
REPLICATION_MAGIC = b"  R1"
# A client that does not read its responses (a publisher pipelining without looking back)
# stops being read once this much output is waiting.
OUTPUT_HIGH_WATER = 4 * 1024 * 1024


def _address(stream: trio.abc.Stream) -> str:
    """The peer's ``host:port`` (of a socket stream; other streams, as tests', are unknown)."""
    if not isinstance(stream, trio.SocketStream):
        return "unknown:0"
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "unknown:0"
    return join_host_port(host, port)


class Connection:
    def __init__(self, broker: Broker, stream: trio.abc.Stream, client: Client) -> None:
        self.broker = broker
        self.stream: trio.abc.Stream = stream
        # Held around every send, so an upgrade can swap ``stream`` between two sends.
        self._send_lock = trio.Lock()
        self.client = client
        self.protocol = ProtocolV2(broker, client)
        self.reader = CommandReader(self.protocol.header)
        self._wake_event = trio.Event()
        self._drained = trio.Event()
        self._closing = False
        self._writer_done = trio.Event()
        self._scope: trio.CancelScope | None = None
        # A plain TCP socket (until an upgrade puts TLS, snappy or deflate over it) is read
        # and written through Trio's socket and the file descriptor directly: SocketStream's
        # conflict detector, memoryview loop and a lock and cancel scope per answer were a
        # good part of a publisher's round trip.
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        client.attach(self._wake, self._disconnect)

    def _wake(self) -> None:
        self._wake_event.set()

    def _disconnect(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def run(self, initial: bytes) -> None:
        async with trio.open_nursery() as nursery:
            self._scope = nursery.cancel_scope
            nursery.start_soon(self._write_loop)
            try:
                await self._read_loop(initial)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                log.debug("client %s: connection broken: %r", self.client.remote_address, exc)
            except (CorruptStream, trio.TooSlowError) as exc:
                log.info("client %s: %s, closing", self.client.remote_address,
                         exc or "TLS handshake timed out")
            # Let the writer send what is pending (say, a fatal error frame), then stop.
            self._closing = True
            self._wake()
            with trio.move_on_after(1.0):
                await self._writer_done.wait()
            nursery.cancel_scope.cancel()

    async def _read_loop(self, data: bytes | bytearray) -> None:
        client = self.client
        output = client.output
        reader = self.reader
        proto = self.protocol
        sync_handlers = proto.sync_handlers
        while True:
            if data:
                reader.receive_data(data)
                while True:
                    try:
                        if client.state in ANSWER_STATES and proto.fins_in_bulk:
                            fins = reader.next_fins()
                            if fins:
                                if proto.batch_pending:
                                    await proto.flush_batch()
                                for error in proto.fin_many(fins):
                                    log.debug("client %s: %s", client.remote_address, error)
                                    client.send_frame(encode_error(error.text))
                                continue
                        cmd = reader.next_event()
                        if (cmd is not None and cmd.name in BATCHED
                                and proto.authorized_now(cmd.name, cmd.params[0], b"")):
                            if not proto.batchable(cmd):  # another topic: store the batch first
                                await proto.flush_batch()
                            proto.batch(cmd)
                            continue
                        if proto.batch_pending:
                            await proto.flush_batch()
                        if cmd is None:
                            break
                        handler = sync_handlers.get(cmd.name)
                        if handler is not None:
                            handler(cmd.params)
                        elif proto.is_async(cmd.name):
                            await proto.handle_async(cmd)
                            upgrades = proto.take_upgrades()
                            if upgrades is not None:
                                await self._upgrade(upgrades)
                        else:
                            proto.handle_sync(cmd)
                    except ProtocolError as raised:
                        error = raised
                        try:  # what was published before the bad command is answered first
                            await proto.flush_batch()
                        except ProtocolError as earlier:
                            error = earlier
                        log.debug("client %s: %s", client.remote_address, error)
                        client.send_frame(encode_error(error.text))
                        if error.fatal:
                            return
                    except ConnectionAbort as exc:
                        log.info("client %s: %s, closing", client.remote_address, exc)
                        return
                if output.urgent and not self._send_lock.locked():
                    # Answers to this chunk's commands go out now, from here: waking the
                    # writer task for them would add a task switch to every round trip of
                    # a request/response client (a publisher waiting for each OK).
                    if self._socket is not None:
                        await self._send_now()
                    else:
                        await self._send()
                elif output.out_bytes > OUTPUT_HIGH_WATER:
                    self._drained = trio.Event()
                    self._wake()
                    await self._drained.wait()
            hb = client.heartbeat_interval
            timeout = 2 * hb if hb > 0 else math.inf
            with trio.move_on_after(timeout) as scope:
                data = await (self._receive() if self._socket is not None
                              else self.stream.receive_some(READ_SIZE))
            if scope.cancelled_caught:
                log.info("client %s: no data for %.1fs, closing", client.remote_address, timeout)
                return
            if not data:
                return

    async def _write_loop(self) -> None:
        client = self.client
        output = client.output
        now = self.broker.now  # Trio's clock: the deadlines below are given to move_on_at
        hb_interval = client.heartbeat_interval
        next_hb = now() + hb_interval if hb_interval > 0 else math.inf
        try:
            while True:
                t = now()
                if client.heartbeat_interval != hb_interval:  # IDENTIFY changed it
                    hb_interval = client.heartbeat_interval
                    next_hb = t + hb_interval if hb_interval > 0 else math.inf
                if t >= next_hb:
                    client.send_frame(HEARTBEAT_FRAME)
                    next_hb = t + hb_interval
                if output.out and (output.urgent or self._closing or t >= output.flush_at):
                    if not await self._send():
                        return
                    if output.out_bytes <= OUTPUT_HIGH_WATER:
                        self._drained.set()
                    continue
                if self._closing:
                    return
                deadline = next_hb
                if output.out:
                    deadline = min(deadline, output.flush_at)
                self._wake_event = trio.Event()
                with trio.move_on_at(deadline):
                    await self._wake_event.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._disconnect()
        finally:
            self._drained.set()
            self._writer_done.set()


    async def _receive(self) -> bytes:
        assert self._socket is not None
        try:
            return await self._socket.recv(READ_SIZE)
        except OSError as exc:
            raise trio.BrokenResourceError(exc) from exc

    async def _send_now(self) -> None:
        """Write the output at once on the socket (an answer almost always fits its buffer:
        no trip through Trio's scheduler, the next receive is the checkpoint); what does not
        fit is sent as ``_send`` does, within the write deadline."""
        assert self._socket is not None
        data = self.client.output.take()
        if not data:
            return
        try:
            sent = os.write(self._socket.fileno(), data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise trio.BrokenResourceError(exc) from exc
        if sent < len(data):
            hb = self.client.heartbeat_interval
            with trio.move_on_after(hb if hb > 0 else math.inf) as scope:
                async with self._send_lock:
                    await self.stream.send_all(memoryview(data)[sent:])
            if scope.cancelled_caught:
                log.info("client %s: write timed out, closing", self.client.remote_address)
                self._disconnect()

    async def _send(self) -> bool:
        """Send what the output buffer holds once the send lock is ours (an upgrade may have
        sent it meanwhile), within nsqd's write deadline of one heartbeat interval; a client
        that does not read in time is disconnected. Returns False then."""
        hb = self.client.heartbeat_interval
        with trio.move_on_after(hb if hb > 0 else math.inf) as scope:
            async with self._send_lock:
                data = self.client.output.take()
                if data:
                    await self.stream.send_all(data)
        if scope.cancelled_caught:
            log.info("client %s: write timed out, closing", self.client.remote_address)
            self._disconnect()
            return False
        return True

    async def _upgrade(self, up: Upgrades) -> None:
        """Switch layers after IDENTIFY as nsqd does: the reply in the clear, then TLS, then
        snappy or deflate, each confirmed with an OK through the new layer."""
        client = self.client
        async with self._send_lock:
            pending = client.output.take()  # the IDENTIFY reply
            if pending:
                await self.stream.send_all(pending)
            if not (up.tls or up.snappy or up.deflate):
                return  # the same stream: what the client sent meanwhile is read as it is
            stream: trio.abc.Stream = self.stream
            ahead = self.reader.take_buffered()
            if ahead:
                stream = PrefixedStream(stream, ahead)
            if up.tls:
                assert self.broker.tls_context is not None
                tls = trio.SSLStream(stream, self.broker.tls_context, server_side=True)
                with trio.fail_after(5):
                    await tls.do_handshake()
                stream = tls
                client.tls_established((tls.version() or "").replace("TLSv", "TLS"),
                                       (tls.cipher() or ("",))[0],
                                       _common_name(tls.getpeercert()))
                await stream.send_all(OK_FRAME)
            if up.snappy:
                stream = SnappyStream(stream)
                client.compressed(snappy=True)
                await stream.send_all(OK_FRAME)
            if up.deflate:
                stream = DeflateStream(stream, up.deflate_level)
                client.compressed(deflate=True)
                await stream.send_all(OK_FRAME)
            self.stream = stream
            self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None


def _common_name(cert: object) -> str:
    """The subject's commonName of a peer certificate (``SSLObject.getpeercert()``)."""
    if not isinstance(cert, dict):
        return ""
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


async def handle_stream(broker: Broker, stream: trio.abc.Stream, remote: str | None = None
                        ) -> None:
    """Serve one connection from accept to close.

    Any ``trio.abc.Stream`` will do (tests use memory streams); ``remote`` is the peer's
    ``host:port``, read from the socket when not given. A bug (any exception that is not
    the stream breaking) is logged at ERROR with its traceback and closes this connection
    only.
    """
    if remote is None:
        remote = _address(stream)
    try:
        magic = b""
        with trio.move_on_after(MAGIC_TIMEOUT):
            while len(magic) < 4:
                chunk = await stream.receive_some(READ_SIZE)
                if not chunk:
                    return
                magic += chunk
        if len(magic) < 4:
            return
        if magic[:4] != MAGIC_V2:
            replication = broker.replication_server  # (set only with --etcd-endpoints)
            if replication is not None and magic[:4] == REPLICATION_MAGIC:
                await replication(stream, magic[4:], remote)
                return
            log.info("client %s: bad protocol magic %r", remote, magic[:4])
            await stream.send_all(encode_error(b"E_BAD_PROTOCOL"))
            return
        client = broker.new_client(remote)
        log.info("TCP: new client(%s)", remote)
        try:
            await Connection(broker, stream, client).run(magic[4:])
        finally:
            broker.remove_client(client)
            log.info("client %s: closed", remote)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except Exception:
        log.exception("client %s: unexpected error, closing this connection", remote)
    finally:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await stream.aclose()


async def serve_tcp(broker: Broker, listeners: list[trio.SocketListener], *,
                    task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve protocol V2 on ``listeners``; ``task_status.started()`` once they accept."""
    async def handler(stream: trio.SocketStream) -> None:
        await handle_stream(broker, stream)

    await trio.serve_listeners(handler, listeners, task_status=task_status)
