"""One connection to an nsqd: the Trio edge of the client.

Life of a connection::

    connect()    dial, "  V2", IDENTIFY (feature negotiation), TLS / deflate / snappy, AUTH
    subscribe()  SUB topic channel, expect OK                     (consumers only)
    run()        a reader task and a writer task until the connection ends
    close()      flush what is queued, then close; abort() closes at once

The handshake reads frame by frame, taking exactly the bytes of each frame from the stream,
because after the IDENTIFY reply the next bytes may already be TLS or compressed. After it,
two tasks run and no task is ever started per message:

* the **reader** receives up to 64 KiB, parses every whole frame in it by offset (a run of
  ``OK`` answers in one C-level count), answers heartbeats with NOP, and hands the chunk's
  messages to the handler as one list;
* the **writer** sends whatever ``write()`` queued since its last send, in one ``send_all``:
  a burst of FINs from a batch (queued as ids, joined into ``FIN`` commands at send time),
  or of pipelined PUBs, leaves as one write. ``write_through()`` skips the writer for a
  command that goes out on its own (an MPUB, a lone publish) when nothing else is queued.

A caller waiting for the answer to the only request on the wire may read and parse it itself
(``read_here``) while the reader task steps aside: one task hand-off less per round trip.

On a plain TCP connection both read and write the socket itself (``os.read``/``os.write``
on the non-blocking socket) and use Trio only to wait for it; TLS and test streams go through
the ``trio.abc.Stream``.

Deadlines are go-nsq's: ``read_timeout`` without a byte (nsqd heartbeats every 30 s) or a send
that cannot finish within ``write_timeout`` ends the connection. What happens on frames,
answers and close is the handler's business (``ConnHandler``): the producer matches responses
to requests, the consumer feeds its queue and its RDY and backoff state.
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio
from nsq_common import (
    FRAME_HEADER,
    HEARTBEAT,
    MAGIC_V2,
    MESSAGE_HEADER_SIZE,
    FrameDecoder,
    FrameTooBig,
    FrameType,
    commands,
)
from trio.lowlevel import wait_readable, wait_writable

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
# The largest frame a compressed connection takes when max_msg_size is not set (nsqd's
# --max-msg-size defaults to 1 MiB): beyond it the connection fails with FrameTooBig.
_COMPRESSED_MAX_FRAME = 64 << 20
# The fixed part of a message frame, read in one go: the frame header (size, type), then
# the message's timestamp and attempts (MESSAGE_HEADER) and its 16-byte id; the body follows.
_MESSAGE_FRAME = struct.Struct(">iiqH16s")
_MESSAGE_FRAME_MIN = FRAME_HEADER.size + MESSAGE_HEADER_SIZE
assert _MESSAGE_FRAME.size == _MESSAGE_FRAME_MIN
_OK_FRAME = FRAME_HEADER.pack(4 + 2, int(FrameType.RESPONSE)) + b"OK"
_OK_FRAME_SIZE = len(_OK_FRAME)
_OK_SIZE = 4 + 2  # the size field of an OK frame
_HEARTBEAT_SIZE = 4 + len(HEARTBEAT)

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

    def on_ok(self, conn: Connection, count: int) -> None:
        """``count`` responses ``OK`` in a row (the same as as many ``on_response``)."""

    def on_error(self, conn: Connection, error: ServerError) -> None: ...

    def on_answered(self, conn: Connection, signal: Signal) -> None: ...

    def on_finished(self, conn: Connection) -> None:
        """A message was FINished (the same as ``on_answered(conn, Signal.RESUME)``)."""

    def on_close(self, conn: Connection) -> None: ...


def count_oks(data: bytes, start: int, end: int) -> int:
    """How many whole ``OK`` frames follow one another in ``data[start:end]`` from ``start``.

    One C-level ``count`` decides the common case, a run of nothing but OKs: n occurrences of
    the 10-byte frame, not overlapping, in 10 * n bytes can only be the frames back to back.
    Otherwise (a heartbeat or an error among them) they are stepped over one by one.
    """
    n = (end - start) // _OK_FRAME_SIZE
    if not n:
        return 0
    if data.count(_OK_FRAME, start, start + n * _OK_FRAME_SIZE) == n:
        return n
    k = 0
    while k < n and data.startswith(_OK_FRAME, start):
        k += 1
        start += _OK_FRAME_SIZE
    return k


class _Closed(Exception):
    """End of stream after CLS or close(): the read loop ends without an error."""


def _timeout(seconds: float) -> float:
    return seconds if seconds > 0 else math.inf


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
        # A plain TCP stream's socket: after the handshake, read and written directly
        # (``os.read`` / ``os.write`` when the kernel is ready, Trio only to wait; see run()).
        self._fd: int | None = None
        self._codec: Codec | None = None
        self._rbuf = b""  # handshake read-ahead, already decompressed
        # The start of a frame not yet whole (pieces as received), its size so far and in all.
        self._partial: list[bytes] = []
        self._partial_size = 0
        self._partial_need = 0
        self._max_frame = config.max_msg_size + 30 if config.max_msg_size else 0
        # A caller reading its own answer (read_here) has the socket; the reader task waits
        # on _park meanwhile. _read_wait: the reader's wait for the socket, to call it off.
        self._lent = False
        self._park: trio.Event | None = None
        self._read_wait: trio.CancelScope | None = None
        self._wbuf = bytearray()
        # Ids of messages FINished since the last write: they join the write queue as one
        # ``FIN <id>\n...`` block (one C-level join) before anything else is queued or sent.
        self._fins: list[bytes] = []
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
        if self._codec is not None and not self._max_frame:
            # Inflating is bounded per call (see _compression); one frame is bounded too (by
            # max_msg_size when set), so a stream that compresses enormously cannot grow a
            # frame without end. nsqd does not say its --max-msg-size; this is far above it.
            self._max_frame = _COMPRESSED_MAX_FRAME
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
            codec = self._codec
            more = codec.pending() if codec is not None else b""
            if more:
                self._rbuf += more
                continue
            want = READ_SIZE if codec else n - len(self._rbuf)
            chunk = await self._stream.receive_some(want)
            if not chunk:
                raise trio.BrokenResourceError("connection closed by nsqd")
            self._rbuf += codec.decompress(chunk) if codec else chunk
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
                stream = self._stream
                if type(stream) is trio.SocketStream and self._fd is None:
                    # Plain TCP: read and write the (non-blocking) socket directly, and use
                    # Trio only to wait for it. Trio's socket calls yield after every
                    # successful send and receive and try a receive before waiting: per
                    # round trip, several more passes of the scheduler than the I/O needs.
                    self._fd = stream.socket.fileno()
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._watchdog)
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

    async def _read_loop(self) -> None:
        if self._rbuf:
            data, self._rbuf = self._rbuf, b""
            self._feed(data)
        while True:
            self._feed(await self._receive())

    def _feed(self, chunk: bytes) -> None:
        """Parse ``chunk`` after what was left of the previous one (a frame split over
        receives). A frame larger than one receive is gathered in a list and joined once it
        is whole, not copied on every receive."""
        parts = self._partial
        if chunk == _OK_FRAME and not parts:
            self._handler.on_ok(self, 1)  # the answer to a lone publish: nothing to parse
            return
        if parts:
            parts.append(chunk)
            self._partial_size += len(chunk)
            if self._partial_size < self._partial_need:
                return
            data = b"".join(parts)
            parts.clear()
        else:
            data = chunk
        pos = self._parse(data)
        if pos < len(data):
            rest = data[pos:]
            parts.append(rest)
            self._partial_size = len(rest)
            # _parse checked the size of a frame whose header it saw.
            self._partial_need = 4 + FRAME_HEADER.unpack_from(rest)[0] if len(rest) >= 8 else 8

    def _parse(self, data: bytes) -> int:
        """Every whole frame of ``data``, by offset, in one pass; returns where the first
        incomplete frame starts (``len(data)`` when there is none).

        No frame objects: a message frame becomes its ``Message`` straight from the received
        bytes (one ``unpack_from`` for size, type, timestamp, attempts and id, one slice for
        the body); a run of ``OK`` responses is counted, not parsed (``count_oks``), and
        reported as one ``on_ok`` call.
        """
        handler = self._handler
        max_size = self._max_frame
        unpack_message = _MESSAGE_FRAME.unpack_from
        end = len(data)
        pos = 0
        messages: list[Message] = []
        oks = 0
        while end - pos >= 8:
            if end - pos >= _MESSAGE_FRAME_MIN:
                size, frame_type, timestamp, attempts, message_id = unpack_message(data, pos)
            else:
                size, frame_type = FRAME_HEADER.unpack_from(data, pos)
            if size < 4 or (max_size and size > max_size):
                raise FrameTooBig(f"frame size {size} out of range"
                                  + (f" (at most {max_size})" if max_size else ""))
            stop = pos + 4 + size
            if stop > end:
                break
            if frame_type == _FRAME_MESSAGE:
                if stop - pos < _MESSAGE_FRAME_MIN:
                    raise ValueError(f"message frame of {size - 4} bytes")
                messages.append(Message(message_id, data[pos + _MESSAGE_FRAME_MIN : stop],
                                        timestamp, attempts, self))
            elif frame_type == _FRAME_RESPONSE:
                if size == _OK_SIZE and data.startswith(b"OK", pos + 8):
                    # Answers to pipelined publishes: count the whole run at once.
                    n = count_oks(data, stop, end) + 1
                    oks += n
                    stop += (n - 1) * _OK_FRAME_SIZE
                else:
                    if oks:
                        handler.on_ok(self, oks)
                        oks = 0
                    if size == _HEARTBEAT_SIZE and data.startswith(HEARTBEAT, pos + 8):
                        self.write(_NOP)
                    else:
                        handler.on_response(self, data[pos + 8 : stop])
            elif frame_type == _FRAME_ERROR:
                if oks:
                    handler.on_ok(self, oks)
                    oks = 0
                handler.on_error(self, ServerError.from_frame(data[pos + 8 : stop]))
            else:
                raise ValueError(f"unknown frame type {frame_type}")
            pos = stop
        if oks:
            handler.on_ok(self, oks)
        if messages:
            self.in_flight += len(messages)
            handler.on_messages(self, messages)
        return pos

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
        fd = self._fd
        if fd is None:
            data = await stream.receive_some(READ_SIZE)
        else:
            # Wait first: the wait is this task's yield, and after a parsed chunk the socket
            # is usually empty (trying first would mostly cost a failed read).
            while True:
                if self._lent:
                    self._park = park = trio.Event()
                    await park.wait()
                    continue
                if self.read_by_callers:
                    # In a scope read_here can cancel (a scope costs a few µs: not for all).
                    with trio.CancelScope() as self._read_wait:
                        await wait_readable(fd)
                    self._read_wait = None
                else:
                    await wait_readable(fd)
                if self._stream is not stream:
                    raise trio.ClosedResourceError("connection closed")
                if self._lent:
                    continue  # a caller took the socket (read_here) while this task waited
                try:
                    data = os.read(fd, READ_SIZE)
                    break
                except BlockingIOError:
                    continue
        self._last_read = trio.current_time()
        if not data:
            if self.closing or self._close_requested:
                raise _Closed
            raise trio.BrokenResourceError("connection closed by nsqd")
        return codec.decompress(data) if codec is not None else data

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
        fd = self._fd
        stream = self._stream
        if (fd is None or self._codec is not None or self._lent or self.closed
                or not self.read_by_callers):
            return
        self._lent = True
        if self._read_wait is not None:
            self._read_wait.cancel()  # gives up the socket at once (Trio unregisters it)
        try:
            while not settled():
                await wait_readable(fd)
                if self._stream is not stream:
                    return
                try:
                    data = os.read(fd, READ_SIZE)
                except BlockingIOError:
                    continue
                if not data:
                    return  # the reader reads the end of the stream again and ends it
                self._last_read = trio.current_time()
                self._feed(data)
        except trio.ClosedResourceError:
            pass  # the connection was closed meanwhile
        except (OSError, FrameTooBig, ValueError) as exc:
            self._fail(exc)
        finally:
            self._lent = False
            park, self._park = self._park, None
            if park is not None:
                park.set()

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
                if not (self._wbuf or self._fins) or self._sending:
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
            send = stream.send_all if self._fd is None else self._send_fd
            if first:
                if self._wbuf or self._fins:
                    if self._fins:
                        self._queue_fins()
                    self._wbuf += first
                else:
                    await send(codec.compress(first) if codec is not None else first)
            while True:
                if self._fins:
                    self._queue_fins()
                if not self._wbuf:
                    break
                data, self._wbuf = self._wbuf, bytearray()
                await send(codec.compress(bytes(data)) if codec is not None else data)
        finally:
            self._sending = False

    async def _send_fd(self, data: bytes | bytearray) -> None:
        """``send_all`` on the socket itself: no yield when the kernel takes it all at once."""
        stream = self._stream
        fd = self._fd
        assert fd is not None
        with memoryview(data) as view:
            while view:
                try:
                    sent = os.write(fd, view)
                except BlockingIOError:
                    await wait_writable(fd)
                    if self._stream is not stream:
                        raise trio.ClosedResourceError("connection closed") from None
                    continue
                view = view[sent:]

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
        if self._fd is not None and self._codec is None:
            self.write_through(data)  # never waits, so there is nothing to cancel
            return
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

    def write_through(self, data: bytes) -> None:
        """``write``, but when nothing is queued or being sent on a plain TCP connection,
        give the bytes to the kernel at once; what it does not take now is queued for the
        writer. Never blocks. Saves the hop to the writer task for a command that is sent on
        its own anyway (an MPUB, a lone publish)."""
        fd = self._fd
        if (fd is None or self._codec is not None or self._sending or self._wbuf
                or self._fins or self.closed):
            self.write(data)
            return
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._fail(exc)
            return
        if sent < len(data):
            self.write(data[sent:])

    def write(self, data: bytes) -> None:
        """Queue bytes for the writer; they leave with the next send (never blocks)."""
        if self.closed:
            return
        if self._fins:
            self._queue_fins()
        self._wbuf += data
        if self._writer_idle:
            self._writer_idle = False
            self._wake.set()

    def _queue_fins(self) -> None:
        fins = self._fins
        wbuf = self._wbuf
        wbuf += b"FIN "
        wbuf += b"\nFIN ".join(fins)
        wbuf += b"\n"
        fins.clear()

    def close(self) -> None:
        """Send what is queued, then close."""
        self._close_requested = True
        self._writer_idle = False
        self._wake.set()  # the writer sends what is queued, then ends the connection

    def abort(self) -> None:
        """Close now, dropping anything queued."""
        self._close_requested = True
        self._wbuf.clear()
        self._fins.clear()
        if self._scope is not None:
            self._scope.cancel()

    async def _abort_stream(self) -> None:
        stream, self._stream = self._stream, None
        self._fd = None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    # -- answering messages (called by Message) ----------------------------------------------------
    def finish_message(self, message: Message) -> None:
        # write() and _answered() by hand: this runs once per message.
        if not self.closed:
            self._fins.append(message.id)
            if self._writer_idle:
                self._writer_idle = False
                self._wake.set()
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
