"""HttpGate: a subclass's refusal answers in the app's place; a request it lets through, and
anything but HTTP, reaches the app, with what the gate added to the scope."""

from __future__ import annotations

import httpx
from nsq_serving import HttpGate
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Scope


def key_required(app: ASGIApp, key: str) -> HttpGate:
    async def refusal(scope: Scope) -> Response | None:
        if Request(scope).headers.get("x-key") != key:
            return PlainTextResponse("no", status_code=403)
        scope["gate.checked"] = True
        return None

    return HttpGate(app, refusal)


async def echo(request: Request) -> Response:
    return PlainTextResponse(f"app saw checked={request.scope.get('gate.checked')}")


def client(app: ASGIApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g.test")


async def test_refused_and_let_through() -> None:
    app = key_required(Starlette(routes=[Route("/", echo)]), key="k")
    async with client(app) as http:
        refused = await http.get("/")
        passed = await http.get("/", headers={"x-key": "k"})
    assert (refused.status_code, refused.text) == (403, "no")
    assert (passed.status_code, passed.text) == (200, "app saw checked=True")


async def test_anything_but_http_goes_to_the_app_unchecked() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: object, send: object) -> None:
        seen.append(scope["type"])

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        pass

    await key_required(app, key="k")({"type": "lifespan"}, receive, send)
    assert seen == ["lifespan"]
