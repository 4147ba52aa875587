"""lmstfy's data API (``/api/...``), answered as lmstfy answers: its status codes, its error
texts and JSON keys (sorted, as gin writes a map), and a fresh ``X-Request-ID`` on every answer
but a redirect.

The routes are lmstfy's, on nsq_serving's ``Router`` with gin's conventions (``GIN``): a
``:name`` may be empty but the last (``PUT /api//q`` is lmstfy's 400 on the namespace), a
trailing slash redirects where httprouter's tree recommends it (``GET /api/ns/q/peek/``: 301
for GET, 307 otherwise, ``Location`` the path; ``PUT /api/ns/q/`` or ``GET /api/ns`` are no
redirect but lmstfy's 404), a method a path does not have is a 404, like an unknown path:
``{"error":"api not found"}``. Every refusal is an ``HttpError``
(``refuse``), answered in lmstfy's JSON; a bug is a 500 ``{"error":"internal error"}``, never
plain text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

import trio
from nsq_serving import Conventions, HttpError, Router, client_gone, read_body, while_connected
from starlette.requests import Request
from starlette.responses import Response

from ..errors import Exiting, StoreFailed
from . import ids, names
from .leaders import Leaders
from .queues import JobQueues, consumed_job_text, job_json
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
#: Most (namespace, queue) pairs remembered as checked names (then forgotten all at once).
GOOD_NAMES = 4096


log = logging.getLogger("nsqd")


def refuse(status: int, text: str) -> HttpError:
    """lmstfy's usual refusal: ``{"error": text}`` with ``status``."""
    return HttpError(status, text)


def error_answer(exc: HttpError) -> Response:
    """An ``HttpError`` in lmstfy's JSON: its ``body``, else ``{"error": text}``, else none;
    a ``body`` of bytes goes as it is, as text (gin's answers written without a type)."""
    if isinstance(exc.body, bytes):
        response = Response(exc.body, exc.status, media_type="text/plain; charset=utf-8",
                            headers={"X-Request-ID": ids.request_id()})
    else:
        body = exc.body if exc.body is not None else ({"error": exc.text} if exc.text else None)
        response = answer(exc.status, body)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


def translate(exc: Exception) -> HttpError | None:
    """nsqd's errors as lmstfy answers them (``nsqd.errors``); None for a bug."""
    if isinstance(exc, Exiting):
        return HttpError(503, "exiting")
    if isinstance(exc, StoreFailed):
        return HttpError(500, "internal error")
    return None


def log_bug(line: str, exc: BaseException) -> None:
    log.error("lmstfy: %s", line, exc_info=exc)


def gin_conventions(not_found: HttpError) -> Conventions:
    """gin's defaults, as lmstfy 1.0.10 runs it (its gin of 2017; 1.6 answers the same): no 405
    (a 404), no OPTIONS, no fixed-path redirects, empty ``:name`` segments taken but the last."""
    return Conventions(error=error_answer, not_found=not_found, method_not_allowed=None,
                       internal_error=HttpError(500, "internal error"), options=False,
                       fixed_path=False, empty_params=True)


class Answer(Response):
    """A ``Response`` made from its parts: the same head Starlette's would have (the
    request id, ``content-length`` unless a 204, ``content-type`` for a body), without its
    per-answer header building."""

    def __init__(self, status: int, content: bytes, content_type: bytes | None) -> None:
        self.status_code = status
        self.body = content
        self.background = None
        headers = [(b"x-request-id", ids.request_id().encode("ascii"))]
        if status >= 200 and status not in (204, 304):
            headers.append((b"content-length", b"%d" % len(content)))
        if content_type is not None:
            headers.append((b"content-type", content_type))
        self.raw_headers = headers


_JSON_TYPE = JSON_TYPE.encode("ascii")
_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_INDENTED = json.JSONEncoder(sort_keys=True, indent=4)


def answer(status: int, body: Any = None, *, indent: bool = False) -> Response:
    """lmstfy's answer: ``body`` as gin writes JSON (keys sorted; compact, or indented as its
    ``IndentedJSON``), none for None; a fresh ``X-Request-ID``."""
    if body is None:
        return Answer(status, b"", None)
    text = (_INDENTED if indent else _COMPACT).encode(body)
    return Answer(status, text.encode(), _JSON_TYPE)


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
    """The query as gin's ``c.Query`` reads it: the first value of each key. A query with
    nothing to unescape (the usual ``token=...&delay=...``) is split without ``parse_qsl``'s
    work, to the same result."""
    query = request.scope["query_string"]
    if not query:
        return {}
    out: dict[str, str] = {}
    text = query.decode("latin-1")
    if "%" in text or "+" in text:
        for key, value in parse_qsl(text, keep_blank_values=True):
            out.setdefault(key, value)
        return out
    for pair in text.split("&"):
        if pair:
            key, _, value = pair.partition("=")
            out.setdefault(key, value)
    return out


