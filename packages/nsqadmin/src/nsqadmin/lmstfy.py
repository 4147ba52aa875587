"""lmstfy's job-queue APIs of the nsqd that serve them (beyond NSQ), as the Jobs pages use them.

Which nsqd serve them: each says so in its ``/info`` (``lmstfy_http_address`` and
``lmstfy_admin_http_address``, the addresses it bound, present only when served; Go's nsqd and
an nsqd without them have neither). A listener on an unspecified host (``0.0.0.0``, ``[::]``)
is reached at the host nsqadmin reaches that nsqd at. What was found is kept for
``REDISCOVER`` seconds; the sampler looks again, so the menu knows whether to show *Jobs*.

Everything else is lmstfy's own routes (nothing that only ``nsqd.dat`` knows)::

    admin listener (with --lmstfy-admin-account when the nsqd has accounts)
      GET /info                      namespaces and their queues
      GET|POST /token/:ns, DELETE /token/:ns/:token        tokens
      GET /limits, PUT|DELETE /token/:ns/:token/limit     limits
      GET /peek/:ns/:queue?count=    the jobs ready, delayed and dead (ours, beyond lmstfy)
      GET /peek/:ns/:queue/:id       a job looked up, with its tries left (ours, as /peek)
    data listener (with a token of the namespace, the first the admin API lists)
      DELETE /api/:ns/:queue/job/:id                      delete a job
      PUT|DELETE /api/:ns/:queue/deadletter?limit=&ttl=   respawn, delete dead letters
      DELETE /api/:ns/:queue                               empty the queue (lmstfy's destroy)

A queue's counts are its topic's in nsqd's ``/stats`` (``nsq_common.lmstfy_topic_name``, channel
``jobs``), which the pages fetch anyway, and whose history draws the graphs.

Errors: ``LmstfyError`` (an ``UpstreamError``) carries lmstfy's answer, ``[404] job not found``;
``NoToken`` when the data API would need a token and the namespace has none.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import httpx

from .fanout import fan_out
from .stats import Node, display_names, find_node
from .upstream import Partial, Upstream, UpstreamError

log = logging.getLogger("nsqadmin")
REDISCOVER = 30.0  # seconds a node's lmstfy listeners (or their absence) are trusted
_UNSPECIFIED = ("", "0.0.0.0", "::", "[::]")


class LmstfyError(UpstreamError):
    """lmstfy answered, but not with what was asked: its status and error text."""


class NoToken(LmstfyError):
    """The namespace has no token, which the data API's routes need."""


@attrs.frozen
class Service:
    """One nsqd's lmstfy: where its two listeners are reached."""

    node: Node
    data: str  # host:port
    admin: str  # host:port

    @property
    def name(self) -> str:
        """Its nsqd's name in URLs (``broadcast_address:http_port``)."""
        return self.node.http_address


@attrs.frozen
class Job:
    """A job as lmstfy answers it (``/peek`` adds ``delay``)."""

    job_id: str
    data: bytes
    ttl: int  # seconds left before it expires; 0: never
    elapsed_ms: int  # since it was published
    remain_tries: int
    delay: int = 0  # seconds, as published
    attributes: dict[str, str] | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Job:
        try:
            data = base64.b64decode(str(raw.get("data") or ""), validate=True)
        except (binascii.Error, ValueError):
            data = b""
        attributes = raw.get("attributes")
        return cls(job_id=str(raw.get("job_id", "")), data=data, ttl=_int(raw, "ttl"),
                   elapsed_ms=_int(raw, "elapsed_ms"), remain_tries=_int(raw, "remain_tries"),
                   delay=_int(raw, "delay"),
                   attributes={str(k): str(v) for k, v in attributes.items()}
                   if isinstance(attributes, dict) else None)

    @property
    def text(self) -> str | None:
        """The body as text, when it is UTF-8."""
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    @property
    def due_in_ms(self) -> int:
        """How long until a delayed job is ready (0: it is)."""
        return max(self.delay * 1000 - self.elapsed_ms, 0)


@attrs.frozen
class Peek:
    """The first jobs of a queue, of each kind, taken by no one."""

    ready: tuple[Job, ...] = ()
    delayed: tuple[Job, ...] = ()
    deadletter: tuple[Job, ...] = ()


@attrs.frozen
class Limit:
    """lmstfy's limiter: consumes (``read``) and publishes (``write``) per ``interval`` s."""

    read: int
    write: int
    interval: int


@attrs.frozen
class Token:
    """A namespace's token. Pages never show it whole (reading nsqadmin needs no password,
    and a token lets anyone publish and consume): ``masked``, and ``ref`` to name it in
    forms."""

    value: str
    description: str
    limit: Limit | None = None

    @property
    def ref(self) -> str:
        return token_ref(self.value)

    @property
    def masked(self) -> str:
        """Its last 4 characters (a ULID's first ones are its time, alike for all)."""
        return f"…{self.value[-4:]}" if len(self.value) > 8 else "…"


