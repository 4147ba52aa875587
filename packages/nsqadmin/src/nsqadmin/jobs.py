"""The Jobs pages (beyond NSQ): lmstfy's namespaces, queues, tokens and jobs, for every nsqd that
serves lmstfy's API (``nsqadmin.lmstfy`` says how each is found and asked).

``/jobs``                                  every lmstfy: its namespaces, their queues' counts
``/jobs/<node>/<namespace>``               its queues, its tokens and their limits
``/jobs/<node>/<namespace>/<queue>``       counts, graphs, the jobs ready, delayed and dead,
                                           a job looked up by id (``?job=``)

A queue's counts are its topic's channel ``jobs`` in that nsqd's ``/stats``: ready is the
channel's depth (what lmstfy's ``size`` answers), delayed its deferred jobs, then in flight and
dead letters; the rate is the topic's, from the history the sampler keeps (as are the graphs).
Admin actions post to the page, as everywhere in nsqadmin (``actions.handle``), and go to
lmstfy's own routes.
"""

from __future__ import annotations

from typing import Any

import attrs
from nsq_common import LMSTFY_CHANNEL, TopicStats, lmstfy_topic_name
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import actions, graphs
from .cluster_actions import ActionResult
from .lmstfy import Limit as TokenLimit
from .lmstfy import Service, Token
from .pages import Context, Warnings, page_path, render
from .state import Admin, admin_of
from .upstream import ClusterError, UpstreamError

PEEK_SHOWN, PEEK_MOST = 10, 100  # jobs of each kind on the queue page (``?n=``)
RESPAWN_TTL = 86400  # lmstfy's default TTL for respawned jobs


@attrs.frozen
class QueueRow:
    """One queue's counts on one nsqd."""

    namespace: str
    queue: str
    topic: str  # the NSQ topic it lives in
    ready: int = 0
    delayed: int = 0
    in_flight: int = 0
    dead: int = 0
    published: int = 0  # since that nsqd started
    paused: bool = False

    @classmethod
    def of(cls, namespace: str, queue: str, stats: dict[str, TopicStats]) -> QueueRow:
        topic = lmstfy_topic_name(namespace, queue)
        found = stats.get(topic)
        channel = found.channel(LMSTFY_CHANNEL) if found is not None else None
        if found is None or channel is None:
            return cls(namespace, queue, topic, published=found.message_count if found else 0)
        return cls(namespace, queue, topic, ready=channel.depth,
                   delayed=channel.deferred_count, in_flight=channel.in_flight_count,
                   dead=channel.dead_letter_count or 0, published=found.message_count,
                   paused=found.paused or channel.paused)


@attrs.frozen
class Section:
    """One lmstfy on the overview: its namespaces and their queues."""

    service: Service
    name: str
    namespaces: dict[str, list[QueueRow]] = attrs.field(factory=dict)


# -- loading ---------------------------------------------------------------------------------

async def _services(admin: Admin, warnings: Warnings) -> list[Service]:
    try:
        found = await admin.cluster.nodes()
    except ClusterError as exc:
        warnings.add(exc.errors)
        return []
    warnings.add(found.errors)
    services = await admin.lmstfy.discover(found.value)
    warnings.add(services.errors)
    return services.value


async def _service(admin: Admin, name: str, warnings: Warnings) -> Service | None:
    service = admin.lmstfy.find(name)
    if service is None:
        await _services(admin, warnings)
        service = admin.lmstfy.find(name)
    return service


async def _node_stats(admin: Admin, service: Service, warnings: Warnings
                      ) -> dict[str, TopicStats]:
    try:
        stats = await admin.cluster.stats([service.node], include_clients=False)
    except ClusterError as exc:
        warnings.add(exc.errors)
        return {}
    return {t.topic_name: t for t in stats.value.topics}


async def _rows(admin: Admin, service: Service, warnings: Warnings,
                only: str | None = None) -> dict[str, list[QueueRow]]:
    """Namespace -> its queues' rows (only namespace ``only``, if given)."""
    try:
        info = await admin.lmstfy.info(service)
    except UpstreamError as exc:
        warnings.add([exc])
        return {}
    stats = await _node_stats(admin, service, warnings)
    return {ns: [QueueRow.of(ns, q, stats) for q in queues]
            for ns, queues in sorted(info.items()) if only is None or ns == only}


async def load_jobs(request: Request) -> Context:
    admin = admin_of(request)
    warnings = Warnings()
    services = await _services(admin, warnings)
    sections = [Section(s, admin.lmstfy.display_name(s), await _rows(admin, s, warnings))
                for s in services]
    return {"sections": sections, "warnings": warnings}


def _missing(params: dict[str, str], warnings: Warnings) -> Context:
    return {"service": None, "warnings": warnings, "status": 404, **params}


