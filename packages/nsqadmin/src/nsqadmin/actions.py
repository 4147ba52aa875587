"""Admin actions posted by the pages' forms, with and without JavaScript.

A form POSTs ``action`` (and ``topic``/``channel``/``node`` where the URL does not say them)
to the page it sits on. Destructive actions (empty, delete, tombstone) need ``confirm=yes``:
with htmx the browser asks first (``hx-confirm``) and sends it; without JavaScript the server
answers with a confirmation page whose button sends it.

After the action:

* htmx, same page: the page's ``#live`` region re-rendered, plus the report swapped into
  ``#report`` out of band;
* htmx, another page (after a delete): ``HX-Redirect`` there, the report in a flash cookie;
* plain form: ``303 See Other`` to the page (Post/Redirect/Get), the report in a flash cookie
  that the next full page shows once.

Forms from another origin are refused (``Origin`` / ``Sec-Fetch-Site``), as are users that
``--admin-user`` does not name.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import attrs
from nsq_common import is_valid_channel_name, is_valid_topic_name
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .cluster import ActionResult
from .formatting import path_segment
from .upstream import ClusterError

if TYPE_CHECKING:
    from .app import Admin

FLASH_COOKIE = "nsqadmin_flash"
MAX_FORM = 16 * 1024
DESTRUCTIVE = {"empty", "delete", "tombstone", "empty_dead_letters"}
PHRASES = {
    "create_topic": "Created topic", "create_channel": "Created channel",
    "delete_topic": "Deleted topic", "delete_channel": "Deleted channel",
    "pause_topic": "Paused topic", "unpause_topic": "Unpaused topic",
    "pause_channel": "Paused channel", "unpause_channel": "Unpaused channel",
    "empty_topic": "Emptied topic", "empty_channel": "Emptied channel",
    "tombstone_topic_producer": "Tombstoned topic",
    "respawn_dead_letters": "Respawned", "empty_dead_letters": "Emptied",
}
DEAD_LETTER_VERBS = {"respawn_dead_letters", "empty_dead_letters"}  # beyond NSQ


@attrs.frozen
class Report:
    """What an action did, shown once above the page."""

    action: str
    subject: str
    done: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()
    problem: str = ""

    @classmethod
    def of(cls, result: ActionResult, subject: str) -> Report:
        """The report of ``result``; a daemon asked twice (lookupd on create) counts once."""
        return cls(result.action, subject, tuple(dict.fromkeys(result.done)),
                   tuple((e.address, e.message) for e in result.errors))

    @property
    def level(self) -> str:
        if self.problem or (self.errors and not self.done):
            return "error"
        return "warning" if self.errors else "ok"

    @property
    def headline(self) -> str:
        if self.problem:
            return self.problem
        phrase = PHRASES.get(self.action, self.action)
        if not self.done and not self.errors:
            return f"{phrase} {self.subject}: no daemon hosts it, nothing to do."
        failed = {address for address, _ in self.errors}
        if not self.done:
            return f"Could not {self.verb} {self.subject}: {_daemons(len(failed))} failed."
        if not self.errors:
            return f"{phrase} {self.subject} on {_daemons(len(self.done))}."
        return (f"{phrase} {self.subject} on {_daemons(len(self.done))}; "
                f"failed on {_daemons(len(failed))}.")

    @property
    def verb(self) -> str:
        return self.action.split("_", 1)[0]

    def encode(self) -> str:
        raw = {"a": self.action, "s": self.subject, "d": list(self.done)[:20],
               "e": [[a, m[:300]] for a, m in self.errors[:10]], "p": self.problem}
        # no "=" padding: cookie values with "=" get quoted
        return base64.urlsafe_b64encode(json.dumps(raw).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Report | None:
        try:
            raw = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            return cls(str(raw["a"]), str(raw["s"]), tuple(map(str, raw["d"])),
                       tuple((str(a), str(m)) for a, m in raw["e"]), str(raw["p"]))
        except (ValueError, KeyError, TypeError, binascii.Error):
            return None


def _daemons(count: int) -> str:
    return f"{count} daemon{'' if count == 1 else 's'}"


def read_flash(request: Request) -> Report | None:
    text = request.cookies.get(FLASH_COOKIE)
    return Report.decode(text) if text else None


def clear_flash(response: Response, admin: Admin) -> None:
    response.delete_cookie(FLASH_COOKIE, path=admin.path("/"))


def _set_flash(response: Response, admin: Admin, report: Report) -> None:
    response.set_cookie(FLASH_COOKIE, report.encode(), path=admin.path("/"), httponly=True,
                        samesite="lax", max_age=60)


def same_origin(request: Request) -> bool:
    if request.headers.get("sec-fetch-site") == "cross-site":
        return False
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def read_form(request: Request) -> dict[str, str]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0].strip() for k, v in fields.items()}


@attrs.frozen
class Plan:
    verb: str  # create, pause, unpause, empty, delete, tombstone, or a DEAD_LETTER_VERB
    topic: str
    channel: str = ""
    node: str = ""
    landing: str = ""

    @property
    def subject(self) -> str:
        name = f"{self.topic}/{self.channel}" if self.channel else self.topic
        if self.verb in DEAD_LETTER_VERBS:
            return f"the dead letters of {name}"
        return f"{name} on {self.node}" if self.node else name

    @property
    def action(self) -> str:
        """The action's name in reports and notifications."""
        if self.verb in DEAD_LETTER_VERBS:
            return self.verb
        if self.verb == "tombstone":
            return "tombstone_topic_producer"
        return f"{self.verb}_{'channel' if self.channel else 'topic'}"

    @property
    def question(self) -> str:
        what = f"channel {self.channel} of topic {self.topic}" if self.channel else \
            f"topic {self.topic}"
        if self.verb == "tombstone":
            return (f"Tombstone topic {self.topic} on node {self.node}? lookupd will stop "
                    "listing this node for the topic and the topic is deleted there.")
        if self.verb == "empty":
            return f"Empty {what}? Every message queued in it is lost."
        if self.verb == "empty_dead_letters":
            return f"Delete every dead letter of {what}? They are lost."
        return f"Delete {what} on every node? Its messages are lost."