def token_ref(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def _int(raw: dict[str, Any], key: str) -> int:
    try:
        return int(raw.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def _host(address: str) -> str:
    return address.split("://", 1)[-1].rstrip("/").rpartition(":")[0]


def _reach(listener: str, node: Node) -> str | None:
    """Where to reach a listener nsqd names by the address it bound, or None if it is not
    one."""
    host, sep, port = listener.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or int(port) == 0:
        return None  # (port 0: bound to a port nsqd does not say)
    if host in _UNSPECIFIED:
        host = _host(node.address)
    return f"{host}:{port}"


@attrs.define(eq=False)
class Lmstfy:
    """Requests to every lmstfy nsqadmin knows of."""

    upstream: Upstream
    account: str = ""  # user:password for the admin APIs (--lmstfy-admin-account)
    clock: Any = time.monotonic
    _found: dict[str, tuple[Service | None, float]] = attrs.field(factory=dict, init=False)
    _nodes: list[Node] = attrs.field(factory=list, init=False)  # the last ones asked about

    @property
    def known(self) -> list[Service]:
        """The services found by the last discoveries."""
        return [s for s, _ in self._found.values() if s is not None]

    async def discover(self, nodes: Iterable[Node], *, again: bool = False
                       ) -> Partial[list[Service]]:
        """The lmstfy services of ``nodes``: asked of each nsqd not asked within
        ``REDISCOVER`` seconds (or all, ``again``); nodes that fail are errors."""
        nodes = self._nodes = list(nodes)
        now = self.clock()
        stale = [n for n in nodes if again or n.address not in self._found
                 or now - self._found[n.address][1] > REDISCOVER]

        async def ask(node: Node) -> Service | None:
            response = await self.upstream.send("GET", node.address, "/info")
            info = response.json() if response.status_code == 200 else {}
            listeners = []
            for key in ("lmstfy_http_address", "lmstfy_admin_http_address"):
                value = info.get(key, "") if isinstance(info, dict) else ""
                listeners.append(_reach(value, node) if isinstance(value, str) else None)
            data, admin = listeners
            return Service(node, data, admin) if data and admin else None

        answers, errors = await fan_out(stale, _json_errors(ask))
        for node, service in answers:
            self._found[node.address] = (service, now)
        wanted = {n.address for n in nodes}
        found = [s for address, (s, _) in self._found.items()
                 if s is not None and address in wanted]
        return Partial(sorted(found, key=lambda s: (s.node.hostname, s.name)), tuple(errors))

    def display_name(self, service: Service) -> str:
        """Its nsqd's name on the pages, among all the nodes last seen (``hostname:port``
        where two share a hostname)."""
        names = display_names(self._nodes or [service.node])
        return names.get(service.name) or display_names([service.node])[service.name]

    def find(self, name: str) -> Service | None:
        """A known service by its nsqd's name (any of them: ``stats.find_node``)."""
        known = self.known
        node = find_node([s.node for s in known], name)
        return next((s for s in known if node is not None and s.node == node), None)

    # -- the admin API ------------------------------------------------------------------------

    async def _admin(self, service: Service, method: str, path: str, *, ok: Sequence[int],
                     params: dict[str, str] | None = None, json_body: Any = None,
                     form: dict[str, str] | None = None) -> httpx.Response:
        user, _, password = self.account.partition(":")
        auth = (user, password) if self.account else None
        response = await self.upstream.send(method, service.admin, path, params, json=json_body,
                                            form=form, auth=auth)
        _expect(service.admin, method, path, response, ok)
        return response

    async def info(self, service: Service) -> dict[str, list[str]]:
        """Namespace -> its queues, as ``/info`` lists them."""
        response = await self._admin(service, "GET", "/info", ok=(200,))
        try:
            raw = json.loads(response.content or b"{}")
        except ValueError:
            raw = None
        if not isinstance(raw, dict):
            raise LmstfyError(service.admin, "GET /info: the answer is not a JSON object")
        return {str(ns): sorted(str(q) for q in queues or ()) for ns, queues in raw.items()}

    async def tokens(self, service: Service, namespace: str) -> list[Token]:
        """The namespace's tokens, with their limits."""
        listed = await self._admin(service, "GET", f"/token/{namespace}", ok=(200,))
        limits = await self._admin(service, "GET", "/limits", ok=(200,))
        found = {(str(item.get("namespace")), str(item.get("token"))): _limit(item.get("limiter"))
                 for item in _json(limits, []) if isinstance(item, dict)}
        tokens = _json(listed, {}).get("tokens") or {}
        return sorted((Token(str(t), str(d), found.get((namespace, str(t))))
                       for t, d in tokens.items()), key=lambda t: (t.description, t.value))

    async def create_token(self, service: Service, namespace: str, description: str) -> str:
        response = await self._admin(service, "POST", f"/token/{namespace}", ok=(201,),
                                     form={"description": description})
        return str(_json(response, {}).get("token", ""))

    async def delete_token(self, service: Service, namespace: str, token: str) -> None:
        await self._admin(service, "DELETE", f"/token/{namespace}/{token}", ok=(204,))

    async def set_limit(self, service: Service, namespace: str, token: str, limit: Limit
                        ) -> None:
        await self._admin(service, "PUT", f"/token/{namespace}/{token}/limit", ok=(200,),
                          json_body=attrs.asdict(limit))

    async def delete_limit(self, service: Service, namespace: str, token: str) -> None:
        await self._admin(service, "DELETE", f"/token/{namespace}/{token}/limit", ok=(200,))

    async def peek(self, service: Service, namespace: str, queue: str, count: int) -> Peek:
        response = await self._admin(service, "GET", f"/peek/{namespace}/{queue}", ok=(200,),
                                     params={"count": str(count)})
        raw = _json(response, {})

        def jobs(kind: str) -> tuple[Job, ...]:
            return tuple(Job.parse(j) for j in raw.get(kind) or () if isinstance(j, dict))

        return Peek(jobs("ready"), jobs("delayed"), jobs("deadletter"))

    async def lookup(self, service: Service, namespace: str, queue: str, job_id: str
                     ) -> Job | None:
        """The job wherever it is, with the tries it has left and its delay (nsqd's admin
        ``/peek/:ns/:queue/:job_id``: the data API's look-up answers ``remain_tries`` 0 and no
        delay), or None."""
        if not (job_id.isascii() and job_id.isalnum()):
            return None  # (not a job id: no job has it)
        response = await self._admin(service, "GET", f"/peek/{namespace}/{queue}/{job_id}",
                                     ok=(200, 404))
        if response.status_code == 404:
            if _json(response, {}).get("error") != "job not found":  # (no such route)
                _expect(service.admin, "GET", f"/peek/{namespace}/{queue}/{job_id}", response,
                        (200,))
            return None
        return Job.parse(_json(response, {}))

    # -- the data API (with a token of the namespace) ----------------------------------------

    async def _data(self, service: Service, namespace: str, method: str, path: str, *,
                    ok: Sequence[int], params: dict[str, str] | None = None) -> httpx.Response:
        tokens = await self.tokens(service, namespace)
        if not tokens:
            raise NoToken(service.data, f"namespace {namespace} has no token: create one "
                                        "to look up, respawn or delete its jobs")
        response = await self.upstream.send(method, service.data, f"/api/{namespace}{path}",
                                            params, headers={"X-Token": tokens[0].value})
        _expect(service.data, method, f"/api/{namespace}{path}", response, ok)
        return response

    async def delete_job(self, service: Service, namespace: str, queue: str, job_id: str
                         ) -> None:
        await self._data(service, namespace, "DELETE", f"/{queue}/job/{job_id}", ok=(204,))

    async def respawn(self, service: Service, namespace: str, queue: str, limit: int,
                      ttl: int) -> int:
        """The oldest ``limit`` dead letters back in the queue, one try each, a TTL of ``ttl``
        seconds (0: none); how many."""
        response = await self._data(service, namespace, "PUT", f"/{queue}/deadletter",
                                    ok=(200,), params={"limit": str(limit), "ttl": str(ttl)})
        return _int(_json(response, {}), "count")

    async def delete_dead(self, service: Service, namespace: str, queue: str, limit: int
                          ) -> None:
        await self._data(service, namespace, "DELETE", f"/{queue}/deadletter", ok=(204,),
                         params={"limit": str(limit)})

    async def dead_size(self, service: Service, namespace: str, queue: str) -> int:
        response = await self.upstream.send(
            "GET", service.data, f"/api/{namespace}/{queue}/deadletter/size")
        _expect(service.data, "GET", "/deadletter/size", response, (200,))
        return _int(_json(response, {}), "size")

    async def destroy(self, service: Service, namespace: str, queue: str) -> None:
        """lmstfy's destroy: drop the ready jobs and forget the queue (delayed, in-flight and
        dead ones stay)."""
        await self._data(service, namespace, "DELETE", f"/{queue}", ok=(204,))


def _json(response: httpx.Response, empty: Any) -> Any:
    try:
        value = response.json()
    except ValueError:
        return empty
    return value if isinstance(value, type(empty)) else empty


def _limit(raw: Any) -> Limit | None:
    if not isinstance(raw, dict):
        return None
    return Limit(_int(raw, "read"), _int(raw, "write"), _int(raw, "interval"))


def _expect(address: str, method: str, path: str, response: httpx.Response,
            ok: Sequence[int]) -> None:
    if response.status_code in ok:
        return
    text = response.text.strip()
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if isinstance(raw, dict):  # lmstfy's {"error": ...}, {"msg": ...} or {"err": ...}
        text = str(raw.get("error") or raw.get("msg") or raw.get("err") or text)
    status = response.status_code
    raise LmstfyError(address, f"{method} {path}: [{status}] {text[:300]}", status, text[:300])


def _json_errors(call: Any) -> Any:
    """``call``, with an answer that is not JSON turned into an ``UpstreamError``."""

    async def wrapped(node: Node) -> Any:
        try:
            return await call(node)
        except ValueError:
            raise UpstreamError(node.address, "GET /config: the answer is not JSON") from None

    return wrapped
