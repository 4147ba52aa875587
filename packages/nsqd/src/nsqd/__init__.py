"""nsqd: the NSQ broker on Trio."""

from .app import serve
from .broker import Broker
from .options import Options

__all__ = ["Broker", "Options", "serve"]
