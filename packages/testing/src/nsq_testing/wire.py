"""A raw protocol V2 client for tests: send exact bytes, read exact frames."""

from __future__ import annotations

import os
import weakref

import trio
from nsq_common import (
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    FrameType,
    WireMessage,
    commands,
    decode_message,
    split_address,
)

from .wait import DEADLINE


class WireClient:
    """One TCP connection to nsqd, driven by hand.

    Every client that is still open when a test ends is closed by the plugin's ``_cleanup``
    fixture, so a test that fails half-way does not add a ResourceWarning of its own.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        _open.add(self)

    @classmethod
    async def connect(cls, address: str, *, magic: bytes = MAGIC_V2) -> WireClient:
        stream = await trio.open_tcp_stream(*split_address(address))
        client = cls(stream)
        if magic:
            try:
                await stream.send_all(magic)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        return client

    async def __aenter__(self) -> WireClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_frame(self, timeout: float = DEADLINE, *, skip_heartbeats: bool = True
                         ) -> tuple[int, bytes]:
        """The next frame; raises EOFError if the server closed, TooSlowError on timeout."""
        with trio.fail_after(timeout):
            while True:
                frame = self.decoder.next_event()
                if frame is not None:
                    if skip_heartbeats and frame == (FrameType.RESPONSE, HEARTBEAT):
                        continue
                    return frame
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError("connection closed")
                self.decoder.receive_data(data)

    async def response(self, timeout: float = DEADLINE) -> bytes:
        frame_type, data = await self.read_frame(timeout)
        if frame_type != FrameType.RESPONSE:
            raise AssertionError(f"expected a response, got {frame_type} {data!r}")
        return data

    async def error(self, timeout: float = DEADLINE) -> bytes:
        frame_type, data = await self.read_frame(timeout)
        if frame_type != FrameType.ERROR:
            raise AssertionError(f"expected an error, got {frame_type} {data!r}")
        return data

    async def message(self, timeout: float = DEADLINE) -> WireMessage:
        frame_type, data = await self.read_frame(timeout)
        if frame_type != FrameType.MESSAGE:
            raise AssertionError(f"expected a message, got {frame_type} {data!r}")
        return decode_message(data)

    async def messages(self, count: int, timeout: float = DEADLINE) -> list[WireMessage]:
        with trio.fail_after(timeout):
            return [await self.message(timeout) for _ in range(count)]

    async def nothing_for(self, seconds: float) -> None:
        """Assert that no frame (other than heartbeats) arrives within ``seconds``."""
        try:
            frame = await self.read_frame(seconds)
        except trio.TooSlowError:
            return
        raise AssertionError(f"unexpected frame {frame!r}")

    async def closed(self, timeout: float = DEADLINE) -> bool:
        """True once the server has closed the connection (frames before that are skipped)."""
        try:
            with trio.fail_after(timeout):
                while True:
                    data = await self.stream.receive_some(65536)
                    if not data:
                        return True
        except trio.TooSlowError:
            return False
        except trio.BrokenResourceError:
            return True

    async def identify(self, **fields: object) -> bytes:
        await self.send(commands.identify({"feature_negotiation": True, **fields}))
        return await self.response()

    async def subscribe(self, topic: str, channel: str, rdy: int = 0) -> None:
        await self.send(commands.sub(topic, channel))
        assert await self.response() == b"OK"
        if rdy:
            await self.send(commands.rdy(rdy))

    async def pub(self, topic: str, body: bytes) -> None:
        await self.send(commands.pub(topic, body))
        assert await self.response() == b"OK"

    async def aclose(self) -> None:
        """Close the connection; safe to call twice, and when cancelled (it never blocks)."""
        _open.discard(self)
        await trio.aclose_forcefully(self.stream)


_open: weakref.WeakSet[WireClient] = weakref.WeakSet()


def close_leftover_clients() -> None:
    """Close the socket of every WireClient not closed yet (callable outside Trio)."""
    for client in list(_open):
        _open.discard(client)
        fd = client.stream.socket.detach()  # its close() needs a running Trio; this does not
        if fd != -1:
            os.close(fd)
