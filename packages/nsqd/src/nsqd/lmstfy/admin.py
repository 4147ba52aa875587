"""lmstfy's admin API: tokens, rate limits, the queue list, version and metrics; and (beyond
lmstfy) ``/peek/:namespace/:queue`` (and ``/:job_id``), the jobs of a queue (and one job) for
nsqadmin's Jobs pages, and ``/openapi.json``, the description of both lmstfy APIs (``openapi``).

Basic auth (``--lmstfy-admin-account user:password``) guards what lmstfy guards when accounts
are configured: the token and limit routes and ``POST /accesslog``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl

from nsq_common import NSQ_VERSION
from nsq_serving import HttpError, Router
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.requests import Request
from starlette.responses import Response

from ..message import Job, QueuedMessage
from . import ids, names, openapi
from .api import answer, gin_conventions, log_bug, query_params, refuse, translate
from .limiter_json import decode_limiter
from .queues import JobQueues, job_json
from .state import Limit, State
from .throttle import Throttle

MIN_USER_TOKEN = 20
PEEK_DEFAULT, PEEK_MOST = 10, 100  # jobs of each kind /peek shows


class Admin:
    def __init__(self, queues: JobQueues, state: State, throttle: Throttle,
                 accounts: dict[str, str]) -> None:
        self.queues = queues
        self.state = state
        self.throttle = throttle
        self.accounts = accounts
        self.access_log = False
        self.registry = CollectorRegistry()
        self.registry.register(_JobCollector(queues))

    def _authorized(self, request: Request) -> None:
        if not self.accounts:
            return
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        try:
            user, _, password = base64.b64decode(encoded).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user, password = "", ""
        known = self.accounts.get(user)
        if scheme.lower() != "basic" or known is None or not hmac.compare_digest(
                known.encode(), password.encode()):
            raise HttpError(401, headers={"WWW-Authenticate": 'Basic realm="Authorization Required"'})

    # -- tokens ------------------------------------------------------------------------------
    async def tokens(self, request: Request) -> Response:
        self._authorized(request)
        namespace = request.path_params["namespace"]
        q = query_params(request)
        pool = q.get("pool", "")
        if pool not in ("", "default"):
            raise refuse(400, "the pool was not exists")
        if request.method == "GET":
            tokens = self.state.tokens.get(namespace, {})
            prefix = f"{pool}:" if "pool" in q else ""
            return answer(200, {"tokens": {prefix + t: d for t, d in tokens.items()}},
                          indent=True)
        form = {**q, **await _form(request)}
        description = form.get("description", "")
        if not description:
            raise refuse(400, "invalid description")
        token = form.get("token", "")
        if token:
            if len(token) < MIN_USER_TOKEN:
                raise refuse(400, "the user token was too short")
            if token.count(":") == 1:
                pool, token = token.split(":")
                if pool not in ("", "default"):
                    raise refuse(400, "the pool was not exists")
        else:
            now_ms = self.queues.broker.clock.wall_ns() // 1_000_000
            token = ids.encode_ulid(ids.new_ulid(now_ms))
        if len(namespace) > names.MAX_NAME:
            raise refuse(400, "the namespace name was too long")
        if not names.valid_namespace(namespace):
            raise refuse(400, "namespace name contains forbidden characters")
        tokens = self.state.tokens.setdefault(namespace, {})
        if token in tokens:
            raise refuse(400, "the token has already existed")
        tokens[token] = description
        await self.state.save()
        return answer(201, {"token": token}, indent=True)

    async def delete_token(self, request: Request) -> Response:
        self._authorized(request)
        namespace, token = request.path_params["namespace"], request.path_params["token"]
        if ":" in token:
            pool, token = token.split(":", 1)
            if pool not in ("", "default"):
                raise refuse(400, "the pool was not exists")
        self.state.tokens.get(namespace, {}).pop(token, None)
        self.state.limits.pop((namespace, token), None)
        self.throttle.forget(namespace, token)
        await self.state.save()
        return answer(204)

    # -- limits ------------------------------------------------------------------------------
    async def limit(self, request: Request) -> Response:
        self._authorized(request)
        namespace, token = request.path_params["namespace"], request.path_params["token"]
        token = token.split(":", 1)[1] if ":" in token else token
        key = (namespace, token)
        current = self.state.limits.get(key)
        if request.method == "GET":
            if current is None:
                return Response(b"null", 404, media_type="application/json; charset=utf-8",
                                headers={"X-Request-ID": ids.request_id()})
            return answer(200, current.to_json())
        if request.method == "DELETE":
            if self.state.limits.pop(key, None) is not None:
                self.throttle.forget(namespace, token)
                await self.state.save()
            return answer(200, {"msg": "success"})
        limit = Limit(*decode_limiter(await request.body()))
        if limit.read == 0 and limit.write == 0:
            raise HttpError(400, body={"limiter": limit.to_json()})
        if limit.interval == 0:
            raise refuse(400, "interval should be > 0")
        if limit.interval < 0:
            raise refuse(500, "limiter interval should be > 0")
        if limit.read <= 0 and limit.write <= 0:
            raise refuse(500, "the read and write of limiter can't be <= 0 at the same time")
        if request.method == "POST" and current is not None:
            raise refuse(500, f"throttler token({token}) has already exists")
        self.state.set_limit(key, limit)
        self.throttle.forget(namespace, token)
        await self.state.save()
        return answer(201 if request.method == "POST" else 200, {"limiter": limit.to_json()})

    async def limits(self, request: Request) -> Response:
        self._authorized(request)
        return answer(200, [{"namespace": ns, "token": token, "limiter": limit.to_json()}
                            for (ns, token), limit in self.state.limits.items()])

    # -- a look at a queue's jobs (beyond lmstfy: nsqadmin's Jobs pages) --------------------
    def _queue_looked_at(self, request: Request) -> tuple[str, str]:
        """The namespace and queue of a ``/peek`` route, for a caller allowed to look (400
        with lmstfy's words for a name it refuses)."""
        self._authorized(request)
        namespace, queue = request.path_params["namespace"], request.path_params["queue"]
        problem = names.name_error(namespace, queue)
        if problem:
            raise refuse(400, problem)
        return namespace, queue

    async def peek(self, request: Request) -> Response:
        """``GET /peek/:namespace/:queue?count=``: up to ``count`` (10; 1 to 100) jobs ready,
        delayed and dead, each as the data API's peek answers a job (plus its ``delay``),
        taken by no one and changing nothing. Guarded as the token routes are: it shows job
        data, which the data API shows only for a token."""
        namespace, queue = self._queue_looked_at(request)
        text = query_params(request).get("count", str(PEEK_DEFAULT))
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= PEEK_MOST:
            raise refuse(400, "invalid count")
        count = int(text)
        ready: list[QueuedMessage] = []
        delayed: list[QueuedMessage] = []
        dead: list[QueuedMessage] = []
        clock = self.queues.broker.clock
        channel = self.queues.channel(namespace, queue)
        if channel is not None:
            await channel.fetch()  # what a consume would read next, from disk if need be
        now_ns = clock.wall_ns()
        if channel is not None:
            ready = channel.peek(count, clock.now())
            delayed = channel.peek_delayed(count, now_ns)  # (delayed jobs are deferred)
            if channel.dead_letter_count:
                dead = channel.dead_letters.peek(count)

        def jobs(msgs: Sequence[QueuedMessage], *, is_dead: bool = False
                 ) -> list[dict[str, object]]:
            return [{**job_json(namespace, queue, m, now_ns, dead=is_dead),
                     "delay": m.delay if isinstance(m, Job) else 0} for m in msgs]

        return answer(200, {"namespace": namespace, "queue": queue, "ready": jobs(ready),
                            "delayed": jobs(delayed), "deadletter": jobs(dead, is_dead=True)})

    async def job(self, request: Request) -> Response:
        """``GET /peek/:namespace/:queue/:job_id``: one job wherever it is (delayed, ready, in
        flight, dead) as ``/peek`` shows a job, with the tries it has left and its delay, which
        the data API's look-up does not say (lmstfy answers ``remain_tries`` 0 there); 404
        ``job not found`` as the data API. Guarded as ``/peek``."""
        namespace, queue = self._queue_looked_at(request)
        msg = await self.queues.find(namespace, queue, request.path_params["job_id"])
        if msg is None:
            raise refuse(404, "job not found")
        channel = self.queues.channel(namespace, queue)
        dead = channel is not None and self.queues.is_dead(channel, msg)
        now_ns = self.queues.broker.clock.wall_ns()
        return answer(200, {**job_json(namespace, queue, msg, now_ns, dead=dead),
                            "delay": msg.delay if isinstance(msg, Job) else 0})

    # -- the rest ----------------------------------------------------------------------------
    async def info(self, request: Request) -> Response:
        pool = query_params(request).get("pool", "")
        if pool not in ("", "default"):
            return Response(b"", 200)
        return Response(json.dumps(self.state.queues, indent=4).encode(), 200)

    async def version(self, request: Request) -> Response:
        return answer(200, {"build_commit": "unknown", "build_date": "unknown",
                            "version": NSQ_VERSION}, indent=True)

    async def pools(self, request: Request) -> Response:
        return answer(200, ["default"])

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), 200,
                        media_type=CONTENT_TYPE_LATEST)

    async def access_log_state(self, request: Request) -> Response:
        if request.method == "POST":
            self._authorized(request)
            status = query_params(request).get("status")
            if status not in ("enable", "disable"):
                raise refuse(400, "invalid status")
            self.access_log = status == "enable"
        return answer(200, {"status": "enabled" if self.access_log else "disabled"})


