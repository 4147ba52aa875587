"""Request and response helpers shared by the pages, the JSON API and basic auth.

A leaf module: it imports nothing of nsqadmin's, so every handler module can use it. NSQ's V1
answers (``v1_json``, ``v1_error``) are nsq_serving's, the same for every daemon.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from nsq_serving import v1_error, v1_json
from starlette.requests import Request

__all__ = ["is_api_path", "is_htmx", "same_origin", "v1_error", "v1_json"]


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
