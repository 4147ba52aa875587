"""The bytes under a connection: a plain TCP socket, or a TLS stream.

A plain connection uses Trio's socket directly (``recv``/``send``): Trio's ``SocketStream``
adds a conflict detector, a memoryview loop and an exception translation per call, a tenth
of the cost of a small request. Both kinds raise ``trio.BrokenResourceError`` when the peer
is gone.
"""

from __future__ import annotations

import os
import socket

import trio

RECEIVE_SIZE = 65536


#: Reads that found bytes waiting, in a row, after which a read yields to the scheduler.
READY_READS = 8


class SocketTransport:
    __slots__ = ("fd", "ready_reads", "sock")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.sock = stream.socket
        self.fd = self.sock.fileno()
        self.ready_reads = 0

    async def receive(self) -> bytes:
        """What the peer has sent (b"" once it has closed). Cancellable before the read; a
        wait until the socket is readable when nothing is there. A read that needed no wait
        yields to the scheduler only every ``READY_READS``-th time in a row: a client that
        sends its next request while the answer to the last is on its way (one connection,
        request after request) costs no trip through Trio's loop per request, and every
        other task still runs within a few requests."""
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            try:
                data = os.read(self.fd, RECEIVE_SIZE)
            except BlockingIOError:
                pass
            else:
                self.ready_reads += 1
                if self.ready_reads >= READY_READS:
                    self.ready_reads = 0
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return data
            self.ready_reads = 0
            while True:
                await trio.lowlevel.wait_readable(self.sock)
                try:
                    return os.read(self.fd, RECEIVE_SIZE)
                except BlockingIOError:
                    pass
        except OSError as exc:
            raise trio.BrokenResourceError(exc) from exc

    async def send_all(self, data: bytes) -> None:
        """Write ``data``. An answer almost always fits in the socket's buffer at once: it is
        written without a trip through Trio's scheduler (the connection's next receive is
        the checkpoint); only the rest, if any, waits for the socket to drain."""
        try:
            try:
                sent = os.write(self.fd, data)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                view = memoryview(data)
                while sent < len(data):
                    sent += await self.sock.send(view[sent:])
        except OSError as exc:
            raise trio.BrokenResourceError(exc) from exc

    async def send_eof(self) -> bool:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            return False
        return True

    async def aclose(self) -> None:
        self.sock.close()
        await trio.lowlevel.checkpoint()


class StreamTransport:
    __slots__ = ("fd", "stream")

    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        self.fd = stream.transport_stream.socket.fileno()  # the TCP socket under it

    async def receive(self) -> bytes | bytearray:
        return await self.stream.receive_some(RECEIVE_SIZE)

    async def send_all(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send_eof(self) -> bool:
        return False  # TLS has no half-close that every client understands

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


Transport = SocketTransport | StreamTransport
