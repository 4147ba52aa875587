"""Admin actions posted by the pages' forms, with and without JavaScript.

A form POSTs ``action`` (and ``topic``/``channel``/``node`` where the URL does not say them)
to the page it sits on; ``create`` and ``settings`` also take the settings of
``nsqadmin.settings`` (a topic's TTL and retention, a channel's attempt limit, what its expired
messages become and where a new one starts: beyond NSQ); ``rewind`` (a channel's, beyond NSQ)
takes a target of ``nsqadmin.rewind`` and optionally the one ``node`` to rewind on.
Destructive actions (empty, delete, tombstone) and rewind need ``confirm=yes``:
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

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs

import attrs
from nsq_common import is_valid_channel_name, is_valid_topic_name
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .cluster_actions import ActionResult
from .formatting import path_segment
from .pages import Warnings, page_path, render, render_error
from .report import Report, set_flash
from .rewind import RewindError, RewindTarget
from .rewind import parse as parse_rewind
from .settings import SettingError, Settings
from .settings import parse as parse_settings
from .state import Admin, admin_of
from .upstream import ClusterError
from .web import is_htmx, same_origin

MAX_FORM = 16 * 1024
DESTRUCTIVE = {"empty", "delete", "tombstone", "empty_dead_letters", "rewind"}
DEAD_LETTER_VERBS = {"respawn_dead_letters", "empty_dead_letters"}  # beyond NSQ


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
    verb: str  # create, settings, pause, unpause, empty, delete, tombstone, rewind, a
    #            DEAD_LETTER_VERB
    topic: str
    channel: str = ""
    node: str = ""
    landing: str = ""
    settings: Settings = attrs.field(factory=Settings)  # create, settings: beyond NSQ
    target: RewindTarget | None = None  # rewind: beyond NSQ

    @property
    def subject(self) -> str:
        name = f"{self.topic}/{self.channel}" if self.channel else self.topic
        if self.target is not None:
            where = f" on {self.node}" if self.node else ""
            return f"{name} {self.target.describe()}{where}"
        if self.verb in DEAD_LETTER_VERBS:
            return f"the dead letters of {name}"
        described = self.settings.describe()
        if described:
            return f"{name} ({described})"
        return f"{name} on {self.node}" if self.node else name

    @property
    def destructive(self) -> bool:
        return self.verb in DESTRUCTIVE

    @property
    def action(self) -> str:
        """The action's name in reports and notifications."""
        if self.verb in DEAD_LETTER_VERBS:
            return self.verb
        if self.verb == "tombstone":
            return "tombstone_topic_producer"
        verb = "update" if self.verb == "settings" else self.verb
        return f"{verb}_{'channel' if self.channel else 'topic'}"

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
        if self.target is not None:
            return (f"Rewind {what} {self.target.describe()}? Every message kept from there "
                    "on is delivered again (a point past the channel's position skips the "
                    "messages between).")
        return f"Delete {what} on every node? Its messages are lost."


def plan_action(admin: Admin, page: str, params: dict[str, str], form: dict[str, str]
                ) -> Plan | str:
    """What the form asks for, or why it cannot be done."""
    verb = form.get("action", "create" if page in ("topics", "lookup") else "")
    topic = params.get("topic") or form.get("topic", "")
    channel = params.get("channel") or form.get("channel", "")
    here = admin.path(page_path(page, params))
    allowed = {"topics": {"create"}, "lookup": {"create", "delete"},
               "topic": {"pause", "unpause", "empty", "delete", "tombstone", "settings"},
               "channel": {"pause", "unpause", "empty", "delete", "settings", "rewind",
                           *DEAD_LETTER_VERBS},
               "node": {"tombstone"}}
    if verb not in allowed.get(page, set()):
        return f"Unknown action {verb!r}."
    if not is_valid_topic_name(topic):
        return f"Invalid topic name {topic!r}." if topic else "A topic name is required."
    if channel and not is_valid_channel_name(channel):
        return f"Invalid channel name {channel!r}."
    node = params.get("node") or form.get("node", "") if verb in ("tombstone", "rewind") \
        else ""
    if verb == "tombstone" and not node:
        return "Which node to tombstone is missing."
    target = None
    if verb == "rewind":
        try:
            target = parse_rewind(form)
        except RewindError as exc:
            return str(exc)
    landing = here
    if verb == "delete" and page in ("topic", "channel"):
        landing = admin.path(f"/topics/{path_segment(topic)}" if channel else "/")
    if verb == "tombstone":
        channel = ""
    settings = Settings()
    if verb in ("create", "settings"):
        try:
            settings = parse_settings(form)
        except SettingError as exc:
            return f"Invalid setting: {exc}."
        if verb == "settings":
            settings = _settings_of(settings, channel)
            if settings == Settings():
                return "Nothing to change."
        elif not channel and settings.create_channel_params:
            return ("Max attempts, expired messages and where it starts are a channel's: "
                    "name the channel.")
    return Plan(verb, topic, channel, node, landing, settings, target)


