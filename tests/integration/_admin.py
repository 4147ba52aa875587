"""nsqadmin run in the test's own process (its ASGI app, lifespan and all, on the test's Trio
loop) and asked over an in-process transport, as from 127.0.0.1: the tests of its pages and
actions against real nsqd processes."""

from __future__ import annotations

import httpx
import trio
from nsqadmin import Options, create_app


class InProcessAdmins:
    """nsqadmin apps, each running its lifespan in ``nursery`` until ``close``."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._open: list[tuple[httpx.AsyncClient, trio.Event]] = []

    async def start(self, options: Options, **app_args: object) -> httpx.AsyncClient:
        """An app made with ``options`` (``create_app``'s other arguments in ``app_args``;
        no background sampling: pages sample when they load), started; a client of it."""
        app = create_app(options, sampling=False, **app_args)  # type: ignore[arg-type]
        ready, done = trio.Event(), trio.Event()

        async def lifespan() -> None:
            async with app.router.lifespan_context(app):
                ready.set()
                await done.wait()

        self._nursery.start_soon(lifespan)
        await ready.wait()
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        client = httpx.AsyncClient(transport=transport, base_url="http://admin.test")
        self._open.append((client, done))
        return client

    async def close(self) -> None:
        """Every client closed, every app's lifespan ended."""
        for client, done in self._open:
            await client.aclose()
            done.set()
        self._open.clear()
