"""NSQ's HTTP answers (Go's ``internal/http_api``), built once for every daemon, and the one
error a handler raises to answer otherwise.

- A "V1" answer carries ``X-NSQ-Content-Type: nsq; version=1.0``: an object is compact JSON in
  Go's field order (``v1_json``), a plain value is text (``v1_text``), nothing is an empty body
  (``V1_EMPTY``), an error is ``{"message":"<TEXT>"}`` with its status (``v1_error``).
- A "plain" answer (``/ping``) is bare text without that header (``plain_text``).
- ``HttpError(status, text)`` raised by a handler becomes the router's error answer:
  ``v1_error`` for NSQ's daemons, the shape of lmstfy's JSON for its apps (``Router``'s
  ``error`` argument).

Answers built from constants (``V1_EMPTY``, ``v1_text("OK")`` kept by the caller) may be
returned many times: the server only reads them.
"""

from __future__ import annotations

from typing import Any

from nsq_common import JSON_CONTENT_TYPE, TEXT_CONTENT_TYPE, error_json, go_json, v1_headers
from starlette.responses import Response

_V1 = v1_headers()


class HttpError(Exception):
    """An answer other than success: ``status`` and the text the router's error answer shows
    (NSQ's ``{"message": text}``, lmstfy's ``{"error": text}``); ``body``, when given, is the
    whole JSON value instead (lmstfy's few answers of another shape)."""

    def __init__(self, status: int, text: str = "", *, body: Any = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(text or status)
        self.status = status
        self.text = text
        self.body = body
        self.headers = headers

    def copy(self) -> HttpError:
        """The same answer as a new exception (one kept as a constant is raised as a copy,
        so that no traceback or context is shared between requests)."""
        return HttpError(self.status, self.text, body=self.body, headers=self.headers)


def v1_json(value: Any, status: int = 200) -> Response:
    """An object (or list) as NSQ's compact JSON, in Go's field order."""
    return Response(go_json(value), status, _V1, media_type=JSON_CONTENT_TYPE)


def v1_json_bytes(body: bytes, status: int = 200) -> Response:
    """JSON already encoded (an answer kept between requests)."""
    return Response(body, status, _V1, media_type=JSON_CONTENT_TYPE)


def v1_text(text: str | bytes, status: int = 200) -> Response:
    """A plain value: its text, as Go's ``http_api.Respond`` writes a string."""
    return Response(text, status, _V1, media_type=TEXT_CONTENT_TYPE)


def v1_error(status: int, text: str) -> Response:
    """NSQ's error: ``{"message":"<TEXT>"}`` with ``status``."""
    return Response(error_json(text), status, _V1, media_type=JSON_CONTENT_TYPE)


def plain_text(text: str | bytes, status: int = 200) -> Response:
    """Bare text without NSQ's V1 header (``/ping``, pprof's)."""
    return Response(text, status, media_type=TEXT_CONTENT_TYPE)


#: An empty 200 V1 answer (topic and channel actions).
V1_EMPTY = Response(b"", 200, _V1)
