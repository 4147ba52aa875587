"""The ASGI lifespan protocol: an app's startup before the first request, its shutdown after
the last.

The app's lifespan task runs shielded from the cancellation that stops the server, so that
its shutdown code (closing clients, stopping its own tasks) runs in full; it is cancelled only
if it has not finished ``SHUTDOWN_TIMEOUT`` seconds after being asked to shut down. An app
that does not speak the protocol (it raises on a lifespan scope before its startup completes)
is served without it, as uvicorn and Hypercorn do by default.
"""

from __future__ import annotations

import logging
import math
from types import TracebackType
from typing import Any

import trio

log = logging.getLogger("nsq_serving")

SHUTDOWN_TIMEOUT = 10.0
_FINISHED = {"type": "lifespan.finished"}  # ours: the app's lifespan call has returned


class Lifespan:
    """``async with Lifespan(app):`` runs the app's startup on entry and shutdown on exit.

    Raises:
        RuntimeError: on entry, when the app reports that its startup failed.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._requests_send, self._requests = trio.open_memory_channel[dict[str, Any]](1)
        self._replies_send, self._replies = trio.open_memory_channel[dict[str, Any]](math.inf)
        self._nursery_manager = trio.open_nursery()
        self._shield = trio.CancelScope(shield=True)
        self._running = False

    async def __aenter__(self) -> Lifespan:
        nursery = await self._nursery_manager.__aenter__()
        self._running = True
        nursery.start_soon(self._run)
        await self._requests_send.send({"type": "lifespan.startup"})
        reply = await self._replies.receive()
        if reply["type"] == "lifespan.startup.failed":
            await self._stop()
            await self._nursery_manager.__aexit__(None, None, None)
            raise RuntimeError(f"ASGI lifespan startup failed: {reply.get('message', '')}")
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        await self._stop()
        return await self._nursery_manager.__aexit__(kind, exc, tb)

    async def _stop(self) -> None:
        with trio.CancelScope(shield=True) as waiting:
            waiting.deadline = trio.current_time() + SHUTDOWN_TIMEOUT
            if self._running:
                await self._requests_send.send({"type": "lifespan.shutdown"})
                reply = await self._replies.receive()
                if reply["type"] == "lifespan.shutdown.failed":
                    log.error("ASGI lifespan shutdown failed: %s", reply.get("message", ""))
        self._shield.cancel()

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                 "state": {}}
        started = False

        async def send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "lifespan.startup.complete"
            self._replies_send.send_nowait(message)

        with self._shield:
            try:
                await self.app(scope, self._requests.receive, send)
            except Exception:
                if started:
                    log.exception("the app's ASGI lifespan failed")
                else:
                    log.debug("the app does not support the ASGI lifespan", exc_info=True)
            finally:
                self._running = False
                self._replies_send.send_nowait(_FINISHED)