async def load_namespace(request: Request) -> Context:
    admin = admin_of(request)
    params = dict(request.path_params)
    warnings = Warnings()
    service = await _service(admin, params["node"], warnings)
    if service is None:
        return _missing(params, warnings)
    namespace = params["namespace"]
    rows = (await _rows(admin, service, warnings, only=namespace)).get(namespace, [])
    tokens: list[Token] = []
    try:
        tokens = await admin.lmstfy.tokens(service, namespace)
    except UpstreamError as exc:
        warnings.add([exc])
    return {**params, "service": service, "rows": rows, "tokens": tokens,
            "name": admin.lmstfy.display_name(service), "warnings": warnings}


async def load_queue(request: Request) -> Context:
    admin = admin_of(request)
    params = dict(request.path_params)
    warnings = Warnings()
    raw = request.query_params.get("n", "")
    n = int(raw) if raw.isdigit() and 0 < int(raw) <= PEEK_MOST else PEEK_SHOWN
    job_id = request.query_params.get("job", "").strip()
    topic = lmstfy_topic_name(params["namespace"], params["queue"])
    context: Context = {**params, "n": n, "job_id": job_id, "topic": topic,
                        "graphs": graphs.lazily(graphs.for_queue, admin.history, params["node"],
                                                params["namespace"], params["queue"], topic,
                                                graphs.window_of(request)),
                        "respawn_ttl": RESPAWN_TTL, "warnings": warnings}
    service = await _service(admin, params["node"], warnings)
    if service is None:
        return {**context, **_missing(params, warnings)}
    namespace, queue = params["namespace"], params["queue"]
    stats = await _node_stats(admin, service, warnings)
    context.update(service=service, name=admin.lmstfy.display_name(service),
                   row=QueueRow.of(namespace, queue, stats), rate=admin.history.rate(topic))
    try:
        context["peek"] = await admin.lmstfy.peek(service, namespace, queue, n)
    except UpstreamError as exc:
        warnings.add([exc])
    if job_id:
        try:
            context["found"] = await admin.lmstfy.lookup(service, namespace, queue, job_id)
            context["looked_up"] = True
        except UpstreamError as exc:
            context["lookup_error"] = exc.message
    here = page_path("queue", params)
    context["live_url"] = admin.path(f"{here}?n={n}" + (f"&job={job_id}" if job_id else ""))
    return context


# -- actions ---------------------------------------------------------------------------------

@attrs.frozen
class JobPlan:
    """An action on a namespace or a queue of one lmstfy (``actions.Planned``)."""

    verb: str
    service: Service
    namespace: str
    queue: str = ""
    landing: str = ""
    job_id: str = ""
    token: Token | None = None
    description: str = ""
    limit: int = 1  # jobs (respawn, delete_dead)
    ttl: int = RESPAWN_TTL  # respawn
    rate_limit: TokenLimit | None = None  # set_limit

    @property
    def destructive(self) -> bool:
        return self.verb in ("delete_token", "delete_dead", "empty_dead", "delete_job",
                             "destroy")

    @property
    def action(self) -> str:
        return _ACTIONS[self.verb]

    @property
    def subject(self) -> str:
        queue = f"{self.namespace}/{self.queue}"
        token = f"token {self.token.masked} ({self.token.description})" if self.token else ""
        return {"respawn": f"the dead letters of {queue}",
                "delete_dead": f"the oldest {self.limit} dead letters of {queue}",
                "empty_dead": f"the dead letters of {queue}",
                "delete_job": f"job {self.job_id} of {queue}",
                "destroy": f"the ready jobs of {queue}",
                "create_token": f"a token of namespace {self.namespace}",
                "delete_token": f"{token} of namespace {self.namespace}",
                "set_limit": f"the limit of {token} of namespace {self.namespace}",
                "delete_limit": f"the limit of {token} of namespace {self.namespace}"
                }[self.verb]

    @property
    def question(self) -> str:
        queue = f"{self.namespace}/{self.queue}"
        return {"delete_token": f"Delete {self.subject}? Clients using it are refused from "
                                "then on.",
                "delete_dead": f"Delete the oldest {self.limit} dead letters of {queue}? "
                               "They are lost.",
                "empty_dead": f"Delete every dead letter of {queue}? They are lost.",
                "delete_job": f"Delete job {self.job_id} of {queue}? It is lost.",
                "destroy": f"Empty queue {queue}? Its ready jobs are lost (delayed, in-flight "
                           "and dead ones stay), and /info forgets it."}.get(self.verb, "")


_ACTIONS = {"respawn": "respawn_jobs", "delete_dead": "delete_dead_jobs",
            "empty_dead": "empty_dead_jobs", "delete_job": "delete_job",
            "destroy": "destroy_queue", "create_token": "create_token",
            "delete_token": "delete_token", "set_limit": "set_limit",
            "delete_limit": "delete_limit"}
_VERBS = {"namespace": {"create_token", "delete_token", "set_limit", "delete_limit"},
          "queue": {"respawn", "delete_dead", "empty_dead", "delete_job", "destroy"}}


def _count(form: dict[str, str], name: str, default: int, low: int, high: int) -> int | None:
    text = form.get(name, "")
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        return None
    return int(text)