def plan_action(admin: Admin, page: str, params: dict[str, str], form: dict[str, str]
                ) -> Plan | str:
    """What the form asks for, or why it cannot be done."""
    verb = form.get("action", "create" if page in ("topics", "lookup") else "")
    topic = params.get("topic") or form.get("topic", "")
    channel = params.get("channel") or form.get("channel", "")
    here = admin.path(page_path(page, params))
    allowed = {"topics": {"create"}, "lookup": {"create", "delete"},
               "topic": {"pause", "unpause", "empty", "delete", "tombstone"},
               "channel": {"pause", "unpause", "empty", "delete", *DEAD_LETTER_VERBS},
               "node": {"tombstone"}}
    if verb not in allowed.get(page, set()):
        return f"Unknown action {verb!r}."
    if not is_valid_topic_name(topic):
        return f"Invalid topic name {topic!r}." if topic else "A topic name is required."
    if channel and not is_valid_channel_name(channel):
        return f"Invalid channel name {channel!r}."
    node = params.get("node") or form.get("node", "") if verb == "tombstone" else ""
    if verb == "tombstone" and not node:
        return "Which node to tombstone is missing."
    landing = here
    if verb == "delete" and page in ("topic", "channel"):
        landing = admin.path(f"/topics/{path_segment(topic)}" if channel else "/")
    if verb == "tombstone":
        channel = ""
    return Plan(verb, topic, channel, node, landing)


def page_path(page: str, params: dict[str, str]) -> str:
    if page == "topic":
        return f"/topics/{path_segment(params['topic'])}"
    if page == "channel":
        return f"/topics/{path_segment(params['topic'])}/{path_segment(params['channel'])}"
    if page == "peek":
        return (f"/topics/{path_segment(params['topic'])}/{path_segment(params['channel'])}"
                "/peek")
    if page == "node":
        return f"/nodes/{path_segment(params['node'])}"
    return {"topics": "/", "lookup": "/lookup", "nodes": "/nodes", "counter": "/counter"}[page]


async def perform(admin: Admin, plan: Plan, request: Request) -> ActionResult:
    cluster, notify = admin.cluster, admin.notifier.notify
    topic, channel = plan.topic, plan.channel
    if plan.verb == "create":
        result = await cluster.create_topic_channel(topic, channel)
        notify("create_topic", topic, "", "", request)
        if channel:
            notify("create_channel", topic, channel, "", request)
    elif plan.verb == "delete":
        result = await (cluster.delete_channel(topic, channel) if channel
                        else cluster.delete_topic(topic))
        notify(result.action, topic, channel, "", request)
    elif plan.verb == "tombstone":
        result = await cluster.tombstone_topic_producer(topic, plan.node)
        notify(result.action, topic, "", plan.node, request)
    elif plan.verb in DEAD_LETTER_VERBS:
        result = await cluster.dead_letter_action(plan.verb.split("_", 1)[0], topic, channel)
        notify(result.action, topic, channel, "", request)
    else:
        result = await cluster.topic_action(plan.verb, topic, channel)
        notify(result.action, topic, channel, "", request)
    return result


async def handle(request: Request, page: str, reload: Callable[[], Awaitable[dict[str, Any]]]
                 ) -> Response:
    from . import views

    admin = views.admin_of(request)
    here = admin.path(page_path(page, dict(request.path_params)))
    refusal = ""
    if not same_origin(request):
        refusal = "This form was sent from another site."
    elif not admin.is_admin(request):
        refusal = "Only admin users may change the cluster."
    if refusal:
        if views.is_htmx(request):
            return await _respond(request, page, Report("", "", problem=refusal), here, here,
                                  reload)
        return views.render_error(request, 403, "Forbidden", refusal)
    form = await read_form(request)
    plan = plan_action(admin, page, dict(request.path_params), form)
    if isinstance(plan, str):
        report = Report(form.get("action", ""), "", problem=plan)
        return await _respond(request, page, report, here, here, reload)
    if plan.verb in DESTRUCTIVE and form.get("confirm") != "yes":
        return views.render(request, "confirm", {"plan": plan, "form": form, "action_url": here,
                                                 "warnings": views.Warnings()})
    try:
        result = await perform(admin, plan, request)
    except ClusterError as exc:
        result = ActionResult(plan.action, errors=exc.errors)
    return await _respond(request, page, Report.of(result, plan.subject), plan.landing, here,
                          reload)


async def _respond(request: Request, page: str, report: Report, landing: str, here: str,
                   reload: Callable[[], Awaitable[dict[str, Any]]]) -> Response:
    from . import views

    admin = views.admin_of(request)
    if views.is_htmx(request):
        if landing == here:
            context = await reload()
            context.pop("status", None)
            # htmx swaps only 2xx answers; the report carries any failure.
            return views.render(request, page, context, report=report)
        response = Response(status_code=200, headers={"HX-Redirect": landing})
    else:
        response = RedirectResponse(landing, status_code=303)
    _set_flash(response, admin, report)
    return response
