"""Dev-only helpers that start real NSQ daemons for tests. Never a runtime dependency."""

from .daemon import Daemon, free_port, start_daemon
from .etcd import Etcd
from .http import HttpConnection
from .wait import DEADLINE, until, wait_exit, wait_until
from .wire import WireClient

__all__ = ["DEADLINE", "Daemon", "Etcd", "HttpConnection", "WireClient", "free_port", "start_daemon",
           "until", "wait_exit", "wait_until"]
