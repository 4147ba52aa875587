"""nsqlookupd: NSQ's discovery service on Trio.

Run it with the ``nsqlookupd`` command, or embed it: ``await nursery.start(serve, Options())``.
"""

from .app import Addresses, serve
from .options import Options

__all__ = ["Addresses", "Options", "serve"]
