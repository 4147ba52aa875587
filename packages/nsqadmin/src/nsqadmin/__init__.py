"""nsqadmin: NSQ's web dashboard, server-side HTML (Starlette + Jinja2, htmx) on Trio.

The names below are imported on first use (``nsq_common.lazy_exports``), so that
``nsqadmin --version`` does not load the server.
"""

from __future__ import annotations

from nsq_common import lazy_exports

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at start-up

if TYPE_CHECKING:
    from .app import create_app
    from .options import Options
    from .server import serve

__all__ = ["Options", "create_app", "serve"]
__getattr__ = lazy_exports(__name__, {"Options": "options", "create_app": "app", "serve": "server"})
