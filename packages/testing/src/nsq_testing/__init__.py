"""Dev-only helpers that start real NSQ daemons for tests. Never a runtime dependency."""

from .daemon import Daemon, free_port, start_daemon
from .wire import WireClient

__all__ = ["Daemon", "WireClient", "free_port", "start_daemon"]
