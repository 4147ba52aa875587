"""Log lines laid out as NSQ's Go daemons write them (scripts grep stderr for them)::

    [nsq_auth] 2026/11/21 06:19:52.123456 INFO: HTTP: listening on 127.0.0.1:4181
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "error": logging.ERROR, "fatal": logging.CRITICAL}
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
          logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}


class GoLogFormatter(logging.Formatter):
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


def setup_logging(prefix: str, level: str) -> logging.Logger:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(GoLogFormatter(prefix))
    logger = logging.getLogger("nsq_auth")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(LEVELS[level.lower()])
    return logger
