"""Log lines in the Go daemons' layout, shared by every daemon here, so scripts that grep
stderr keep working::

    [nsqd] 2026/11/21 06:19:52.123456 INFO: TCP: listening on 127.0.0.1:4150

Standard library only: the daemons log through ``logging`` and this formats the lines.

The date and time change once a second, so their text is made once a second and kept: a line
costs the microseconds and a string join, not a ``strftime`` (nsqlookupd logs a line for every
HTTP request, as Go's does).
"""

from __future__ import annotations

import logging
import math
import sys
import time

# NSQ's level names -> the logging module's levels (NSQ's numbers: ``NSQ_LOG_LEVELS``).
PYTHON_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
                     "error": logging.ERROR, "fatal": logging.CRITICAL}
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
          logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}


class NsqLogFormatter(logging.Formatter):
    """``<prefix><local date and time, microseconds> <LEVEL>: <message>``, as Go's ``log``.

    The time is the record's ``created``, read through ``converter`` (``time.localtime``, as
    in ``logging.Formatter``), microseconds rounded half to even as ``datetime`` rounds them.
    """

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        # (second, its date and time text), replaced whole so a thread never sees half of it.
        self._stamp: tuple[int, str] = (-1 << 63, "")

    def format(self, record: logging.LogRecord) -> str:
        line = self.line(record.created, record.levelno, record.getMessage())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line

    def line(self, created: float, level: int, message: str) -> str:
        """The line for ``message`` logged at ``created`` (seconds since the epoch) with
        ``level`` (the logging module's), for a logger that makes no ``LogRecord``."""
        fraction, whole = math.modf(created)
        micros = round(fraction * 1e6)
        second = int(whole)
        if micros >= 1_000_000:  # rounded up into the next second
            micros -= 1_000_000
            second += 1
        elif micros < 0:  # before 1970: the fraction counts back from the next second
            micros += 1_000_000
            second -= 1
        stamped, stamp = self._stamp
        if second != stamped:
            stamp = time.strftime("%Y/%m/%d %H:%M:%S", self.converter(second))
            self._stamp = (second, stamp)
        name = _NAMES.get(level) or logging.getLevelName(level)
        return f"{self.prefix}{stamp}.{micros:06d} {name}: {message}"


def setup_logging(name: str, prefix: str, level: str) -> logging.Logger:
    """Send logger ``name`` to stderr in NSQ's layout, at ``level`` (debug..fatal) and above."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NsqLogFormatter(prefix))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(PYTHON_LOG_LEVELS[level.lower()])
    return logger
