"""Log lines in the Go daemons' layout, shared by every daemon here, so scripts that grep
stderr keep working::

    [nsqd] 2026/11/21 06:19:52.123456 INFO: TCP: listening on 127.0.0.1:4150

Standard library only: the daemons log through ``logging`` and this formats the lines.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime

# NSQ's level names -> the logging module's levels, and NSQ's numbers (/config/log_level).
PYTHON_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
                     "error": logging.ERROR, "fatal": logging.CRITICAL}
NSQ_LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
          logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}


class NsqLogFormatter(logging.Formatter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).strftime("%Y/%m/%d %H:%M:%S.%f")
        line = f"{self.prefix}{when} {_NAMES.get(record.levelno, record.levelname)}: "
        line += record.getMessage()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(name: str, prefix: str, level: str) -> logging.Logger:
    """Send logger ``name`` to stderr in NSQ's layout, at ``level`` (debug..fatal) and above."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NsqLogFormatter(prefix))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(PYTHON_LOG_LEVELS[level.lower()])
    return logger
