"""Admin-action notifications to ``--notification-http-endpoint`` (cf. the Go nsqadmin's
notify.go): one JSON POST per action, sent by a background task so an action never waits on
the endpoint.

The body, field for field as the Go nsqadmin sends it (``channel``, ``node`` and ``user``
left out when empty)::

    {"action":"pause_channel","topic":"t","channel":"c","timestamp":1700000000,
     "user":"alice","remote_ip":"10.0.0.1:51234","user_agent":"...",
     "url":"http://admin:4171/api/topics/t/c","via":"admin-host"}
"""

from __future__ import annotations

import base64
import binascii
import logging
import socket
import time
from typing import Any

import attrs
import httpx
import trio
from nsq_common import go_json, join_host_port
from starlette.requests import Request

log = logging.getLogger("nsqadmin")


def basic_auth_user(request: Request) -> str:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme != "Basic":
        return ""
    try:
        user, sep, _ = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return ""
    return user if sep else ""


def action_body(action: str, topic: str, channel: str, node: str, request: Request,
                now: float | None = None) -> dict[str, Any]:
    scheme = request.url.scheme
    if request.headers.get("x-scheme") == "https":
        scheme = "https"
    host = request.headers.get("host", request.url.netloc)
    url = f"{scheme}://{host}{request.url.path}"
    if request.url.query:
        url += f"?{request.url.query}"
    client = request.client
    body: dict[str, Any] = {"action": action, "topic": topic}
    if channel:
        body["channel"] = channel
    if node:
        body["node"] = node
    body["timestamp"] = int(time.time() if now is None else now)
    user = basic_auth_user(request)
    if user:
        body["user"] = user
    body["remote_ip"] = join_host_port(client.host, client.port) if client else ""
    body["user_agent"] = request.headers.get("user-agent", "")
    body["url"] = url
    body["via"] = socket.gethostname()
    return body


@attrs.define(eq=False)
class Notifier:
    """Queues notifications; ``run`` POSTs them one by one until cancelled."""

    endpoint: str
    client: httpx.AsyncClient
    _send: trio.MemorySendChannel[dict[str, Any]] = attrs.field(init=False)
    _receive: trio.MemoryReceiveChannel[dict[str, Any]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel(256)

    def notify(self, action: str, topic: str, channel: str, node: str, request: Request) -> None:
        if not self.endpoint:
            return
        try:
            self._send.send_nowait(action_body(action, topic, channel, node, request))
        except trio.WouldBlock:
            log.error("dropped %s notification: too many waiting to be sent", action)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        task_status.started()
        async for body in self._receive:
            log.info("POSTing notification to %s", self.endpoint)
            try:
                response = await self.client.post(
                    self.endpoint, content=go_json(body),
                    headers={"Content-Type": "application/json"})
                if response.status_code >= 400:
                    log.error("notification endpoint answered %d", response.status_code)
            except httpx.HTTPError as exc:
                log.error("failed to POST notification - %s", exc)
