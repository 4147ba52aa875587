"""nsqd: the NSQ broker on Trio.

The names below are imported on first use (PEP 562 ``__getattr__``), so that ``nsqd --version``
does not load the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import serve
    from .broker import Broker
    from .options import Options

__all__ = ["Broker", "Options", "serve"]
_MODULES = {"Broker": "broker", "Options": "options", "serve": "app"}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
