"""``read_body``: a request's whole body within a limit, its failures as the caller's errors.

A body over the limit is refused by its declared ``Content-Length`` before a byte of it is
read (so ``Expect: 100-continue`` gets the refusal instead of ``100 Continue``), or as soon as
more than the limit has arrived (chunked). A body that ends early (the client went away) or
cannot be parsed (a bad chunk size) is the caller's ``unreadable`` error: one answer, no
traceback, as Go's handlers answer a failed ``io.ReadAll``.
"""

from __future__ import annotations

from starlette.requests import Request

from ._answers import HttpError


def declared_length(request: Request) -> int | None:
    """The request's ``Content-Length``, None when it has none (chunked, or no body)."""
    for name, value in request.scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def read_body(request: Request, limit: int, *, too_large: HttpError,
                    unreadable: HttpError) -> bytes:
    """The whole body of ``request``.

    Raises:
        HttpError: ``too_large`` for a body over ``limit`` bytes, ``unreadable`` for one that
            ends early or cannot be parsed.
    """
    length = declared_length(request)
    if length is not None and length > limit:
        raise too_large.copy()
    chunks = []
    total = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise unreadable.copy()
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            raise too_large.copy()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
