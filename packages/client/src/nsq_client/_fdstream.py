"""A plain TCP connection's socket, read and written directly: a ``trio.abc.Stream``.

Trio's ``SocketStream`` yields after every successful send and receive and tries a receive
before waiting: per round trip, several more passes of the scheduler than the I/O needs. This
stream calls ``os.read`` / ``os.write`` on the non-blocking socket when the kernel is ready and
uses Trio only to wait for it; a send the kernel takes at once does not yield at all.

It can also be *lent*: a task waiting for the answer to the only request on the wire reads
it itself (``lend`` / ``receive_lent`` / ``give_back``) while the owner's ``receive_some``
steps aside, parked until the socket is given back. Only one task may wait for a socket at a
time in Trio, so lending cancels the owner's wait (when the stream was made ``lendable``: the
cancel scope around each wait costs a few µs, not worth paying on a consumer's connection).
"""

from __future__ import annotations

import os

import trio
from trio.lowlevel import wait_readable, wait_writable

READ_SIZE = 65536


class FdStream(trio.abc.Stream):
    """``stream``'s socket, read and written by file descriptor (see the module docstring)."""

    def __init__(self, stream: trio.SocketStream, *, lendable: bool = False) -> None:
        self._stream = stream
        self._fd = stream.socket.fileno()
        self._lendable = lendable
        self._closed = False
        self._lent = False
        self._park: trio.Event | None = None
        self._read_wait: trio.CancelScope | None = None

    @property
    def lent(self) -> bool:
        """A task other than the owner has the socket's read side (``lend``)."""
        return self._lent

    # -- reading ---------------------------------------------------------------------------------
    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The owner's read: waits first (after a parsed chunk the socket is usually empty, so
        trying first would mostly cost a failed read), steps aside while the socket is lent.

        Raises:
            trio.ClosedResourceError: the stream was closed.
        """
        fd = self._fd
        while True:
            if self._lent:
                self._park = park = trio.Event()
                await park.wait()
                continue
            if self._lendable:
                with trio.CancelScope() as self._read_wait:
                    await wait_readable(fd)
                self._read_wait = None
            else:
                await wait_readable(fd)
            if self._closed:
                raise trio.ClosedResourceError("connection closed")
            if self._lent:
                continue  # a task borrowed the socket while this one waited
            try:
                return os.read(fd, max_bytes or READ_SIZE)
            except BlockingIOError:
                continue

    def lend(self) -> bool:
        """Give the read side to the calling task; False when it is lent already."""
        if self._lent or self._closed:
            return False
        self._lent = True
        if self._read_wait is not None:
            self._read_wait.cancel()  # the owner gives up its wait at once (Trio unregisters it)
        return True

    async def receive_lent(self, max_bytes: int = READ_SIZE) -> bytes:
        """The borrower's read, between ``lend`` and ``give_back``.

        Raises:
            trio.ClosedResourceError: the stream was closed.
        """
        fd = self._fd
        while True:
            await wait_readable(fd)
            if self._closed:
                raise trio.ClosedResourceError("connection closed")
            try:
                return os.read(fd, max_bytes)
            except BlockingIOError:
                continue

    def give_back(self) -> None:
        """End a ``lend``: the owner's ``receive_some`` goes on."""
        self._lent = False
        park, self._park = self._park, None
        if park is not None:
            park.set()

    # -- writing ---------------------------------------------------------------------------------
    def send_nowait(self, data: bytes | bytearray | memoryview) -> int:
        """Give the kernel what it takes now, without waiting; returns how many bytes."""
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """No yield when the kernel takes it all at once.

        Raises:
            trio.ClosedResourceError: the stream was closed meanwhile.
            OSError: the socket failed.
        """
        fd = self._fd
        with memoryview(data) as view:
            while view:
                try:
                    sent = os.write(fd, view)
                except BlockingIOError:
                    await wait_writable(fd)
                    if self._closed:
                        raise trio.ClosedResourceError("connection closed") from None
                    continue
                view = view[sent:]

    async def wait_send_all_might_not_block(self) -> None:
        await wait_writable(self._fd)

    async def aclose(self) -> None:
        self._closed = True
        await self._stream.aclose()
