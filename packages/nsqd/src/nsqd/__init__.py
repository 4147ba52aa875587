"""nsqd: the NSQ broker on Trio.

The names below are imported on first use (``nsq_common.lazy_exports``), so that
``nsqd --version`` does not load the server.
"""

from __future__ import annotations

from nsq_common import lazy_exports

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at start-up

if TYPE_CHECKING:
    from .app import serve
    from .broker import Broker
    from .options import Options

__all__ = ["Broker", "Options", "serve"]
__getattr__ = lazy_exports(__name__, {"Broker": "broker", "Options": "options", "serve": "app"})
