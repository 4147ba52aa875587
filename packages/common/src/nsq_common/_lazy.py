"""Package names imported on first use (PEP 562), so that a command that only parses its flags
(``nsqd --version``) does not load the modules behind them.

A package lists where each of its public names lives and gets its module ``__getattr__``::

    __getattr__ = lazy_exports(__name__, {"Broker": "broker", "serve": "app"})

A name that is the submodule itself is given as ``name: "_name"`` pointing at that module with
a leading underscore (``commands`` is ``nsq_common._commands``). Type checkers see the names
through ``if TYPE_CHECKING:`` imports beside ``__all__``.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # kept out of a command's start (``typing`` alone is several ms to import)
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``modules`` maps each name to its submodule."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        imported = importlib.import_module(f"{package}.{module}")
        value = imported if module == f"_{name}" else getattr(imported, name)
        setattr(sys.modules[package], name, value)  # the next use is a plain global
        return value

    return __getattr__