def _settings_of(settings: Settings, channel: str) -> Settings:
    """What a settings form may change: a channel's own, or a topic's."""
    return settings.channel_only if channel else settings.topic_only


async def perform(admin: Admin, plan: Plan, request: Request) -> ActionResult:
    actions, notify = admin.actions, admin.notifier.notify
    topic, channel = plan.topic, plan.channel
    if plan.verb == "create":
        result = await actions.create_topic_channel(topic, channel, plan.settings)
        notify("create_topic", topic, "", "", request)
        if channel:
            notify("create_channel", topic, channel, "", request)
    elif plan.verb == "settings":
        result = await actions.update_settings(topic, channel, plan.settings)
        notify(result.action, topic, channel, "", request)
    elif plan.verb == "delete":
        result = await (actions.delete_channel(topic, channel) if channel
                        else actions.delete_topic(topic))
        notify(result.action, topic, channel, "", request)
    elif plan.verb == "tombstone":
        result = await actions.tombstone_topic_producer(topic, plan.node)
        notify(result.action, topic, "", plan.node, request)
    elif plan.verb in DEAD_LETTER_VERBS:
        result = await actions.dead_letter_action(plan.verb.split("_", 1)[0], topic, channel)
        notify(result.action, topic, channel, "", request)
    elif plan.target is not None:
        result = await actions.rewind_channel(topic, channel, plan.target, plan.node)
        notify(result.action, topic, channel, plan.node, request)
    else:
        result = await actions.topic_action(plan.verb, topic, channel)
        notify(result.action, topic, channel, "", request)
    return result


class Planned(Protocol):
    """What ``handle`` needs of a plan (``Plan`` here; the Jobs pages have their own)."""

    @property
    def verb(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def question(self) -> str: ...
    @property
    def landing(self) -> str: ...
    @property
    def destructive(self) -> bool: ...


P = TypeVar("P", bound=Planned)


async def handle(request: Request, page: str, reload: Callable[[], Awaitable[dict[str, Any]]],
                 planner: Callable[[Admin, str, dict[str, str], dict[str, str]],
                                   P | str | Awaitable[P | str]] | None = None,
                 performer: Callable[[Admin, P, Request], Awaitable[ActionResult]] | None = None
                 ) -> Response:
    """An action posted to ``page``: checked, confirmed if destructive, done, reported.
    ``planner`` and ``performer`` are ``plan_action`` and ``perform`` unless given."""
    plan_of: Any = planner or plan_action
    do: Any = performer or perform
    admin = admin_of(request)
    here = admin.path(page_path(page, dict(request.path_params)))
    refusal = ""
    if not same_origin(request):
        refusal = "This form was sent from another site."
    elif not admin.is_admin(request):
        refusal = "Only admin users may change the cluster."
    if refusal:
        if is_htmx(request):
            return await _respond(request, page, Report("", "", problem=refusal), here, here,
                                  reload)
        return render_error(request, 403, "Forbidden", refusal)
    form = await read_form(request)
    plan = plan_of(admin, page, dict(request.path_params), form)
    if inspect.isawaitable(plan):  # (a planner that asks a daemon first)
        plan = await plan
    if isinstance(plan, str):
        report = Report(form.get("action", ""), "", problem=plan)
        return await _respond(request, page, report, here, here, reload)
    if plan.destructive and form.get("confirm") != "yes":
        return render(request, "confirm", {"plan": plan, "form": form, "action_url": here,
                                                 "warnings": Warnings()})
    try:
        result = await do(admin, plan, request)
    except ClusterError as exc:
        result = ActionResult(plan.action, errors=exc.errors)
    return await _respond(request, page, Report.of(result, plan.subject), plan.landing, here,
                          reload)


async def _respond(request: Request, page: str, report: Report, landing: str, here: str,
                   reload: Callable[[], Awaitable[dict[str, Any]]]) -> Response:
    admin = admin_of(request)
    if is_htmx(request):
        if landing == here:
            context = await reload()
            context.pop("status", None)
            # htmx swaps only 2xx answers; the report carries any failure.
            return render(request, page, context, report=report)
        response = Response(status_code=200, headers={"HX-Redirect": landing})
    else:
        response = RedirectResponse(landing, status_code=303)
    set_flash(response, admin.path("/"), report)
    return response
