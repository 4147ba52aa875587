"""nsqlookupd's log: NSQ's line layout (``nsq_common.NsqLogFormatter``, as every daemon's)::

    [nsqlookupd] 2026/11/21 06:19:52.123456 INFO: TCP: listening on 127.0.0.1:4160

Messages below ``--log-level`` are dropped. What is nsqlookupd's own is how lines reach
stderr: Go's nsqlookupd logs a line for every HTTP request, so the lines of one scheduler
pass go out in one ``write`` (``Logger.write_batched``; see docs/performance.md).
"""

from __future__ import annotations

import enum
import logging
import sys
import time
from typing import TYPE_CHECKING, TextIO

import attrs
from nsq_common import NsqLogFormatter

from .flags import log_level_number

if TYPE_CHECKING:  # imported where used: --help and the flags' errors need no Trio
    import trio


class LogLevel(enum.IntEnum):
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4
    FATAL = 5

    @classmethod
    def parse(cls, text: str) -> LogLevel:
        """``debug``, ``info``, ``warn``, ``error`` or ``fatal``, any case.

        Raises:
            ValueError: with NSQ's wording.
        """
        return cls(log_level_number(text))


# NSQ's levels as the logging module's, whose names the formatter prints (WARN as WARNING).
_PYTHON_LEVELS = {LogLevel.DEBUG: logging.DEBUG, LogLevel.INFO: logging.INFO,
                  LogLevel.WARN: logging.WARNING, LogLevel.ERROR: logging.ERROR,
                  LogLevel.FATAL: logging.CRITICAL}


@attrs.define
class Logger:
    prefix: str = "[nsqlookupd] "
    level: LogLevel = LogLevel.INFO
    stream: TextIO | None = None
    _formatter: NsqLogFormatter = attrs.field(init=False, repr=False)
    # While ``write_batched`` runs, lines wait here for it and go out together.
    _pending: list[str] = attrs.field(factory=list, init=False, repr=False)
    _wakeup: trio.Event | None = attrs.field(default=None, init=False, repr=False)

    @_formatter.default
    def _default_formatter(self) -> NsqLogFormatter:
        return NsqLogFormatter(self.prefix)

    def log(self, level: LogLevel, message: str) -> None:
        if level < self.level:
            return
        line = self._formatter.line(time.time(), _PYTHON_LEVELS[level], message) + "\n"
        if self._wakeup is None:
            self._write(line)
        else:
            self._pending.append(line)
            self._wakeup.set()

    async def write_batched(self) -> None:
        """Until cancelled, write the lines logged by every task that ran since the last
        write in one ``write``: under load (a line per HTTP request, as Go's nsqlookupd logs
        them) one system call per scheduler pass instead of one per line. A line waits only
        until the tasks ready with it have run; the rest are written at cancellation."""
        import trio  # loaded already: this runs under it

        self._wakeup = wakeup = trio.Event()
        try:
            while True:
                await wakeup.wait()
                self._wakeup = wakeup = trio.Event()
                self._write_pending()
        finally:
            self._wakeup = None
            self._write_pending()

    def _write_pending(self) -> None:
        if self._pending:
            lines = "".join(self._pending)
            self._pending.clear()
            self._write(lines)

    def _write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):  # stderr gone: keep serving rather than die on a log line
            pass

    def debug(self, message: str) -> None:
        self.log(LogLevel.DEBUG, message)

    def info(self, message: str) -> None:
        self.log(LogLevel.INFO, message)

    def warn(self, message: str) -> None:
        self.log(LogLevel.WARN, message)

    def error(self, message: str) -> None:
        self.log(LogLevel.ERROR, message)

    def fatal(self, message: str) -> None:
        self.log(LogLevel.FATAL, message)

    def stdlib_logger(self, name: str) -> logging.Logger:
        """A ``logging.Logger`` (for libraries such as nsq_serving) that writes through this one."""
        logger = logging.getLogger(name)
        logger.handlers = [_Forward(self)]
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        return logger


_LEVELS = ((logging.ERROR, LogLevel.ERROR), (logging.WARNING, LogLevel.WARN),
           (logging.INFO, LogLevel.INFO))


class _Forward(logging.Handler):
    def __init__(self, target: Logger) -> None:
        super().__init__()
        self._target = target

    def emit(self, record: logging.LogRecord) -> None:
        level = next((ours for theirs, ours in _LEVELS if record.levelno >= theirs),
                     LogLevel.DEBUG)
        try:
            message = record.getMessage()
        except Exception:  # a library's bad format string must not break the server
            message = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message} - {record.exc_info[1]!r}"
        self._target.log(level, message)