async def _plan(admin: Admin, page: str, params: dict[str, str], form: dict[str, str]
                ) -> JobPlan | str:
    verb = form.get("action", "")
    if verb not in _VERBS.get(page, set()):
        return f"Unknown action {verb!r}."
    warnings = Warnings()
    service = await _service(admin, params["node"], warnings)
    if service is None:
        return f"No nsqd called {params['node']} serves lmstfy's API."
    namespace, queue = params["namespace"], params.get("queue", "")
    here = admin.path(page_path(page, params))
    plan = JobPlan(verb, service, namespace, queue, here)
    if verb in ("respawn", "delete_dead"):
        limit = _count(form, "limit", 1, 1, 1 << 62)
        ttl = _count(form, "ttl", RESPAWN_TTL, 0, 1 << 62)
        if limit is None or ttl is None:
            return "The limit must be a whole number from 1 up, the TTL from 0 up."
        return attrs.evolve(plan, limit=limit, ttl=ttl)
    if verb == "delete_job":
        job_id = form.get("job_id", "")
        if not job_id:
            return "Which job to delete is missing."
        return attrs.evolve(plan, job_id=job_id)
    if verb == "create_token":
        description = form.get("description", "")
        if not description:
            return "A token needs a description (what it is for)."
        return attrs.evolve(plan, description=description)
    if verb in ("delete_token", "set_limit", "delete_limit"):
        try:
            tokens = await admin.lmstfy.tokens(service, namespace)
        except UpstreamError as exc:
            return f"Could not list the tokens of namespace {namespace}: {exc}"
        token = next((t for t in tokens if t.ref == form.get("token", "")), None)
        if token is None:
            return "That token is not there any more."
        plan = attrs.evolve(plan, token=token)
        if verb == "set_limit":
            values = [_count(form, k, 0, 0, 1 << 31) for k in ("read", "write", "interval")]
            read, write, interval = values
            if read is None or write is None or interval is None or interval == 0 or not (
                    read or write):
                return ("A limit is a number of consumes (read) and publishes (write), one "
                        "of them above 0, per interval of 1 second or more.")
            return attrs.evolve(plan, rate_limit=TokenLimit(read, write, interval))
    return plan


async def _perform(admin: Admin, plan: JobPlan, request: Request) -> ActionResult:
    lmstfy, service = admin.lmstfy, plan.service
    ns, queue = plan.namespace, plan.queue
    outcome, address = "", service.data
    try:
        if plan.verb == "respawn":
            count = await lmstfy.respawn(service, ns, queue, plan.limit, plan.ttl)
            outcome = f"{count} job{'' if count == 1 else 's'} back in the queue."
        elif plan.verb == "delete_dead":
            await lmstfy.delete_dead(service, ns, queue, plan.limit)
        elif plan.verb == "empty_dead":
            size = await lmstfy.dead_size(service, ns, queue)
            if size:
                await lmstfy.delete_dead(service, ns, queue, size)
            outcome = f"{size} deleted."
        elif plan.verb == "delete_job":
            await lmstfy.delete_job(service, ns, queue, plan.job_id)
        elif plan.verb == "destroy":
            await lmstfy.destroy(service, ns, queue)
        else:
            address = service.admin
            token = plan.token.value if plan.token else ""
            if plan.verb == "create_token":
                created = await lmstfy.create_token(service, ns, plan.description)
                outcome = (f"The new token is {created} : copy it now, pages show tokens only "
                           "in part.")
            elif plan.verb == "delete_token":
                await lmstfy.delete_token(service, ns, token)
            elif plan.verb == "set_limit" and plan.rate_limit is not None:
                await lmstfy.set_limit(service, ns, token, plan.rate_limit)
                limit = plan.rate_limit
                outcome = (f"Now {limit.read} consumes and {limit.write} publishes per "
                           f"{limit.interval} s (0: unlimited).")
            elif plan.verb == "delete_limit":
                await lmstfy.delete_limit(service, ns, token)
    except UpstreamError as exc:
        return ActionResult(plan.action, errors=(exc,))
    admin.notifier.notify(plan.action, lmstfy_topic_name(ns, queue) if queue else ns,
                          LMSTFY_CHANNEL if queue else "", service.name, request)
    return ActionResult(plan.action, (address,), outcome=outcome)


# -- pages and routes -------------------------------------------------------------------------

def _page(name: str, loader: Any) -> Any:
    async def endpoint(request: Request) -> Response:
        if request.method == "POST":
            return await actions.handle(request, name, lambda: loader(request), _plan,
                                        _perform)
        context = await loader(request)
        return render(request, name, context, status=context.pop("status", 200))

    endpoint.__name__ = f"{name}_page"
    return endpoint


def routes() -> list[Route]:
    both = ["GET", "POST"]
    return [
        Route("/jobs", _page("jobs", load_jobs), methods=["GET"]),
        Route("/jobs/{node}/{namespace}", _page("namespace", load_namespace), methods=both),
        Route("/jobs/{node}/{namespace}/{queue}", _page("queue", load_queue), methods=both),
    ]

