"""``Admin``: what every request handler needs, kept on ``app.state.admin``.

Below the handler modules (pages, actions, API, graphs), which reach it with ``admin_of``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import attrs
from nsq_common import NSQ_VERSION
from starlette.requests import Request

from .auth import USER_KEY, BasicAuth, credentials
from .cluster import ClusterInfo
from .cluster_actions import ClusterActions
from .formatting import install_filters
from .history import History
from .lmstfy import Lmstfy
from .notify import Notifier
from .options import Options
from .stats import job_columns

if TYPE_CHECKING:
    from starlette.templating import Jinja2Templates

PACKAGE_DIR = Path(__file__).parent


@attrs.define(eq=False)
class Admin:
    """Everything a request handler needs, kept on ``app.state.admin``."""

    options: Options
    cluster: ClusterInfo
    history: History
    notifier: Notifier
    lmstfy: Lmstfy
    basic_auth: BasicAuth | None = None
    _page_templates: Jinja2Templates | None = attrs.field(default=None, init=False)

    @property
    def actions(self) -> ClusterActions:
        """The changes an admin may make to ``cluster``."""
        return ClusterActions(self.cluster)

    @property
    def templates(self) -> Jinja2Templates:
        """The page templates, made when the first page is (Jinja2 is slow to import, and
        nsqadmin answers /ping and the API sooner without it)."""
        if self._page_templates is None:
            self._page_templates = _templates()
            self._page_templates.env.globals["bp"] = self.path
            self._page_templates.env.globals["jobs_known"] = lambda: bool(self.lmstfy.known)
        return self._page_templates

    def is_admin(self, request: Request) -> bool:
        """May this request change the cluster?

        Anyone, unless ``--admin-user`` names who may: the user in ``--acl-http-header``, or
        with ``--admin-basic-auth-file`` the basic-auth user, whose password ``RequireBasicAuth``
        has checked before any request but a read gets here (a read is never an admin).
        """
        users = self.options.admin_users
        if self.basic_auth is not None:
            user = request.scope.get(USER_KEY)
            return user is not None and (not users or user in users)
        return not users or request.headers.get(self.options.acl_http_header, "") in users

    def offers_actions(self, request: Request) -> bool:
        """Whether pages show the action buttons. With basic auth, also to readers who have
        not signed in: pressing one makes the browser ask for a user and password. The name
        is not checked here; the action is."""
        if self.basic_auth is None:
            return self.is_admin(request)
        given = credentials(request)
        users = self.options.admin_users
        return given is None or not users or given[0] in users

    def path(self, path: str) -> str:
        """``path`` under ``--base-path``."""
        return self.options.base_path.rstrip("/") + path


def admin_of(request: Request) -> Admin:
    admin: Admin = request.app.state.admin
    return admin


def _templates() -> Jinja2Templates:
    from starlette.templating import Jinja2Templates  # deferred: see Admin.templates

    templates = Jinja2Templates(directory=str(PACKAGE_DIR / "templates"))
    templates.env.trim_blocks = True
    templates.env.lstrip_blocks = True
    install_filters(templates.env)
    templates.env.globals["version"] = NSQ_VERSION
    templates.env.globals["job_columns"] = job_columns
    return templates
