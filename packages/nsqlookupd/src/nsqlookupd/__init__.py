"""nsqlookupd: NSQ's discovery service on Trio.

Run it with the ``nsqlookupd`` command, or embed it: ``await nursery.start(serve, Options())``.

The names below are imported on first use (``nsq_common.lazy_exports``), so that
``nsqlookupd --version`` does not load the server.
"""

from __future__ import annotations

from nsq_common import lazy_exports

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at start-up

if TYPE_CHECKING:
    from .app import Addresses, serve
    from .options import Options

__all__ = ["Addresses", "Options", "serve"]
__getattr__ = lazy_exports(__name__, {"Addresses": "app", "Options": "options", "serve": "app"})
