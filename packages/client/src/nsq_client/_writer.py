"""A connection's write queue and the task that sends it.

``write()`` queues bytes and never blocks; the writer task (``run``) sends whatever was queued
since its last send in one ``send_all``: a burst of FINs from a batch (queued as ids and joined
into ``FIN`` commands at send time, ``commands.fins``) or of pipelined PUBs leaves as one write.
``send()`` sends from the calling task when nothing else is being sent, and ``write_through()``
hands a command to the kernel at once when nothing is queued (a plain socket, ``FdStream``):
both save the hop to the writer task for a command that goes out on its own.
"""

from __future__ import annotations

from collections.abc import Callable

import trio
from nsq_common import commands

from ._compression import Codec
from ._fdstream import FdStream

# What ends the writer: the stream failed or was closed.
SEND_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)


class WriteQueue:
    """What is to be sent on a stream, in order.

    Args:
        fail: called with the error when a send fails (the connection ends).
    """

    __slots__ = ("_buf", "_fail", "_fins", "_idle", "_wake", "closing", "codec", "send_started",
                 "sending", "stream")

    def __init__(self, fail: Callable[[BaseException], None]) -> None:
        self._fail = fail
        self.stream: trio.abc.Stream | None = None
        self.codec: Codec | None = None
        self._buf = bytearray()
        # Ids of messages FINished since the last write: they join the queue as one
        # ``FIN <id>\n...`` block (one C-level join) before anything else is queued or sent.
        self._fins: list[bytes] = []
        self._wake = trio.Event()
        self._idle = False  # the writer waits on _wake: the next write must set it
        self.sending = False  # a send is in progress (writer task or send())
        self.send_started = 0.0
        self.closing = False  # flush what is queued, then end (run returns)

    @property
    def empty(self) -> bool:
        return not (self._buf or self._fins)

    def write(self, data: bytes) -> None:
        """Queue bytes; they leave with the next send."""
        if self._fins:
            self._queue_fins()
        self._buf += data
        if self._idle:
            self._idle = False
            self._wake.set()

    def fin(self, message_id: bytes) -> None:
        """Queue ``FIN <message_id>``."""
        self._fins.append(message_id)
        if self._idle:
            self._idle = False
            self._wake.set()

    def _queue_fins(self) -> None:
        self._buf += commands.fins(self._fins)
        self._fins.clear()

    def write_through(self, data: bytes) -> None:
        """``write``, but when nothing is queued or being sent on an ``FdStream`` without
        compression, give the bytes to the kernel at once; what it does not take now is queued.
        Never blocks."""
        stream = self.stream
        if (type(stream) is not FdStream or self.codec is not None or self.sending or self._buf
                or self._fins):
            self.write(data)
            return
        try:
            sent = stream.send_nowait(data)
        except OSError as exc:
            self._fail(exc)
            return
        if sent < len(data):
            self.write(data[sent:])

    async def send(self, first: bytes = b"") -> None:
        """Send ``first`` (when the queue is empty, without copying it into the queue), then
        the queue and what is queued meanwhile, until it is empty.

        Raises:
            OSError, trio.BrokenResourceError, trio.ClosedResourceError: the send failed.
        """
        stream = self.stream
        assert stream is not None
        codec = self.codec
        self.sending = True
        self.send_started = trio.current_time()
        try:
            if first:
                if self._buf or self._fins:
                    if self._fins:
                        self._queue_fins()
                    self._buf += first
                else:
                    await stream.send_all(codec.compress(first) if codec is not None else first)
            while True:
                if self._fins:
                    self._queue_fins()
                if not self._buf:
                    break
                data, self._buf = self._buf, bytearray()
                await stream.send_all(codec.compress(bytes(data)) if codec is not None else data)
        finally:
            self.sending = False

    async def run(self) -> None:
        """The writer task: send what is queued as it comes, until ``finish()`` and the queue
        is empty, or a send fails (reported to ``fail``)."""
        try:
            while True:
                if not (self._buf or self._fins) or self.sending:
                    if self.closing and not self.sending:
                        break
                    self._wake = trio.Event()
                    self._idle = True
                    await self._wake.wait()
                    continue
                await self.send()
        except SEND_ERRORS as exc:
            self._fail(exc)

    def finish(self) -> None:
        """Send what is queued, then end ``run``."""
        self.closing = True
        self._idle = False
        self._wake.set()

    def drop(self) -> None:
        """Forget what is queued (the connection is aborted)."""
        self.closing = True
        self._buf.clear()
        self._fins.clear()
