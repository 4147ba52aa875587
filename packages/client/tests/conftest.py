"""A scripted nsqd over Trio memory streams, for testing the client without processes.

``fake_cluster`` gives a ``FakeCluster``: its ``connector`` is passed to ``Producer`` /
``Consumer``; every address dialled gets a ``FakeNsqd`` (or a refused connection while that
address is ``down``). Each fake parses the client's commands with ``nsq_common``'s
``CommandReader``, records them, and answers as nsqd does (IDENTIFY JSON, OK, CLOSE_WAIT),
with hooks to send messages and heartbeats, refuse publishes, negotiate deflate, snappy, TLS
or AUTH, and drop connections.
"""

from __future__ import annotations

import json
import ssl
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import trio.testing
from nsq_common import (
    HEARTBEAT,
    MAGIC_V2,
    BodySpec,
    CommandReader,
    encode_error,
    encode_message_frame,
    encode_response,
)

_BODY = BodySpec(1 << 24, "E_BAD_BODY", "invalid body size %d", "body too big %d > %d")
_WITH_BODY = {b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB"}


class FakeConn:
    """The server side of one client connection."""

    def __init__(self, server: FakeNsqd, stream: trio.abc.Stream) -> None:
        self.server = server
        self.stream: trio.abc.Stream = stream
        self.commands: list[tuple[bytes, list[bytes], bytes | None]] = []
        self.closed = False
        self.identify: dict[str, Any] = {}
        self.out_codec: Any = None
        self.in_codec: Any = None
        self._scope: trio.CancelScope | None = None
        # Publishes to answer later (when the server holds its answers).
        self.held: list[bytes] = []

    # -- what tests look at ------------------------------------------------------------------
    def names(self) -> list[bytes]:
        return [c[0] for c in self.commands]

    def rdys(self) -> list[int]:
        return [int(c[1][0]) for c in self.commands if c[0] == b"RDY"]

    @property
    def rdy(self) -> int:
        values = self.rdys()
        return values[-1] if values else 0

    # -- what tests do -----------------------------------------------------------------------
    async def send(self, data: bytes) -> None:
        if self.out_codec is not None:
            data = self.out_codec(data)
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True

    async def send_message(self, msg_id: bytes, body: bytes, attempts: int = 1,
                           timestamp: int = 1_700_000_000_000_000_000) -> None:
        await self.send(encode_message_frame(timestamp, attempts, msg_id, body))

    async def heartbeat(self) -> None:
        await self.send(encode_response(HEARTBEAT))

    async def close(self) -> None:
        self.closed = True
        await trio.aclose_forcefully(self.stream)
        if self._scope is not None:
            self._scope.cancel()

    # -- serving ---------------------------------------------------------------------------------
    async def serve(self) -> None:
        reader = CommandReader(lambda name, params: _BODY if name in _WITH_BODY else None)
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                magic = b""
                while len(magic) < 4:
                    chunk = await self.stream.receive_some(4 - len(magic))
                    if not chunk:
                        return
                    magic += chunk
                assert magic == MAGIC_V2
                while True:
                    data = await self.stream.receive_some(65536)
                    if not data:
                        break
                    if self.in_codec is not None:
                        data = self.in_codec(data)
                    reader.receive_data(data)
                    while (cmd := reader.next_event()) is not None:
                        self.commands.append((cmd.name, cmd.params, cmd.body))
                        self.server.changed()
                        await self.handle(cmd.name, cmd.params, cmd.body)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(self.stream)
        self.closed = True
        self.server.changed()

    async def handle(self, name: bytes, params: list[bytes], body: bytes | None) -> None:
        server = self.server
        if name == b"IDENTIFY":
            assert body is not None
            await self._identify(json.loads(body))
        elif name == b"AUTH":
            if body != server.auth_secret:
                await self.send(encode_error(b"E_AUTH_FAILED AUTH failed"))
                await self.close()
                return
            await self.send(encode_response(b'{"identity":"me","identity_url":"","permission_count":1}'))
        elif name == b"SUB":
            if server.sub_error:
                await self.send(encode_error(server.sub_error))
                await self.close()
                return
            await self.send(encode_response(b"OK"))
        elif name in (b"PUB", b"MPUB", b"DPUB"):
            server.published.append((name, params, body))
            error = server.pub_error(name, params, body) if server.pub_error else None
            if error is not None:
                await self.send(encode_error(error))
                if not error.startswith((b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED")):
                    await self.close()
                return
            if server.hold_responses:
                self.held.append(b"OK")
                return
            await self.send(encode_response(b"OK"))
        elif name == b"CLS":
            await self.send(encode_response(b"CLOSE_WAIT"))

    async def release(self) -> None:
        """Send every held OK."""
        held, self.held = self.held, []
        for data in held:
            await self.send(encode_response(data))

    async def _identify(self, request: dict[str, Any]) -> None:
        server = self.server
        self.identify = request
        if not server.feature_negotiation:
            await self.send(encode_response(b"OK"))
            return
        tls = bool(request.get("tls_v1")) and server.tls_context is not None
        deflate = bool(request.get("deflate")) and server.deflate
        snappy = bool(request.get("snappy")) and server.snappy
        reply = {"max_rdy_count": server.max_rdy_count, "version": "1.3.0",
                 "max_msg_timeout": 900000, "msg_timeout": 60000, "tls_v1": tls,
                 "deflate": deflate, "deflate_level": 6, "max_deflate_level": 6,
                 "snappy": snappy, "sample_rate": 0, "auth_required": server.auth_secret is not None,
                 "output_buffer_size": 16384, "output_buffer_timeout": 250}
        await self.send(encode_response(json.dumps(reply).encode()))
        if tls:
            assert server.tls_context is not None
            tls_stream = trio.SSLStream(self.stream, server.tls_context, server_side=True)
            await tls_stream.do_handshake()
            self.stream = tls_stream
            await self.send(encode_response(b"OK"))
        if deflate:
            out = zlib.compressobj(6, zlib.DEFLATED, -15)
            inflate = zlib.decompressobj(-15)
            self.out_codec = lambda d: out.compress(d) + out.flush(zlib.Z_SYNC_FLUSH)
            self.in_codec = inflate.decompress
            await self.send(encode_response(b"OK"))
        if snappy:
            import snappy as snappy_mod

            out_s, in_s = snappy_mod.StreamCompressor(), snappy_mod.StreamDecompressor()
            self.out_codec = out_s.add_chunk
            self.in_codec = in_s.decompress
            await self.send(encode_response(b"OK"))


class FakeNsqd:
    """One fake nsqd: its connections (newest last) and what was published to it."""

    def __init__(self, cluster: FakeCluster, address: str) -> None:
        self.cluster = cluster
        self.address = address
        self.conns: list[FakeConn] = []
        self.published: list[tuple[bytes, list[bytes], bytes | None]] = []
        self.down = False
        self.feature_negotiation = True
        self.max_rdy_count = 2500
        self.deflate = False
        self.snappy = False
        self.tls_context: ssl.SSLContext | None = None
        self.auth_secret: bytes | None = None
        self.sub_error: bytes | None = None
        self.hold_responses = False
        # (name, params, body) -> error frame text, or None to answer OK
        self.pub_error: Callable[[bytes, list[bytes], bytes | None], bytes | None] | None = None

    @property
    def conn(self) -> FakeConn:
        """The newest connection."""
        return self.conns[-1]

    def live(self) -> list[FakeConn]:
        return [c for c in self.conns if not c.closed]

    def changed(self) -> None:
        self.cluster.changed()


class FakeCluster:
    """Fake nsqds by address. With ``tcp``, each connection is a real loopback TCP connection
    (the client then takes its plain-socket path); otherwise a pair of memory streams."""

    def __init__(self, nursery: trio.Nursery, tcp: bool = False) -> None:
        self.nursery = nursery
        self.nsqds: dict[str, FakeNsqd] = {}
        self._changed = trio.Event()
        self.tcp = tcp
        self._listener: trio.SocketListener | None = None

    def __getitem__(self, address: str) -> FakeNsqd:
        if address not in self.nsqds:
            self.nsqds[address] = FakeNsqd(self, address)
        return self.nsqds[address]

    def changed(self) -> None:
        self._changed.set()

    async def connector(self, host: str, port: int) -> trio.abc.Stream:
        nsqd = self[f"{host}:{port}"]
        if nsqd.down:
            raise OSError(111, "Connection refused")
        if self.tcp:
            client, server = await self._tcp_pair()
        else:
            client, server = trio.testing.memory_stream_pair()
        conn = FakeConn(nsqd, server)
        nsqd.conns.append(conn)
        self.nursery.start_soon(conn.serve)
        self.changed()
        return client

    async def _tcp_pair(self) -> tuple[trio.abc.Stream, trio.abc.Stream]:
        if self._listener is None:
            self._listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
        port = self._listener.socket.getsockname()[1]
        client = await trio.open_tcp_stream("127.0.0.1", port)
        return client, await self._listener.accept()

    async def aclose(self) -> None:
        if self._listener is not None:
            await self._listener.aclose()

    async def wait_for(self, predicate: Callable[[], bool], within: float = 30.0) -> None:
        """Until ``predicate()`` holds (checked after every command or connection); ``within``
        is generous, for a slow, busy machine (virtual seconds under ``autojump_clock``)."""
        with trio.fail_after(within):
            while not predicate():
                self._changed = trio.Event()
                with trio.move_on_after(0.05):
                    await self._changed.wait()


@pytest.fixture
async def fake_cluster(nursery: trio.Nursery) -> FakeCluster:
    return FakeCluster(nursery)


@pytest.fixture
async def tcp_cluster(nursery: trio.Nursery) -> AsyncIterator[FakeCluster]:
    """A ``FakeCluster`` whose connections are real loopback TCP sockets."""
    cluster = FakeCluster(nursery, tcp=True)
    yield cluster
    await cluster.aclose()
