"""nsqadmin: NSQ's web dashboard, server-side HTML (Starlette + Jinja2, htmx) on Trio."""

from .app import create_app
from .options import Options
from .server import serve

__all__ = ["Options", "create_app", "serve"]
