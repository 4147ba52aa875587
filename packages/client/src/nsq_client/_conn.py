"""One connection to an nsqd: the Trio edge of the client.

Life of a connection::

    connect()    dial, then the handshake (_handshake: "  V2", IDENTIFY, TLS, compression, AUTH)
    subscribe()  SUB topic channel, expect OK                     (consumers only)
    run()        a reader task, a writer task (_writer) and a watchdog (_watchdog) until it ends
    close()      flush what is queued, then close; abort() closes at once

No task is ever started per message. The **reader** receives up to 64 KiB and hands it to the
shared frame decoder (``nsq_common.FrameDecoder.next_events``), which scans every whole frame
in it by offset and builds each ``Message`` straight from the received bytes; the reader
answers heartbeats with NOP and hands the chunk's messages to the handler as one list. A run
of ``OK`` answers comes out counted, as one ``on_ok`` call.

A caller waiting for the answer to the only request on the wire may read and parse it itself
(``read_here``) while the reader task steps aside: one task hand-off less per round trip.

On a plain TCP connection the stream is an ``FdStream`` (raw socket reads and writes, Trio
only to wait); TLS and test streams are used as they are. What happens on frames, answers and
close is the handler's business (``ConnHandler``): the producer matches responses to
requests, the consumer feeds its queue and its RDY and backoff state.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio
from nsq_common import (
    HEARTBEAT,
    OK_FRAME,
    FrameDecoder,
    FrameTooBig,
    FrameType,
    commands,
    split_address,
)

from ._backoff import Signal
from ._errors import ConnectError, ServerError
from ._fdstream import READ_SIZE, FdStream
from ._handshake import Handshake
from ._message import Message
from ._watchdog import timeout, watchdog
from ._writer import SEND_ERRORS, WriteQueue

if TYPE_CHECKING:
    from ._compression import Codec
    from ._config import Config

log = logging.getLogger("nsq_client")

_RESPONSE = int(FrameType.RESPONSE)
_NOP = commands.nop()
# The largest frame a compressed connection takes when max_msg_size is not set (nsqd's
# --max-msg-size defaults to 1 MiB): beyond it the connection fails with FrameTooBig.
_COMPRESSED_MAX_FRAME = 64 << 20
# A message frame's size field counts its type and the message header besides the body.
_MESSAGE_OVERHEAD = 30

Connector = Callable[[str, int], Awaitable[trio.abc.Stream]]


async def open_tcp(host: str, port: int) -> trio.abc.Stream:
    return await trio.open_tcp_stream(host, port)


class ConnHandler(Protocol):
    """What a connection reports to its owner (all called from the reader task)."""

    def on_messages(self, conn: Connection, messages: list[Message]) -> None: ...

    def on_response(self, conn: Connection, data: bytes) -> None: ...

    def on_ok(self, conn: Connection, count: int) -> None:
        """``count`` responses ``OK`` in a row (the same as as many ``on_response``)."""

    def on_error(self, conn: Connection, error: ServerError) -> None: ...

    def on_answered(self, conn: Connection, signal: Signal) -> None: ...

    def on_finished(self, conn: Connection) -> None:
        """A message was FINished (the same as ``on_answered(conn, Signal.RESUME)``)."""

    def on_close(self, conn: Connection) -> None: ...


class _Closed(Exception):
    """End of stream after CLS or close(): the read loop ends without an error."""


class Connection:
    """A connection to one nsqd.

    Args:
        address: ``host:port`` of nsqd's TCP listener.
        config: the owner's options.
        handler: receives frames and the close (see ``ConnHandler``).
        connector: opens the byte stream (default: TCP); tests pass memory streams.
        read_by_callers: a caller may read the answer to its request itself (``read_here``).
    """

    def __init__(self, address: str, config: Config, handler: ConnHandler,
                 connector: Connector | None = None, *, read_by_callers: bool = False) -> None:
        self.address = address
        self.read_by_callers = read_by_callers
        self.config = config
        self._handler = handler
        self._connector = connector or open_tcp
        self._stream: trio.abc.Stream | None = None
        self._handshake: Handshake | None = None
        self._codec: Codec | None = None
        self._max_frame = config.max_msg_size + _MESSAGE_OVERHEAD if config.max_msg_size else 0
        self._decoder: FrameDecoder[Message] | None = None
        self._writes = WriteQueue(self._fail)
        self._last_read = 0.0
        self._scope: trio.CancelScope | None = None
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

    @property
    def raw_socket(self) -> bool:
        """Read and written on the socket itself (a plain TCP connection, once running)."""
        return type(self._stream) is FdStream

    @property
    def caller_reading(self) -> bool:
        """A caller reads its own answer now (``read_here``); the reader task stands aside."""
        stream = self._stream
        return type(stream) is FdStream and stream.lent

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
            with trio.fail_after(timeout(config.dial_timeout)):
                self._stream = await self._connector(host, port)
            with trio.fail_after(timeout(config.read_timeout)):
                shake = self._handshake = Handshake(self._stream, config, self.address)
                try:
                    await shake.negotiate(host)
                finally:
                    self._stream = shake.stream
        except ConnectError:
            await self._abort_stream()
            raise
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                ServerError, FrameTooBig, ValueError) as exc:
            await self._abort_stream()
            raise ConnectError(f"{self.address}: {_describe(exc)}") from exc
        self.server, self.max_rdy_count, self.auth = shake.server, shake.max_rdy_count, shake.auth
        self._codec = self._writes.codec = shake.codec
        if self._codec is not None and not self._max_frame:
            # Inflating is bounded per call (see _compression); one frame is bounded too (by
            # max_msg_size when set), so a stream that compresses enormously cannot grow a
            # frame without end. nsqd does not say its --max-msg-size; this is far above it.
            self._max_frame = _COMPRESSED_MAX_FRAME

    async def subscribe(self, topic: str, channel: str) -> None:
        """SUB and wait for its OK.

        Raises:
            ConnectError: nsqd refused (the ``ServerError`` with its code is the cause) or the
                connection failed.
        """
        shake = self._handshake
        assert shake is not None, "subscribe() goes between connect() and run()"
        try:
            with trio.fail_after(timeout(self.config.read_timeout)):
                await shake.send(commands.sub(topic, channel))
                await shake.expect_ok("SUB")
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                ServerError, FrameTooBig) as exc:
            await self._abort_stream()
            raise ConnectError(f"{self.address}: SUB {topic} {channel}: {_describe(exc)}") from exc

    # -- running ---------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read and write until the connection ends; then tell the handler (``on_close``)."""
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                stream = self._stream
                if type(stream) is trio.SocketStream:
                    self._stream = stream = FdStream(stream, lendable=self.read_by_callers)
                self._writes.stream = stream
                self._decoder = FrameDecoder(self._max_frame, message=Message, context=self)
                nursery.start_soon(self._write_loop)
                self._last_read = trio.current_time()
                nursery.start_soon(watchdog, timeout(self.config.read_timeout),
                                   timeout(self.config.write_timeout), self._read_at,
                                   self._send_started, self._fail)
                task_status.started()
                try:
                    await self._read_loop()
                except _Closed:
                    pass
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

    def _read_at(self) -> float:
        return self._last_read

    def _send_started(self) -> float | None:
        writes = self._writes
        return writes.send_started if writes.sending else None

    async def _read_loop(self) -> None:
        shake, self._handshake = self._handshake, None
        if shake is not None and (leftover := shake.leftover()):
            self._feed(leftover)
        while True:
            self._feed(await self._receive())

    def _feed(self, data: bytes) -> None:
        """Decode ``data`` after what was left of the previous read, and report every whole
        frame to the handler: runs of OKs and other answers in order, then the messages."""
        decoder = self._decoder
        assert decoder is not None
        handler = self._handler
        if data == OK_FRAME and not decoder.buffered:
            handler.on_ok(self, 1)  # the answer to a lone publish: nothing to decode
            return
        decoder.receive_data(data)
        while True:
            answers, messages = decoder.next_events()
            for answer in answers:
                if type(answer) is int:
                    handler.on_ok(self, answer)
                    continue
                assert isinstance(answer, tuple)
                frame_type, body = answer
                if frame_type != _RESPONSE:
                    handler.on_error(self, ServerError.from_frame(body))
                elif body == HEARTBEAT:
                    self.write(_NOP)
                else:
                    handler.on_response(self, body)
            if messages:
                self.in_flight += len(messages)
                handler.on_messages(self, messages)
            # Once more only when a frame's worth is left: a frame not whole yet (nothing more
            # comes out) or one that failed after those reported (it raises now).
            if decoder.buffered < 8 or not (answers or messages):
                return

    async def _receive(self) -> bytes:
        """The next bytes from nsqd (decompressed); ends the loop quietly on an expected EOF.

        Raises:
            trio.BrokenResourceError: nsqd closed the connection unexpectedly.
        """
        stream = self._stream
        assert stream is not None
        codec = self._codec
        if codec is not None:
            more = codec.pending()  # what the last read held beyond the inflate limit
            if more:
                await trio.lowlevel.checkpoint()
                return more
        data = await stream.receive_some(READ_SIZE)
        self._last_read = trio.current_time()
        if not data:
            if self.closing or self._writes.closing:
                raise _Closed
            raise trio.BrokenResourceError("connection closed by nsqd")
        return codec.decompress(bytes(data)) if codec is not None else bytes(data)

    async def read_here(self, settled: Callable[[], bool]) -> None:
        """Read and parse nsqd's frames from the calling task until ``settled()`` is true.

        For a caller that waits for the answer to its own request (a lone ``pub``/``mpub``):
        handing each answer from the reader task to the caller costs a pass of Trio's
        scheduler per round trip, during which nsqd sits idle. Meanwhile the reader task
        waits aside; everything read here is handled as the reader would (other requests'
        answers, heartbeats). Returns at once, leaving it to the reader, unless this is a
        plain TCP connection made ``read_by_callers`` and no other caller reads already;
        returns early when the connection ends.
        """
        stream = self._stream
        if (type(stream) is not FdStream or self._codec is not None or self.closed
                or not self.read_by_callers or not stream.lend()):
            return
        try:
            while not settled():
                data = await stream.receive_lent(READ_SIZE)
                if not data:
                    return  # the reader reads the end of the stream again and ends it
                self._last_read = trio.current_time()
                self._feed(data)
        except trio.ClosedResourceError:
            pass  # the connection was closed meanwhile
        except (OSError, FrameTooBig, ValueError) as exc:
            self._fail(exc)
        finally:
            stream.give_back()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
            log.warning("(%s) connection error - %s", self.address, _describe(exc))
        if self._scope is not None:
            self._scope.cancel()

    # -- writing ---------------------------------------------------------------------------------
    async def _write_loop(self) -> None:
        await self._writes.run()
        if self._scope is not None:
            self._scope.cancel()

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
        writes = self._writes
        if type(self._stream) is FdStream and self._codec is None:
            writes.write_through(data)  # never waits, so there is nothing to cancel
            return
        if writes.sending or self._stream is None or self._scope is None:
            self.write(data)
            return
        try:
            await writes.send(data)
        except SEND_ERRORS as exc:
            self._fail(exc)
        except trio.Cancelled:
            self.abort()
            raise

    def write_through(self, data: bytes) -> None:
        """``write``, but on a plain TCP connection with nothing queued or being sent, give
        the bytes to the kernel at once (see ``WriteQueue.write_through``). Never blocks."""
        if not self.closed:
            self._writes.write_through(data)

    def write(self, data: bytes) -> None:
        """Queue bytes for the writer; they leave with the next send (never blocks)."""
        if not self.closed:
            self._writes.write(data)

    def close(self) -> None:
        """Send what is queued, then close."""
        self._writes.finish()  # the writer sends what is queued, then ends the connection

    def abort(self) -> None:
        """Close now, dropping anything queued."""
        self._writes.drop()
        if self._scope is not None:
            self._scope.cancel()

    async def _abort_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    # -- answering messages (called by Message) ----------------------------------------------------
    def finish_message(self, message: Message) -> None:
        if not self.closed:
            self._writes.fin(message.id)
        self.in_flight -= 1
        self._handler.on_finished(self)
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
