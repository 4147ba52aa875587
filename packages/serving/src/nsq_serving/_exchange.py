"""One request/answer exchange on a connection, as ``_connection`` fills it in.

``RequestState`` is a request as httptools parses it (head first, then the body, chunk by
chunk) and as the app reads it; ``ResponseState`` what the app has sent of its answer. Plain
``__slots__`` classes: one of each is made per request. ``has_close`` and
``request_target`` read two parts of a head that Starlette leaves to the server.
"""

from __future__ import annotations

from typing import Protocol

import httptools


class Peer(Protocol):
    """The connection a request came on (``_connection.Connection``)."""

    def hung_up(self) -> bool:
        """Whether the peer has closed (or reset) the connection, without reading from it."""


class RequestState:
    """One request as it is parsed: head first, then the body, chunk by chunk."""

    __slots__ = ("body", "body_done", "body_until", "complete", "connection", "disconnected",
                 "expect_continue", "has_host", "has_te", "head_done", "headers", "http_version",
                 "keep_alive", "method", "refusal", "started", "url")

    def __init__(self, connection: Peer, started: float) -> None:
        self.connection = connection
        self.started = started  # when its first byte arrived
        self.body_until: float | None = None  # the body's deadline, from the app's first read
        self.refusal = b""  # the answer instead of the app's (a head Go's net/http refuses)
        self.has_te = False
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.method = ""
        self.http_version = "1.1"
        self.keep_alive = True
        self.expect_continue = False
        self.has_host = False
        self.head_done = False
        self.body: list[bytes] = []
        self.complete = False  # the parser has seen the end of the body
        self.body_done = False  # the app has been given the end of the body
        self.disconnected = False

    def gone(self) -> bool:
        """Whether the client has closed its side (or the connection broke), asked of the
        socket without reading from it."""
        if not self.disconnected and self.connection.hung_up():
            self.disconnected = True
        return self.disconnected


class ResponseState:
    """What the app has sent of its answer so far."""

    __slots__ = ("chunked", "close", "head", "started")

    def __init__(self) -> None:
        self.started = False  # the head is written
        self.head: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self.chunked = False
        self.close = False


def has_close(value: bytes) -> bool:
    """Whether a ``Connection`` header's token list has ``close`` (any case)."""
    lowered = value.lower()
    return lowered == b"close" or b"close" in (token.strip() for token in lowered.split(b","))


def request_target(url: bytes) -> tuple[bytes, bytes]:
    """Path and query of a request target that is not a path: the absolute form proxies send
    (its path), else the target as it is (``*``, a CONNECT's ``host:port``), which no route
    has."""
    try:
        parsed = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:
        return url, b""
    if parsed.schema is None:
        return url, b""
    return parsed.path or b"/", parsed.query or b""
