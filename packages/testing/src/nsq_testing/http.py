"""A raw HTTP/1.1 keep-alive connection for tests that make thousands of requests from Trio:
one request at a time, its whole answer read (``Content-Length`` bodies: what our servers
send), none of an HTTP library's cost per request."""

from __future__ import annotations

import trio


class HttpConnection:
    """One keep-alive HTTP/1.1 connection: a request, then its whole answer."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, host: str, port: int) -> HttpConnection:
        return cls(await trio.open_tcp_stream(host, port))

    async def request(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        """Send one request; its status and body."""
        await self.stream.send_all(f"{method} {target} HTTP/1.1\r\nHost: x\r\n"
                                   f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        while b"\r\n\r\n" not in self.buffer:
            await self._receive()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self.buffer) < length:
            await self._receive()
        answer, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split(b" ")[1]), answer

    async def _receive(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise EOFError("the server closed the connection")
        self.buffer += data

    async def aclose(self) -> None:
        await self.stream.aclose()
