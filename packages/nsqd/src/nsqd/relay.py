"""Requests only a replicated topic's leader answers, relayed to it over HTTP from the node
that took them (docs/design/replication.md, "Forwarding"): lmstfy's data API (``lmstfy.api``)
and NSQ's routes that change a channel's holdings outside delivery (``http_api``).

The request goes as it came (method, path, query, body, headers but the hop's own) to the
leader's listener with ``X-NSQ-Forwarded-By``, and the leader's answer comes back as it is
(status, body, and its headers but the hop's own). A forwarded request is never forwarded
again: a node that takes one for a topic it does not lead answers 503
``LEADER_UNAVAILABLE`` (the leader changed meanwhile: to be sent again), as it does when no
leader is seen within ``LEADER_WITHIN`` or the leader cannot be reached. Without
``--etcd-endpoints``, or for a topic that is not placed or is led here, nothing of this runs
but an attribute test and a dict lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from nsq_serving import HttpError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from .errors import NsqdError
from .replicas import FORWARDED

if TYPE_CHECKING:
    import httpx

    from .broker import Broker

log = logging.getLogger("nsqd")
Endpoint = Callable[[Request], Awaitable[Response]]

#: seconds a leader has to answer a relayed request (beyond a long poll's own wait)
RELAY_TIMEOUT = 30.0
#: seconds a request waits for its topic's leader to be known (a failover under way)
LEADER_WITHIN = 10.0
#: the hop's own headers, not relayed either way
_HOP = frozenset({b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding",
                  b"te", b"upgrade", b"proxy-connection", b"expect",
                  FORWARDED.lower().encode()})
_HOP_ANSWER = frozenset({"content-length", "connection", "keep-alive", "transfer-encoding",
                         "date", "server", "content-encoding"})


class Relay:
    """The relaying of one listener's requests (``listener``: ``"http"`` or ``"lmstfy"``)."""

    def __init__(self, broker: Broker, listener: str, *, keep: bool = True) -> None:
        self.broker = broker
        self.listener = listener
        self.keep = keep  # one pool of connections to the leaders (False: one per request)
        self._client: httpx.AsyncClient | None = None

    def forwarded(self, request: Request) -> bool:
        return any(key == _FORWARDED_KEY for key, _ in request.scope["headers"])

    def leader_url(self, topic: str) -> str | None:
        """None: answered here (no cluster, the topic not placed, or led here)."""
        cluster = self.broker.replication
        return None if cluster is None else cluster.leader_url(topic, self.listener)

    async def leader_of(self, topic: str, *, forwarded: bool) -> str | None:
        """``leader_url``, waiting up to ``LEADER_WITHIN`` for a leader to be known; a
        forwarded request for a topic not led here is refused (one hop only)."""
        url = self.leader_url(topic)
        if url is None:
            return None
        if forwarded:
            raise HttpError(503, "LEADER_UNAVAILABLE")
        if url == "":
            url = await self._leader_seen(topic, self.broker.now() + LEADER_WITHIN)
            if url is None:
                return None  # it leads here now
        if not url:
            raise HttpError(503, "LEADER_UNAVAILABLE")
        return url

    async def answered(self, topic: str, request: Request, local: Endpoint,
                       read: Callable[[Request], Awaitable[bytes]], *, path: str | None = None,
                       wait: float = 0.0) -> Response:
        """``request`` answered by ``local`` when ``topic`` is not placed or is led here, else
        by its leader (``relay``; ``read``: its body). A leader that cannot be connected to
        (killed: nothing was sent to it) is looked for again as the view changes, up to
        ``LEADER_WITHIN``: a new leader elsewhere is sent the request, one here answers it
        (``local``)."""
        url = await self.leader_of(topic, forwarded=self.forwarded(request))
        if url is None:
            return await local(request)
        body = await read(request)
        deadline = self.broker.now() + LEADER_WITHIN
        while True:
            try:
                return await self.relay(url, request, body, path=path, wait=wait)
            except Unreachable:
                pass
            found = await self._leader_seen(topic, deadline)
            if found is None:  # led here now
                return await local(replayed(request, body))
            if not found:
                raise HttpError(503, "LEADER_UNAVAILABLE")
            url = found

    async def _leader_seen(self, topic: str, deadline: float) -> str | None:
        """``leader_url`` once a change of the view shows the topic's leader: its url, None
        when it is led here now; "" when none is seen by ``deadline`` (the broker's clock) or
        the cluster is gone."""
        url: str | None = ""
        with trio.move_on_at(deadline):
            while url == "":
                cluster = self.broker.replication
                if cluster is None:
                    break
                await cluster.changed()
                url = self.leader_url(topic)
        return url

    async def relay(self, url: str, request: Request, body: bytes, *, path: str | None = None,
                    wait: float = 0.0) -> Response:
        """``request`` sent to ``url`` (the leader's listener), its answer given back
        (``path``: another path than the request's; ``wait``: seconds the leader may hold
        it beyond ``RELAY_TIMEOUT``, a long poll's)."""
        import httpx

        client = self._client
        if client is None:
            client = httpx.AsyncClient(trust_env=False)
            if self.keep:
                self._client = client
        try:
            return await self._relay(client, url, request, body, path, wait)
        finally:
            if not self.keep:
                with trio.CancelScope(shield=True):
                    await client.aclose()

    async def _relay(self, client: httpx.AsyncClient, url: str, request: Request, body: bytes,
                     path: str | None, wait: float) -> Response:
        import httpx

        scope = request.scope
        headers = [(key, value) for key, value in scope["headers"] if key not in _HOP]
        headers.append((_FORWARDED_KEY, self.node.encode()))
        target = url + (path if path is not None else scope["path"])
        query = scope["query_string"]
        if query:
            target += "?" + query.decode("latin-1")
        try:
            answer = await client.request(
                scope["method"], target, content=body or None, headers=headers,
                timeout=RELAY_TIMEOUT + wait)
        except httpx.ConnectError as exc:  # (nothing sent: it may go to another leader)
            log.warning("replication: %s %s not forwarded to %s: %s",
                        scope["method"], scope["path"], url, exc)
            raise Unreachable from None
        except httpx.HTTPError as exc:
            log.warning("replication: %s %s not forwarded to %s: %s",
                        scope["method"], scope["path"], url, exc)
            raise HttpError(503, "LEADER_UNAVAILABLE") from None
        kept = {key: value for key, value in answer.headers.items()
                if key.lower() not in _HOP_ANSWER}
        return Response(answer.content, answer.status_code, headers=kept)

    @property
    def node(self) -> str:
        cluster = self.broker.replication
        return cluster.node if cluster is not None else ""

    async def aclose(self) -> None:
        if self._client is not None:
            with trio.CancelScope(shield=True):
                await self._client.aclose()
            self._client = None


_FORWARDED_KEY = FORWARDED.lower().encode()


class Unreachable(NsqdError):
    """The leader could not be connected to: nothing of the request was sent."""


def replayed(request: Request, body: bytes) -> Request:
    """``request`` with its body, already read, to be read again."""
    given = False

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await request.receive()

    return Request(request.scope, receive)