async def _form(request: Request) -> dict[str, str]:
    if "application/x-www-form-urlencoded" not in request.headers.get("content-type", ""):
        return {}
    return dict(parse_qsl((await request.body()).decode("utf-8", "replace")))


class _JobCollector(Collector):
    """Queue sizes read at scrape time, under lmstfy's metric names (``pool`` is always
    ``default``: one nsqd is one pool)."""

    def __init__(self, queues: JobQueues) -> None:
        self.queues = queues

    def collect(self) -> Iterator[Any]:
        labels = ["pool", "namespace", "queue"]
        sizes = GaugeMetricFamily("infra_lmstfy_redis_queue_sizes",
                                  "jobs ready in each queue", labels=labels)
        delayed = GaugeMetricFamily("infra_lmstfy_redis_timer_sizes",
                                    "jobs delayed or in flight in each queue", labels=labels)
        dead = GaugeMetricFamily("infra_lmstfy_redis_deadletter_sizes",
                                 "jobs in each queue's dead letter", labels=labels)
        published = CounterMetricFamily("infra_lmstfy_redis_publish_queue_jobs",
                                        "jobs published to each queue", labels=labels)
        state, broker = self.queues.state, self.queues.broker
        for namespace, queues in sorted(state.queues.items()):
            for queue in queues:
                channel = self.queues.channel(namespace, queue)
                topic = broker.topics.get(names.topic_name(namespace, queue))
                values = ["default", namespace, queue]
                sizes.add_metric(values, channel.depth if channel else 0)
                delayed.add_metric(values, channel.held_count if channel else 0)
                dead.add_metric(values, channel.dead_letter_count if channel else 0)
                published.add_metric(values, topic.message_count if topic else 0)
        yield from (sizes, delayed, dead, published)


