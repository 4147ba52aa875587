"""Request and response helpers shared by the pages, the JSON API and basic auth.

A leaf module: it imports nothing of nsqadmin's, so every handler module can use it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from nsq_common import go_json
from starlette.requests import Request
from starlette.responses import Response

V1_HEADERS = {"X-NSQ-Content-Type": "nsq; version=1.0"}
JSON_TYPE = "application/json; charset=utf-8"


def v1_json(value: Any, status: int = 200) -> Response:
    """An answer in the Go nsqadmin's V1 JSON shape."""
    return Response(go_json(value), status_code=status, media_type=JSON_TYPE,
                    headers=V1_HEADERS)


def v1_error(status: int, message: str) -> Response:
    return v1_json({"message": message}, status)


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
