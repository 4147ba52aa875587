"""TOUCH many messages taken over HTTP at once.

nsqd's ``POST /message/touch`` takes one id. One request each, with a round trip each, costs
the driver about half a millisecond of Python per message (httpx), so a batch of 300 took
0.2-0.3 s to touch on a quiet 2-core machine and over a second on a busy one: longer than a
one-second ``msgTimeout``. Here the requests are written back to back on one connection and
their answers read in order (HTTP/1.1 pipelining), a window of them at a time so that neither
side's socket buffer fills while the other waits: 300 take a few milliseconds.

Over HTTPS the requests go one at a time through the driver's httpx client instead.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from urllib.parse import urlencode

import httpx
from nsq_common import join_host_port, split_address

from .discovery import nsqd_url

WINDOW = 200  # requests written before their answers are read
TIMEOUT = 30.0  # seconds a connection, a write or a read may take


def touch_all(client: httpx.Client, nsqd_http: str, topic: str, channel: str,
              ids: Sequence[bytes]) -> int:
    """Restart the timeout of each message; how many nsqd still had in flight (the others
    were finished or timed out already: answered 404).

    Raises:
        OSError: the connection failed or closed before every answer came.
    """
    if not ids:
        return 0
    query = urlencode({"topic": topic, "channel": channel})
    if "://" in nsqd_http and not nsqd_http.startswith("http://"):
        url = nsqd_url(nsqd_http, "/message/touch")
        return sum(client.post(f"{url}?{query}&id={id.decode()}").status_code == 200
                   for id in ids)
    host, port = split_address(nsqd_http.removeprefix("http://").rstrip("/"))
    head = f"POST /message/touch?{query}&id=".encode()
    tail = (f" HTTP/1.1\r\nHost: {join_host_port(host, port)}\r\nContent-Length: 0\r\n\r\n"
            ).encode()
    touched = 0
    with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
        answers = _Answers(sock)
        for start in range(0, len(ids), WINDOW):
            window = ids[start:start + WINDOW]
            sock.sendall(b"".join(head + id + tail for id in window))
            touched += sum(status == 200 for status in answers.read(len(window)))
    return touched


class _Answers:
    """The status codes of the answers on a connection, in order."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def read(self, count: int) -> list[int]:
        statuses: list[int] = []
        while len(statuses) < count:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                self._fill()
                continue
            lines = self._buffer[:end].split(b"\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self._buffer) < end + 4 + length:
                self._fill()
                continue
            statuses.append(int(lines[0].split()[1]))
            self._buffer = self._buffer[end + 4 + length:]
        return statuses

    def _fill(self) -> None:
        data = self._sock.recv(65536)
        if not data:
            raise ConnectionError("nsqd closed the connection before answering every TOUCH")
        self._buffer += data
