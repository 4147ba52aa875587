"""Dev-only helpers that start real NSQ daemons for tests. Never a runtime dependency."""

from .daemon import Daemon, free_port, start_daemon

__all__ = ["Daemon", "free_port", "start_daemon"]
