"""Request and response helpers shared by the pages, the JSON API and basic auth.

A leaf module: it imports nothing of nsqadmin's, so every handler module can use it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from nsq_common import JSON_CONTENT_TYPE, error_json, go_json, v1_headers
from starlette.requests import Request
from starlette.responses import Response

_V1_HEADERS = v1_headers()  # NSQ's HTTP V1 conventions: nsq_common._httpv1


def v1_json(value: Any, status: int = 200) -> Response:
    """An answer in the Go nsqadmin's V1 JSON shape."""
    return Response(go_json(value), status_code=status, media_type=JSON_CONTENT_TYPE,
                    headers=_V1_HEADERS)


def v1_error(status: int, message: str) -> Response:
    """A V1 error: ``{"message":"<TEXT>"}`` with ``status``."""
    return Response(error_json(message), status_code=status, media_type=JSON_CONTENT_TYPE,
                    headers=_V1_HEADERS)


def is_api_path(path: str) -> bool:
    """Whether an error on ``path`` is answered in JSON (the API and ``/config``)."""
    return "/api/" in path or "/config/" in path


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from nsqadmin's own pages."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return False
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")
