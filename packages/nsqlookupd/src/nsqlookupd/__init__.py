"""nsqlookupd: NSQ's discovery service on Trio.

Run it with the ``nsqlookupd`` command, or embed it: ``await nursery.start(serve, Options())``.

The names below are imported on first use (PEP 562 ``__getattr__``), so that ``nsqlookupd --version``
does not load the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Addresses, serve
    from .options import Options

__all__ = ["Addresses", "Options", "serve"]
_MODULES = {"Addresses": "app", "Options": "options", "serve": "app"}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
