"""lmstfy's data API (``/api/...``) as a Starlette app, answered as lmstfy answers: its
status codes, its error texts and JSON keys (sorted, as gin writes a map), and a fresh
``X-Request-ID`` on every answer.

Routes have names and queues in their paths, so ``Routes`` resolves a path to its endpoints
for nsq_serving to call directly, and each endpoint reads its names from the path itself
(``_parts``); the Starlette routes below are the same endpoints for any other ASGI server.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import Exiting, StoreFailed
from . import ids, names
from .queues import JobQueues, job_json
from .state import State
from .throttle import Throttle

Endpoint = Callable[[Request], Awaitable[Response]]
JSON_TYPE = "application/json; charset=utf-8"
MAX_JOB = 1 << 20  # bytes (lmstfy's code; its docs still say 64 KiB)
MAX_BULK = 64
MAX_COUNT = 100
MAX_ATTRIBUTES = 16
DEFAULT_TTL, DEFAULT_TTR = 86400, 120
UINT32, UINT16 = (1 << 32) - 1, (1 << 16) - 1


class Refusal(Exception):
    """An answer other than success: ``status`` and its JSON body (``None``: no body)."""

    def __init__(self, status: int, body: dict[str, Any] | None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def refuse(status: int, text: str) -> Refusal:
    return Refusal(status, {"error": text})


def answer(status: int, body: Any = None, *, indent: bool = False) -> Response:
    headers = {"X-Request-ID": ids.encode_ulid(ids.new_ulid())}
    if body is None:
        return Response(b"", status, headers=headers)
    text = json.dumps(body, sort_keys=True, separators=None if indent else (",", ":"),
                      indent=4 if indent else None)
    return Response(text.encode(), status, headers=headers, media_type=JSON_TYPE)


def _uint(query: dict[str, str], key: str, default: int, most: int, error: str) -> int:
    text = query.get(key)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) > most:
        raise refuse(400, error)
    return int(text)


def _int64(query: dict[str, str], key: str, default: int, error: str) -> int:
    text = query.get(key)
    if text is None:
        return default
    digits = text[1:] if text[:1] in "+-" else text
    if not (digits.isascii() and digits.isdigit()) or not -(1 << 63) <= int(text) < 1 << 63:
        raise refuse(400, error)
    return int(text)


def query_params(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in parse_qsl(request.scope["query_string"].decode("latin-1"),
                                keep_blank_values=True):
        out.setdefault(key, value)
    return out


def _parts(request: Request) -> list[str]:
    """The path's segments after ``/api``: namespace, queue, then the rest."""
    path: str = request.scope["path"]
    return path.split("/")[2:]


def _attributes(request: Request) -> bytes | None:
    """A version 1 job's attributes from ``Job-Attr-*`` headers (None: a version 0 job)."""
    if request.headers.get("enable-job-version", "").upper() != "YES":
        return None
    found: dict[str, str] = {}
    for raw_name, raw_value in request.headers.raw:
        name = raw_name.decode("latin-1")
        if name.lower().startswith("job-attr-") and raw_value:
            key = name[9:].encode()[:32].decode("utf-8", "ignore").lower()
            found.setdefault(key, raw_value[:128].decode("utf-8", "ignore"))
    if len(found) > MAX_ATTRIBUTES:
        raise refuse(400, f"too many attributes, cannot exceed {MAX_ATTRIBUTES}")
    return json.dumps(found, separators=(",", ":"), sort_keys=True).encode()


async def _body(request: Request, most: int | None) -> bytes:
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if most is not None and size > most:
                raise refuse(413, "body too large")
            chunks.append(chunk)
    except OSError:
        raise refuse(400, "failed to read body") from None
    return b"".join(chunks)