def header(request: Request, name: bytes) -> str | None:
    """The first value of the header ``name`` (lower case), as Starlette's ``headers.get``
    gives it, without building its ``Headers``."""
    headers: list[tuple[bytes, bytes]] = request.scope["headers"]
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def _attributes(request: Request) -> bytes | None:
    """A version 1 job's attributes from ``Job-Attr-*`` headers (None: a version 0 job)."""
    if (header(request, b"enable-job-version") or "").upper() != "YES":
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


#: lmstfy reads a bulk body whole and then looks at each job; a bound is kept here: more than
#: this cannot be MAX_BULK jobs within MAX_JOB each.
MAX_BULK_BODY = MAX_BULK * (MAX_JOB + 1) + 2


_TOO_LARGE = HttpError(413, "body too large")
_UNREADABLE = HttpError(400, "failed to read body")


async def _body(request: Request, most: int) -> bytes:
    """The whole body: lmstfy's 413 "body too large" over ``most`` (by the declared length,
    before a byte is read or ``100 Continue`` sent), its 400 "failed to read body" for one
    that ends early or cannot be parsed."""
    return await read_body(request, most, too_large=_TOO_LARGE, unreadable=_UNREADABLE)


class DataApi:
    def __init__(self, queues: JobQueues, state: State, throttle: Throttle) -> None:
        self.queues = queues
        self.state = state
        self.throttle = throttle
        self._good_names: set[tuple[str, str]] = set()  # pairs whose names were checked

    # -- the middleware chain, in lmstfy's order ---------------------------------------------
    def _queue(self, request: Request) -> tuple[str, str, str | None]:
        """The namespace, queue and job id (None: none in the route) of the path, checked
        as lmstfy's ValidateParams does."""
        params = request.path_params
        namespace, queue = params["namespace"], params["queue"]
        if (namespace, queue) not in self._good_names:
            problem = names.name_error(namespace, queue)
            if problem:
                raise refuse(400, problem)
            if len(self._good_names) >= GOOD_NAMES:
                self._good_names.clear()
            self._good_names.add((namespace, queue))
        return namespace, queue, params.get("job_id")

    def _token(self, request: Request, namespace: str, query: dict[str, str] | None = None,
               *, check: bool = True) -> str:
        """The request's token (``X-Token``, else the query's ``token``: ``query`` when the
        caller has it parsed), checked against ``namespace`` unless ``check`` is false."""
        token = header(request, b"x-token") or (
            query_params(request) if query is None else query).get("token", "")
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
            raise HttpError(429, body={"msg": f"token({token}) {action} reach the limit rate, "
                                              "please retry later"})

    # -- publishing ----------------------------------------------------------------------------
    async def publish(self, request: Request) -> Response:
        namespace, queue, job_id = self._queue(request)
        query = query_params(request)
        token = self._token(request, namespace, query)
        if job_id is not None:  # republish: the old job goes first, whatever follows
            await self._ack(namespace, queue, job_id)
        else:
            self._throttled(namespace, token, "produce")
        try:
            return await self._publish(request, query, namespace, queue, bulk=False)
        except BaseException:
            if job_id is None:
                self.throttle.give_back(namespace, token, "produce")
            raise

    async def publish_bulk(self, request: Request) -> Response:
        namespace, queue, _ = self._queue(request)
        query = query_params(request)
        token = self._token(request, namespace, query)
        self._throttled(namespace, token, "produce")
        try:
            return await self._publish(request, query, namespace, queue, bulk=True)
        except BaseException:
            self.throttle.give_back(namespace, token, "produce")
            raise

    async def _publish(self, request: Request, q: dict[str, str], namespace: str, queue: str,
                       *, bulk: bool) -> Response:
        delay = _uint(q, "delay", 0, UINT32, "invalid delay")
        ttl = _uint(q, "ttl", DEFAULT_TTL, UINT32, "invalid ttl")
        if ttl and ttl < delay:
            raise refuse(400, "ttl is shorter than delay")
        tries = _uint(q, "tries", 1, UINT16, "invalid tries")
        if tries == 0:
            raise refuse(400, "tries shouldn't be zero")
        body = await _body(request, MAX_BULK_BODY if bulk else MAX_JOB)
        bodies = _bulk_jobs(body) if bulk else [body]
        attributes = _attributes(request)
        job_ids = await self.queues.publish(namespace, queue, bodies, delay=delay, ttl=ttl,
                                            tries=tries, attributes=attributes)
        # job ids are Crockford base32 (and a version digit): nothing in them needs escaping,
        # so the answer is written as the encoder would write its dict
        if bulk:
            ids_text = '","'.join(job_ids)
            text = f'{{"job_ids":["{ids_text}"],"msg":"published"}}'
        else:
            text = f'{{"job_id":"{job_ids[0]}","msg":"published"}}'
        return Answer(201, text.encode(), _JSON_TYPE)

    # -- consuming -----------------------------------------------------------------------------
    async def consume(self, request: Request) -> Response:
        namespace, queue_list = request.path_params["namespace"], request.path_params["queue"]
        problem = names.queue_list_error(namespace, queue_list)
        if problem:
            raise refuse(400, problem)
        q = query_params(request)
        token = self._token(request, namespace, q)
        self._throttled(namespace, token, "consume")
        served = False
        try:
            ttr = _uint(q, "ttr", DEFAULT_TTR, UINT32, "invalid ttr")
            timeout = _uint(q, "timeout", 0, UINT32, "invalid timeout")
            count = _uint(q, "count", 1, UINT32, "invalid count")
            if not 1 <= count <= MAX_COUNT:
                raise refuse(400, "invalid count")
            queues = [name for name in queue_list.split(",") if name]
            if not queues:
                raise refuse(400, "invalid queue name(s)")
            # a client that has gone takes nothing: asked before the first take, then the
            # wait ends when it goes, and it is asked once more before each take after a wait
            taken = [] if client_gone(request) else await self.queues.take(
                namespace, queues, count, ttr)
            if not taken and timeout:
                async with while_connected(request):
                    with trio.move_on_after(timeout):
                        while not taken:
                            await self.queues.wait(namespace, queues)
                            if client_gone(request):
                                break
                            taken = await self.queues.take(namespace, queues, 1, ttr)
            if not taken:
                raise HttpError(404, body={"msg": "no job available"})
            served = True
        finally:
            if not served:
                self.throttle.give_back(namespace, token, "consume")
        now_ns = self.queues.broker.clock.wall_ns()
        jobs = [consumed_job_text(namespace, t.queue, t.msg, now_ns) for t in taken]
        text = "[" + ",".join(jobs) + "]" if count > 1 else jobs[0]
        return Answer(200, text.encode(), _JSON_TYPE)

    async def job(self, request: Request) -> Response:
        """``/job/:id``: GET peeks at it, DELETE acknowledges it."""
        namespace, queue, job_id = self._queue(request)
        self._token(request, namespace)
        assert job_id is not None
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
        head = await self.queues.peek(namespace, queue)
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
        q = query_params(request)
        self._token(request, namespace, q)
        if request.method == "GET":
            size, head = await self.queues.dead_letter_head(namespace, queue)
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
        size = self.queues.dead_letter_size(namespace, queue)
        return answer(200, {"namespace": namespace, "queue": queue, "size": size})


