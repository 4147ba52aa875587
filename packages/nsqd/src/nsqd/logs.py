"""Log lines in NSQ's layout: ``[nsqd] 2026/11/21 06:19:52.123456 INFO: TCP: listening on ...``.

Scripts written for the Go daemons grep stderr for these lines, so the layout is kept.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime

_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
                logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}
PY_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
             "error": logging.ERROR, "fatal": logging.CRITICAL}


class NsqFormatter(logging.Formatter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created).strftime("%Y/%m/%d %H:%M:%S.%f")
        level = _LEVEL_NAMES.get(record.levelno, record.levelname)
        text = f"{self.prefix}{stamp} {level}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup_logging(name: str, prefix: str, level: str) -> logging.Logger:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NsqFormatter(prefix))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(PY_LEVELS[level.lower()])
    return logger