class DataApi:
    def __init__(self, queues: JobQueues, state: State, throttle: Throttle) -> None:
        self.queues = queues
        self.state = state
        self.throttle = throttle

    # -- the middleware chain, in lmstfy's order ---------------------------------------------
    def _queue(self, request: Request) -> tuple[str, str, list[str]]:
        parts = _parts(request)
        namespace, queue = parts[0], parts[1]
        problem = names.name_error(namespace, queue)
        if problem:
            raise refuse(400, problem)
        return namespace, queue, parts[2:]

    def _token(self, request: Request, namespace: str, *, check: bool = True) -> str:
        token = request.headers.get("x-token", "") or query_params(request).get("token", "")
        pool, _, bare = token.partition(":") if ":" in token else ("default", "", token)
        if pool not in ("", "default"):
            raise refuse(404, "pool not found")
        if not check:
            return bare
        if not bare:
            raise refuse(401, "token not found")
        if not self.state.token_valid(namespace, bare):
            raise refuse(401, "invalid token")
        return bare

    def _throttled(self, namespace: str, token: str, action: str) -> None:
        if not self.throttle.take(namespace, token, action):
            raise Refusal(429, {"msg": f"token({token}) {action} reach the limit rate, "
                                       "please retry later"})

    # -- publishing ----------------------------------------------------------------------------
    async def publish(self, request: Request) -> Response:
        namespace, queue, rest = self._queue(request)
        token = self._token(request, namespace)
        if rest:  # republish: the old job goes first, whatever follows
            await self._ack(namespace, queue, rest[1])
        else:
            self._throttled(namespace, token, "produce")
        try:
            return await self._publish(request, namespace, queue, bulk=False)
        except BaseException:
            if not rest:
                self.throttle.give_back(namespace, token, "produce")
            raise

    async def publish_bulk(self, request: Request) -> Response:
        namespace, queue, _ = self._queue(request)
        token = self._token(request, namespace)
        self._throttled(namespace, token, "produce")
        try:
            return await self._publish(request, namespace, queue, bulk=True)
        except BaseException:
            self.throttle.give_back(namespace, token, "produce")
            raise

    async def _publish(self, request: Request, namespace: str, queue: str, *, bulk: bool
                       ) -> Response:
        q = query_params(request)
        delay = _uint(q, "delay", 0, UINT32, "invalid delay")
        ttl = _uint(q, "ttl", DEFAULT_TTL, UINT32, "invalid ttl")
        if ttl and ttl < delay:
            raise refuse(400, "ttl is shorter than delay")
        tries = _uint(q, "tries", 1, UINT16, "invalid tries")
        if tries == 0:
            raise refuse(400, "tries shouldn't be zero")
        body = await _body(request, None if bulk else MAX_JOB)
        bodies = _bulk_jobs(body) if bulk else [body]
        attributes = _attributes(request)
        try:
            job_ids = await self.queues.publish(namespace, queue, bodies, delay=delay, ttl=ttl,
                                                tries=tries, attributes=attributes)
        except (Exiting, StoreFailed):
            raise refuse(500, "internal error") from None
        if bulk:
            return answer(201, {"msg": "published", "job_ids": job_ids})
        return answer(201, {"msg": "published", "job_id": job_ids[0]})

    # -- consuming -----------------------------------------------------------------------------
    async def consume(self, request: Request) -> Response:
        parts = _parts(request)
        namespace, queue_list = parts[0], parts[1]
        problem = names.queue_list_error(namespace, queue_list)
        if problem:
            raise refuse(400, problem)
        token = self._token(request, namespace)
        self._throttled(namespace, token, "consume")
        served = False
        try:
            q = query_params(request)
            ttr = _uint(q, "ttr", DEFAULT_TTR, UINT32, "invalid ttr")
            timeout = _uint(q, "timeout", 0, UINT32, "invalid timeout")
            count = _uint(q, "count", 1, UINT32, "invalid count")
            if not 1 <= count <= MAX_COUNT:
                raise refuse(400, "invalid count")
            queues = [name for name in queue_list.split(",") if name]
            if not queues:
                raise refuse(400, "invalid queue name(s)")
            taken = await self.queues.take(namespace, queues, count, ttr)
            if not taken and timeout:
                with trio.move_on_after(timeout):
                    while not taken:
                        await self.queues.wait(namespace, queues)
                        taken = await self.queues.take(namespace, queues, 1, ttr)
            if not taken:
                raise Refusal(404, {"msg": "no job available"})
            served = True
        finally:
            if not served:
                self.throttle.give_back(namespace, token, "consume")
        now_ns = self.queues.broker.clock.wall_ns()
        jobs = [{"msg": "new job", **job_json(namespace, t.queue, t.msg, now_ns)} for t in taken]
        return answer(200, jobs if count > 1 else jobs[0])

    async def job(self, request: Request) -> Response:
        """``/job/:id``: GET peeks at it, DELETE acknowledges it."""
        namespace, queue, rest = self._queue(request)
        self._token(request, namespace)
        job_id = rest[1]
        if request.method == "DELETE":
            await self._ack(namespace, queue, job_id)
            return answer(204)
        msg = await self.queues.find(namespace, queue, job_id)
        if msg is None:
            raise refuse(404, "job not found")
        channel = self.queues.channel(namespace, queue)
        dead = channel is not None and self.queues.is_dead(channel, msg)
        return answer(200, job_json(namespace, queue, msg, self._now(), remain_tries=0,
                                    dead=dead))

    async def _ack(self, namespace: str, queue: str, job_id: str) -> None:
        try:
            await self.queues.ack(namespace, queue, job_id)
        except (Exiting, StoreFailed):
            raise refuse(500, "internal error") from None

    def _now(self) -> int:
        return self.queues.broker.clock.wall_ns()

    async def peek(self, request: Request) -> Response:
        namespace, queue, _ = self._queue(request)
        self._token(request, namespace)
        head = self.queues.peek(namespace, queue)
        if head is None:
            raise refuse(404, "the queue is empty")
        msg, stale = head
        return answer(200, job_json(namespace, queue, msg, self._now(), stale=stale))

    async def size(self, request: Request) -> Response:
        namespace, queue, _ = self._queue(request)
        self._token(request, namespace, check=False)
        return answer(200, {"namespace": namespace, "queue": queue,
                            "size": self.queues.size(namespace, queue)})

    async def destroy(self, request: Request) -> Response:
        namespace, queue, _ = self._queue(request)
        self._token(request, namespace)
        try:
            await self.queues.destroy(namespace, queue)
        except (Exiting, StoreFailed):
            raise refuse(500, "internal error") from None
        return answer(204)

    # -- dead letters -------------------------------------------------------------------------
    async def dead_letter(self, request: Request) -> Response:
        namespace, queue, _ = self._queue(request)
        self._token(request, namespace)
        q = query_params(request)
        if request.method == "GET":
            size, head = self.queues.dead_letter_head(namespace, queue)
            head_id = "" if head is None else job_json(namespace, queue, head, 0)["job_id"]
            return answer(200, {"namespace": namespace, "queue": queue,
                                "deadletter_size": size, "deadletter_head": head_id})
        limit = _int64(q, "limit", 1, "invalid limit")
        if limit <= 0:
            raise refuse(400, "invalid limit")
        if request.method == "PUT":
            ttl = _int64(q, "ttl", DEFAULT_TTL, "invalid ttl")
            if ttl < 0:
                raise refuse(400, "invalid ttl")
            count = await self.queues.respawn(namespace, queue, limit, ttl)
            return answer(200, {"msg": "respawned", "count": count})
        await self.queues.delete_dead(namespace, queue, limit)
        return answer(204)

    async def dead_letter_size(self, request: Request) -> Response:
        namespace, queue, _ = self._queue(request)
        self._token(request, namespace, check=False)
        size, _ = self.queues.dead_letter_head(namespace, queue)
        return answer(200, {"namespace": namespace, "queue": queue, "size": size})


