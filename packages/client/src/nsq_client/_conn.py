"""One connection to an nsqd: the Trio edge of the client.

Life of a connection::

    connect()    dial, "  V2", IDENTIFY (feature negotiation), TLS / deflate / snappy, AUTH
    subscribe()  SUB topic channel, expect OK                     (consumers only)
    run()        a reader task and a writer task until the connection ends
    close()      flush what is queued, then close; abort() closes at once

The handshake reads frame by frame, taking exactly the bytes of each frame from the stream,
because after the IDENTIFY reply the next bytes may already be TLS or compressed. After it,
two tasks run and no task is ever started per message:

* the **reader** receives up to 64 KiB, parses every whole frame in it (``FrameDecoder``),
  answers heartbeats with NOP, and hands the chunk's messages to the handler as one list;
* the **writer** sends whatever ``write()`` queued since its last send, in one ``send_all``:
  a burst of FINs from a batch, or of pipelined PUBs, leaves as one write.

Deadlines are go-nsq's: ``read_timeout`` without a byte (nsqd heartbeats every 30 s) or a send
that cannot finish within ``write_timeout`` ends the connection. What happens on frames,
answers and close is the handler's business (``ConnHandler``): the producer matches responses
to requests, the consumer feeds its queue and its RDY and backoff state.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio
from nsq_common import (
    FRAME_HEADER,
    HEARTBEAT,
    MAGIC_V2,
    MESSAGE_HEADER,
    MESSAGE_HEADER_SIZE,
    FrameDecoder,
    FrameTooBig,
    FrameType,
    commands,
)

from ._backoff import Signal
from ._compression import Codec, Deflate, Snappy
from ._errors import ConnectError, ServerError
from ._message import Message

if TYPE_CHECKING:
    from ._config import Config

log = logging.getLogger("nsq_client")

READ_SIZE = 65536
_FRAME_MESSAGE = int(FrameType.MESSAGE)
_FRAME_RESPONSE = int(FrameType.RESPONSE)
_FRAME_ERROR = int(FrameType.ERROR)
_NOP = commands.nop()
_HANDSHAKE_MAX_FRAME = 1 << 20  # IDENTIFY / AUTH replies are a few hundred bytes
# Where the id and the body start in a message frame's payload: after the timestamp and
# attempts (MESSAGE_HEADER), and after the 16-byte id (MESSAGE_HEADER_SIZE).
_ID_START = MESSAGE_HEADER.size
_BODY_START = MESSAGE_HEADER_SIZE

Connector = Callable[[str, int], Awaitable[trio.abc.Stream]]


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> ``(host, port)``.

    Raises:
        ValueError: no port, or not a number.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


async def open_tcp(host: str, port: int) -> trio.abc.Stream:
    return await trio.open_tcp_stream(host, port)


class ConnHandler(Protocol):
    """What a connection reports to its owner (all called from the reader task)."""

    def on_messages(self, conn: Connection, messages: list[Message]) -> None: ...

    def on_response(self, conn: Connection, data: bytes) -> None: ...

    def on_error(self, conn: Connection, error: ServerError) -> None: ...

    def on_answered(self, conn: Connection, signal: Signal) -> None: ...

    def on_close(self, conn: Connection) -> None: ...


def _timeout(seconds: float) -> float:
    return seconds if seconds > 0 else math.inf


class Connection:
    """A connection to one nsqd.

    Args:
        address: ``host:port`` of nsqd's TCP listener.
        config: the owner's options.
        handler: receives frames and the close (see ``ConnHandler``).
        connector: opens the byte stream (default: TCP); tests pass memory streams.
    """

    def __init__(self, address: str, config: Config, handler: ConnHandler,
                 connector: Connector | None = None) -> None:
        self.address = address
        self.config = config
        self._handler = handler
        self._connector = connector or open_tcp
        self._stream: trio.abc.Stream | None = None
        self._codec: Codec | None = None
        self._rbuf = b""  # handshake read-ahead, already decompressed
        self._wbuf = bytearray()
        self._wake = trio.Event()
        self._writer_idle = False  # the writer waits on _wake: the next write must set it
        self._sending = False  # a send_all is in progress (writer task or write_now)
        self._send_started = 0.0
        self._last_read = 0.0
        self._write_timeout = _timeout(config.write_timeout)
        self._scope: trio.CancelScope | None = None
        self._close_requested = False
        self.closed = False
        self._closed_event = trio.Event()
        self.error: BaseException | None = None
        # Settings nsqd answered to IDENTIFY (the JSON reply), {} without negotiation.
        self.server: dict[str, Any] = {}
        self.max_rdy_count = 2500
        self.auth: dict[str, Any] | None = None
        # Messages delivered on this connection and not yet answered (FIN or REQ).
        self.in_flight = 0
        # Of those, how many wait in the consumer's queue, not yet handed out.
        self.queued = 0
        # Set after CLS: the connection closes once in_flight drops to zero.
        self.closing = False
        self._max_requeue_ms = int(config.max_requeue_delay * 1000)
        self._default_requeue_ms = int(config.default_requeue_delay * 1000)

    def __repr__(self) -> str:
        return f"<Connection {self.address}>"

    # -- handshake -----------------------------------------------------------------------------
    async def connect(self) -> None:
        """Dial and negotiate.

        Raises:
            ConnectError: dial failure, an error frame, a bad reply, or nsqd requires AUTH and
                no ``auth_secret`` is configured. The cause is chained.
        """
        config = self.config
        host, port = split_address(self.address)
        try:
            with trio.fail_after(_timeout(config.dial_timeout)):
                self._stream = await self._connector(host, port)
            with trio.fail_after(_timeout(config.read_timeout)):
                await self._handshake(host)
        except ConnectError:
            await self._abort_stream()
            raise
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                ServerError, FrameTooBig, ValueError) as exc:
            await self._abort_stream()
            raise ConnectError(f"{self.address}: {_describe(exc)}") from exc

    async def _handshake(self, host: str) -> None:
        config = self.config
        await self._send(MAGIC_V2 + commands.identify(config.identify_body()))
        data = await self._expect_response("IDENTIFY")
        if not data.startswith(b"{"):
            return  # plain OK: nsqd without feature negotiation
        self.server = json.loads(data)
        self.max_rdy_count = int(self.server.get("max_rdy_count", 2500))
        if self.server.get("tls_v1"):
            assert self._stream is not None
            tls = trio.SSLStream(self._stream, config.ssl_context(), server_hostname=host)
            await tls.do_handshake()
            self._stream = tls
            await self._expect_ok("TLS")
        if self.server.get("deflate"):
            self._codec = Deflate(int(self.server.get("deflate_level", config.deflate_level)))
            await self._expect_ok("deflate")
        if self.server.get("snappy"):
            self._codec = Snappy()
            await self._expect_ok("snappy")
        if self.server.get("auth_required"):
            if not config.auth_secret:
                raise ConnectError(f"{self.address}: Auth Required")
            await self._send(commands.auth(config.auth_secret))
            reply = await self._expect_response("AUTH")
            self.auth = json.loads(reply)

    async def subscribe(self, topic: str, channel: str) -> None:
        """SUB and wait for its OK.

        Raises:
            ConnectError: nsqd refused (the ``ServerError`` with its code is the cause) or the
                connection failed.
        """
        try:
            with trio.fail_after(_timeout(self.config.read_timeout)):
                await self._send(commands.sub(topic, channel))
                await self._expect_ok("SUB")
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                ServerError, FrameTooBig) as exc:
            await self._abort_stream()
            raise ConnectError(f"{self.address}: SUB {topic} {channel}: {_describe(exc)}") from exc

    async def _expect_ok(self, step: str) -> None:
        data = await self._expect_response(step)
        if data != b"OK":
            raise ConnectError(f"{self.address}: {step}: expected OK, got {data[:100]!r}")

    async def _expect_response(self, step: str) -> bytes:
        while True:
            frame_type, data = await self._read_frame()
            if frame_type == _FRAME_RESPONSE and data == HEARTBEAT:
                await self._send(_NOP)
                continue
            if frame_type == _FRAME_ERROR:
                raise ServerError.from_frame(data)
            if frame_type != _FRAME_RESPONSE:
                raise ConnectError(f"{self.address}: {step}: unexpected frame type {frame_type}")
            return data

    async def _read_frame(self) -> tuple[int, bytes]:
        """Exactly one frame (never reading past it: the stream may change after it)."""
        header = await self._receive_exactly(FRAME_HEADER.size)
        size, _ = FRAME_HEADER.unpack(header)
        if size < 4 or size > _HANDSHAKE_MAX_FRAME:
            raise FrameTooBig(f"frame size {size} out of range")
        decoder = FrameDecoder()
        decoder.feed(header + await self._receive_exactly(size - 4))
        frame = decoder.next_frame()
        assert frame is not None
        return frame

    async def _receive_exactly(self, n: int) -> bytes:
        assert self._stream is not None
        while len(self._rbuf) < n:
            # Uncompressed, ask for no more than the frame needs; compressed sizes are unknown,
            # so read what comes and keep the rest for after the handshake.
            want = READ_SIZE if self._codec else n - len(self._rbuf)
            chunk = await self._stream.receive_some(want)
            if not chunk:
                raise trio.BrokenResourceError("connection closed by nsqd")
            self._rbuf += self._codec.decompress(chunk) if self._codec else chunk
        data, self._rbuf = self._rbuf[:n], self._rbuf[n:]
        return data

    async def _send(self, data: bytes) -> None:
        assert self._stream is not None
        if self._codec is not None:
            data = self._codec.compress(data)
        await self._stream.send_all(data)

    # -- running ---------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read and write until the connection ends; then tell the handler (``on_close``)."""
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._watchdog)
                task_status.started()
                try:
                    await self._read_loop()
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                        FrameTooBig, ServerError, ValueError) as exc:
                    self._fail(exc)
                nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            await self._abort_stream()
            self._closed_event.set()
            self._handler.on_close(self)

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    async def _read_loop(self) -> None:
        assert self._stream is not None
        receive = self._stream.receive_some
        handler = self._handler
        decoder = FrameDecoder(self.config.max_msg_size + 30 if self.config.max_msg_size else 0)
        if self._rbuf:
            decoder.feed(self._rbuf)
            self._rbuf = b""
        unpack = MESSAGE_HEADER.unpack_from
        now = trio.current_time
        codec = self._codec
        data = b""
        while True:
            frames = decoder.frames()
            if frames:
                messages: list[Message] = []
                for frame_type, payload in frames:
                    if frame_type == _FRAME_MESSAGE:
                        # Parsed here rather than with nsq_common.decode_message, which builds
                        # a frozen attrs object: three times the cost, per message.
                        if len(payload) < _BODY_START:
                            raise ValueError(f"message frame of {len(payload)} bytes")
                        timestamp, attempts = unpack(payload)
                        messages.append(Message(payload[_ID_START:_BODY_START],
                                                payload[_BODY_START:], timestamp, attempts, self))
                    elif frame_type == _FRAME_RESPONSE:
                        if payload == HEARTBEAT:
                            self.write(_NOP)
                        else:
                            handler.on_response(self, payload)
                    elif frame_type == _FRAME_ERROR:
                        handler.on_error(self, ServerError.from_frame(payload))
                    else:
                        raise ValueError(f"unknown frame type {frame_type}")
                if messages:
                    self.in_flight += len(messages)
                    handler.on_messages(self, messages)
            data = await receive(READ_SIZE)
            self._last_read = now()
            if not data:
                if self.closing or self._close_requested:
                    return
                raise trio.BrokenResourceError("connection closed by nsqd")
            decoder.feed(codec.decompress(data) if codec is not None else data)

    async def _watchdog(self) -> None:
        """go-nsq's deadlines, without a cancel scope per read and per write (they cost more
        than the I/O on a busy connection): a few times per timeout, look how long the last
        read and the current send have been waiting."""
        read_timeout = _timeout(self.config.read_timeout)
        write_timeout = self._write_timeout
        tick = min(read_timeout, write_timeout) / 4
        self._last_read = trio.current_time()
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            if now - self._last_read > read_timeout:
                self._fail(trio.TooSlowError(f"no data for {read_timeout:g}s"))
            elif self._sending and now - self._send_started > write_timeout:
                self._fail(trio.TooSlowError(f"write timed out after {write_timeout:g}s"))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
            log.warning("(%s) connection error - %s", self.address, _describe(exc))
        if self._scope is not None:
            self._scope.cancel()

    async def _write_loop(self) -> None:
        try:
            while True:
                if not self._wbuf or self._sending:
                    if self._close_requested and not self._sending:
                        break
                    self._wake = trio.Event()
                    self._writer_idle = True
                    await self._wake.wait()
                    continue
                await self._send_queued()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._fail(exc)
        if self._scope is not None:
            self._scope.cancel()

    async def _send_queued(self, first: bytes = b"") -> None:
        """Send ``first`` (when the queue is empty, without copying it into the queue), then
        the write queue and what is queued meanwhile, until it is empty."""
        assert self._stream is not None
        stream = self._stream
        codec = self._codec
        self._sending = True
        self._send_started = trio.current_time()
        try:
            if first:
                if self._wbuf:
                    self._wbuf += first
                else:
                    await stream.send_all(codec.compress(first) if codec is not None else first)
            while self._wbuf:
                data, self._wbuf = self._wbuf, bytearray()
                await stream.send_all(codec.compress(bytes(data)) if codec is not None else data)
        finally:
            self._sending = False

    async def write_now(self, data: bytes) -> None:
        """``write``, sending from the calling task when nothing else is being sent.

        For a lone request this saves the hop to the writer task (a round trip is mostly
        scheduling). A send cancelled half way leaves half a command on the wire, so then the
        connection is aborted (its other requests are retried like after any loss).
        """
        if self.closed:
            return
        # A cancellation now, before anything is queued, is clean. The send below can only be
        # cancelled after part of it went out (a full socket buffer): that aborts.
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._sending or self._stream is None or self._scope is None:
            self.write(data)
            return
        try:
            await self._send_queued(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._fail(exc)
        except trio.Cancelled:
            self.abort()
            raise

    def write(self, data: bytes) -> None:
        """Queue bytes for the writer; they leave with the next send (never blocks)."""
        if self.closed:
            return
        self._wbuf += data
        if self._writer_idle:
            self._writer_idle = False
            self._wake.set()

    def close(self) -> None:
        """Send what is queued, then close."""
        self._close_requested = True
        self._writer_idle = False
        self._wake.set()  # the writer sends what is queued, then ends the connection

    def abort(self) -> None:
        """Close now, dropping anything queued."""
        self._close_requested = True
        self._wbuf.clear()
        if self._scope is not None:
            self._scope.cancel()

    async def _abort_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    # -- answering messages (called by Message) ----------------------------------------------------
    def finish_message(self, message: Message) -> None:
        # write() and _answered() by hand: this runs once per message.
        if not self.closed:
            self._wbuf += commands.fin(message.id)
            if self._writer_idle:
                self._writer_idle = False
                self._wake.set()
        self.in_flight -= 1
        self._handler.on_answered(self, Signal.RESUME)
        if self.closing and self.in_flight <= 0:
            self.close()

    def requeue_message(self, message: Message, delay: float | None, backoff: bool) -> None:
        if delay is None or delay < 0:
            delay_ms = min(self._default_requeue_ms * message.attempts, self._max_requeue_ms)
        else:
            delay_ms = int(delay * 1000)
        self.write(commands.req(message.id, delay_ms))
        self._answered(Signal.BACKOFF if backoff else Signal.CONTINUE)

    def touch_message(self, message: Message) -> None:
        self.write(commands.touch(message.id))

    def _answered(self, signal: Signal) -> None:
        self.in_flight -= 1
        self._handler.on_answered(self, signal)
        if self.closing and self.in_flight <= 0:
            self.close()


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