def _bulk_jobs(body: bytes) -> list[bytes]:
    """The raw JSON text of each element of the array (each one job's body, verbatim)."""
    try:
        items = json.loads(body)
    except ValueError:
        items = False
    if items is not None and not isinstance(items, list):
        raise refuse(400, "request body should be an array of objects")
    if not items:  # (``null`` is no jobs, as Go decodes it into a nil slice)
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


def build_data_app(queues: JobQueues, state: State, throttle: Throttle,
                   leaders: Leaders | None = None) -> Router:
    """lmstfy's data API as a ``Router`` (``serve_http`` calls its routes directly); with
    ``leaders``, a queue led by another node is answered by it (``lmstfy.leaders``)."""
    api = DataApi(queues, state, throttle)

    def checked(request: Request) -> str:
        namespace = api._queue(request)[0]
        return api._token(request, namespace)

    router = Router(gin_conventions(HttpError(404, "api not found")), error_log=log_bug,
                    translate=translate)
    routes: list[tuple[str, str, Endpoint]] = [
        ("PUT", "", api.publish), ("PUT", "/bulk", api.publish_bulk),
        ("PUT", "/job/:job_id", api.publish), ("GET", "/peek", api.peek),
        ("GET", "/job/:job_id", api.job), ("DELETE", "/job/:job_id", api.job),
        ("DELETE", "", api.destroy), ("GET", "", api.consume),
        ("GET", "/deadletter", api.dead_letter), ("PUT", "/deadletter", api.dead_letter),
        ("DELETE", "/deadletter", api.dead_letter), ("GET", "/size", api.size),
        ("GET", "/deadletter/size", api.dead_letter_size),
    ]
    for method, tail, endpoint in routes:
        if leaders is not None:
            if endpoint == api.consume:
                endpoint = leaders.consume_route(endpoint)
            else:
                endpoint = leaders.queue_route(
                    endpoint, publish=endpoint in (api.publish, api.publish_bulk),
                    check=checked)
        router.add(method, "/api/:namespace/:queue" + tail, endpoint, logged=False)
    return router