def _bulk_jobs(body: bytes) -> list[bytes]:
    """The raw JSON text of each element of the array (each one job's body, verbatim)."""
    try:
        items = json.loads(body)
    except ValueError:
        items = None
    if not isinstance(items, list):
        raise refuse(400, "request body should be an array of objects")
    if not items:
        raise refuse(400, "no jobs")
    if len(items) > MAX_BULK:
        raise refuse(400, "too many jobs")
    raw = _raw_elements(body.decode("utf-8", "replace"), len(items))
    if any(len(job) > MAX_JOB for job in raw):
        raise refuse(413, "job too large")
    return raw


def _raw_elements(text: str, count: int) -> list[bytes]:
    """Split a JSON array's text into its elements' texts (already known to be valid)."""
    decoder = json.JSONDecoder()
    out: list[bytes] = []
    pos = text.index("[") + 1
    for _ in range(count):
        while text[pos] in " \t\r\n,":
            pos += 1
        _, end = decoder.raw_decode(text, pos)
        out.append(text[pos:end].encode())
        pos = end
    return out


class Routes(Mapping[str, Mapping[str, Endpoint]]):
    """path -> method -> endpoint for nsq_serving's direct calls: resolved by the path's
    shape (``/api/<ns>/<queue>[/...]``), not looked up."""

    def __init__(self, api: DataApi) -> None:
        self.shapes: dict[tuple[int, str], dict[str, Endpoint]] = {
            (2, ""): {"PUT": api.publish, "GET": api.consume, "DELETE": api.destroy},
            (3, "bulk"): {"PUT": api.publish_bulk},
            (3, "peek"): {"GET": api.peek},
            (3, "size"): {"GET": api.size},
            (3, "deadletter"): {"GET": api.dead_letter, "PUT": api.dead_letter,
                                "DELETE": api.dead_letter},
            (4, "deadletter/size"): {"GET": api.dead_letter_size},
            (4, "job"): {"PUT": api.publish, "GET": api.job, "DELETE": api.job},
        }

    def __getitem__(self, path: str) -> Mapping[str, Endpoint]:
        parts = path.split("/")
        if len(parts) < 4 or parts[0] or parts[1] != "api" or not parts[2] or not parts[3]:
            raise KeyError(path)
        rest = parts[4:]
        if len(rest) == 2 and rest[0] == "job":
            key = (4, "job") if rest[1] else (0, "")
        else:
            key = (2 + len(rest), "/".join(rest))
        try:
            return self.shapes[key]
        except KeyError:
            raise KeyError(path) from None

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def build_data_app(queues: JobQueues, state: State, throttle: Throttle) -> Starlette:
    api = DataApi(queues, state, throttle)
    routes = Routes(api)

    async def dispatch(request: Request) -> Response:
        try:
            endpoint = routes[request.scope["path"]].get(request.method)
        except KeyError:
            endpoint = None
        if endpoint is None:
            raise refuse(404, "api not found")
        return await endpoint(request)

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refusal)
        return answer(exc.status, exc.body)

    async def not_found(request: Request, exc: Exception) -> Response:
        return answer(404, {"error": "api not found"})

    methods = ["GET", "PUT", "DELETE", "POST", "HEAD", "PATCH", "OPTIONS"]
    app = Starlette(routes=[Route("/api/{path:path}", dispatch, methods=methods)],
                    exception_handlers={Refusal: refused, HTTPException: not_found})
    app.state.endpoints = routes
    return app
