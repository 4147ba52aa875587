"""nsqadmin: NSQ's web dashboard, server-side HTML (Starlette + Jinja2, htmx) on Trio.

The names below are imported on first use (PEP 562 ``__getattr__``), so that ``nsqadmin --version``
does not load the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .options import Options
    from .server import serve

__all__ = ["Options", "create_app", "serve"]
_MODULES = {"Options": "options", "create_app": "app", "serve": "server"}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