def build_admin_app(queues: JobQueues, state: State, throttle: Throttle,
                    accounts: dict[str, str]) -> Router:
    """lmstfy's admin API as a ``Router`` (gin's conventions; an unknown route is gin's
    plain ``404 page not found``, with lmstfy's ``X-Request-ID`` as every answer)."""
    admin = Admin(queues, state, throttle, accounts)
    router = Router(gin_conventions(HttpError(404, body=b"404 page not found")),
                    error_log=log_bug, translate=translate)
    description = json.dumps(openapi.document()).encode()

    async def openapi_json(request: Request) -> Response:
        return Response(description, 200, media_type="application/json")

    for method, path, endpoint in (
        ("GET", "/openapi.json", openapi_json),
        ("GET", "/info", admin.info), ("GET", "/version", admin.version),
        ("GET", "/metrics", admin.metrics), ("GET", "/pools", admin.pools),
        ("GET", "/limits", admin.limits), ("GET", "/peek/:namespace/:queue", admin.peek),
        ("GET", "/peek/:namespace/:queue/:job_id", admin.job),
        ("GET", "/accesslog", admin.access_log_state),
        ("POST", "/accesslog", admin.access_log_state),
        ("GET", "/token/:namespace", admin.tokens), ("POST", "/token/:namespace", admin.tokens),
        ("DELETE", "/token/:namespace/:token", admin.delete_token),
        ("GET", "/token/:namespace/:token/limit", admin.limit),
        ("POST", "/token/:namespace/:token/limit", admin.limit),
        ("PUT", "/token/:namespace/:token/limit", admin.limit),
        ("DELETE", "/token/:namespace/:token/limit", admin.limit),
    ):
        router.add(method, path, endpoint, logged=False)
    return router
