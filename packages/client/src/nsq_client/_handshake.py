"""A connection's opening: ``"  V2"``, IDENTIFY (feature negotiation), TLS / deflate / snappy,
AUTH, and SUB for a consumer.

The handshake reads frame by frame, taking exactly the bytes of each frame from the stream
(``FrameDecoder.missing``), because after the IDENTIFY reply the next bytes may already be TLS
or compressed. Once compressed, sizes on the wire are unknown, so it reads what comes and
keeps what follows its frames for the connection (``leftover``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio
from nsq_common import HEARTBEAT, MAGIC_V2, FrameDecoder, FrameType, WireMessage, commands

from ._compression import Codec, Deflate, Snappy
from ._errors import ConnectError, ServerError
from ._fdstream import READ_SIZE

if TYPE_CHECKING:
    from ._config import Config

_HANDSHAKE_MAX_FRAME = 1 << 20  # IDENTIFY / AUTH replies are a few hundred bytes
_NOP = commands.nop()


class Handshake:
    """The negotiation over ``stream`` for the connection to ``address``; what nsqd answered.

    Attributes:
        stream: the stream to use after it (a ``trio.SSLStream`` once TLS was negotiated).
        codec: the compression negotiated, or None.
        server: nsqd's IDENTIFY reply (JSON), ``{}`` without feature negotiation.
        max_rdy_count: nsqd's limit on RDY (2500 unless it says otherwise).
        auth: nsqd's AUTH reply, when there was one.
    """

    def __init__(self, stream: trio.abc.Stream, config: Config, address: str) -> None:
        self.stream = stream
        self.codec: Codec | None = None
        self.server: dict[str, Any] = {}
        self.max_rdy_count = 2500
        self.auth: dict[str, Any] | None = None
        self._config = config
        self._address = address
        self._decoder: FrameDecoder[WireMessage] = FrameDecoder(_HANDSHAKE_MAX_FRAME)
        self._rbuf = b""  # read ahead of the frames (compressed streams only), decompressed

    def leftover(self) -> bytes:
        """What was read beyond the handshake's frames (decompressed): the connection's."""
        data, self._rbuf = self._rbuf, b""
        return data

    async def negotiate(self, host: str) -> None:
        """IDENTIFY and what it negotiates: TLS (``host`` checks the certificate), compression,
        AUTH.

        Raises:
            ConnectError: an unexpected reply, or nsqd requires AUTH and no ``auth_secret`` is
                configured.
            ServerError: nsqd answered with an error frame.
        """
        config = self._config
        await self.send(MAGIC_V2 + commands.identify(config.identify_body()))
        data = await self.expect_response("IDENTIFY")
        if not data.startswith(b"{"):
            return  # plain OK: nsqd without feature negotiation
        self.server = json.loads(data)
        self.max_rdy_count = int(self.server.get("max_rdy_count", 2500))
        if self.server.get("tls_v1"):
            tls = trio.SSLStream(self.stream, config.ssl_context(), server_hostname=host)
            await tls.do_handshake()
            self.stream = tls
            await self.expect_ok("TLS")
        if self.server.get("deflate"):
            self.codec = Deflate(int(self.server.get("deflate_level", config.deflate_level)))
            await self.expect_ok("deflate")
        if self.server.get("snappy"):
            self.codec = Snappy()
            await self.expect_ok("snappy")
        if self.server.get("auth_required"):
            if not config.auth_secret:
                raise ConnectError(f"{self._address}: Auth Required")
            await self.send(commands.auth(config.auth_secret))
            self.auth = json.loads(await self.expect_response("AUTH"))

    async def send(self, data: bytes) -> None:
        if self.codec is not None:
            data = self.codec.compress(data)
        await self.stream.send_all(data)

    async def expect_ok(self, step: str) -> None:
        data = await self.expect_response(step)
        if data != b"OK":
            raise ConnectError(f"{self._address}: {step}: expected OK, got {data[:100]!r}")

    async def expect_response(self, step: str) -> bytes:
        """The next response (heartbeats answered on the way).

        Raises:
            ServerError: an error frame.
            ConnectError: a message frame.
        """
        while True:
            frame_type, data = await self._read_frame()
            if frame_type == FrameType.RESPONSE and data == HEARTBEAT:
                await self.send(_NOP)
                continue
            if frame_type == FrameType.ERROR:
                raise ServerError.from_frame(data)
            if frame_type != FrameType.RESPONSE:
                raise ConnectError(f"{self._address}: {step}: unexpected frame type {frame_type}")
            return data

    async def _read_frame(self) -> tuple[int, bytes]:
        """Exactly one frame (never reading past it: the stream may change after it)."""
        decoder = self._decoder
        while (frame := decoder.next_event()) is None:
            decoder.receive_data(await self._receive_exactly(decoder.missing()))
        return frame

    async def _receive_exactly(self, n: int) -> bytes:
        while len(self._rbuf) < n:
            # Uncompressed, ask for no more than the frame needs; compressed sizes are unknown,
            # so read what comes and keep the rest for after the handshake.
            codec = self.codec
            more = codec.pending() if codec is not None else b""
            if more:
                self._rbuf += more
                continue
            want = READ_SIZE if codec else n - len(self._rbuf)
            chunk = bytes(await self.stream.receive_some(want))
            if not chunk:
                raise trio.BrokenResourceError("connection closed by nsqd")
            self._rbuf += codec.decompress(chunk) if codec else chunk
        data, self._rbuf = self._rbuf[:n], self._rbuf[n:]
        return data
