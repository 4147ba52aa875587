"""What every tool shares: Go-style flags, Go-style logs, signals, and the progress line.

* Flags are parsed with ``nsq_common.FlagSet`` (``-flag value``, ``--flag=value``, repeatable
  flags), with NSQ's names and defaults; ``-h`` prints Go's usage text.
* ``fatal`` prints like Go's ``log.Fatal`` (date, time, text on stderr) and exits 1.
* ``--consumer-opt`` / ``--producer-opt`` take go-nsq's ``name,value`` (``name`` alone sets a
  boolean), applied with ``Config.set``.
* ``Progress``: on a terminal, one status line on stderr rewritten every second (counts and
  rate); otherwise a log line every ``log_every`` seconds. Tools stop on SIGINT / SIGTERM
  through ``stop_on_signals``.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

import trio
from nsq_common import NSQ_VERSION, FlagError, FlagSet, exit_with_flag_error, is_valid_name

from .._config import Config
from .._discovery import lookupd_url
from .._version import __version__

log = logging.getLogger("nsq_client.tools")

VERSION = NSQ_VERSION


def user_agent(program: str) -> str:
    """What the tools send in IDENTIFY: ``nsq_tail/1.3.0 nsq_client/0.1.0`` (cf. go-nsq)."""
    return f"{program}/{VERSION} nsq_client/{__version__}"


def setup_logging(prefix: str = "", level: int = logging.INFO) -> None:
    """Go's ``log`` format on stderr: ``<prefix>2006/01/02 15:04:05 text``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_GoFormatter(prefix))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class _GoFormatter(logging.Formatter):
    _LEVELS = {logging.DEBUG: "DBG", logging.INFO: "INF", logging.WARNING: "WRN",
               logging.ERROR: "ERR", logging.CRITICAL: "FTL"}

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        text = record.getMessage()
        if record.name.startswith("nsq_client") and not record.name.startswith("nsq_client.tools"):
            text = f"{self._LEVELS.get(record.levelno, 'INF')} {text}"  # go-nsq's own lines
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f"{self.prefix}{stamp} {text}"


class Fatal(Exception):
    """Raised inside a tool's Trio code for ``fatal``; ``run_tool`` turns it into exit 1."""


def run_tool(async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """``trio.run``, with ``Fatal`` / ``SystemExit`` from inside nurseries handled as Go would."""
    try:
        return trio.run(async_fn, *args)
    except BaseExceptionGroup as group:
        for leaf in _leaves(group):
            if isinstance(leaf, Fatal):
                fatal(str(leaf))
            if isinstance(leaf, SystemExit):
                raise SystemExit(leaf.code) from None
        raise
    except Fatal as exc:
        fatal(str(exc))


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def fatal(message: str) -> NoReturn:
    """Go's ``log.Fatal``: the message with a timestamp on stderr, exit status 1."""
    log.critical("%s", message)
    if not logging.getLogger().handlers:
        sys.stderr.write(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {message}\n")
    raise SystemExit(1)


def parse_flags(flags: FlagSet, argv: Sequence[str] | None) -> dict[str, Any]:
    """Parse ``argv`` (default ``sys.argv[1:]``); ``--version`` prints and exits 0."""
    try:
        values, given, rest = flags.parse(sys.argv[1:] if argv is None else argv)
    except FlagError as exc:
        exit_with_flag_error(flags, exc)
    values["_args"] = rest
    values["_given"] = given
    if values.get("version"):
        print(f"{flags.program} v{VERSION}")
        raise SystemExit(0)
    return values


def apply_opts(config: Config, options: Sequence[str], flag: str) -> Config:
    """go-nsq's ``ConfigFlag``: every ``name,value`` (or bare ``name`` = true) in turn."""
    for option in options:
        name, sep, value = option.partition(",")
        try:
            config = config.set(name, value if sep else None)
        except ValueError as exc:
            fatal(f"invalid --{flag} {option!r} - {exc}")
    return config


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


async def stop_on_signals(stop: Callable[[], Any], *,
                          signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Call ``stop()`` on the first signal; a second one exits at once (status 1)."""
    with trio.open_signal_receiver(*signals) as received:
        task_status.started()
        first = True
        async for signum in received:
            if first:
                log.info("%s received, stopping", signal.Signals(signum).name)
                first = False
                stop()
            else:
                log.warning("second %s, exiting now", signal.Signals(signum).name)
                raise SystemExit(1)


class Progress:
    """Counts and rate: a live line on a terminal, a periodic log line elsewhere.

    Args:
        program: the tool's name, at the start of the line.
        stream: where the live line goes (stderr); a terminal means live mode.
        log_every: seconds between log lines when not on a terminal (0: never).
    """

    def __init__(self, program: str, *, stream: Any = None, log_every: float = 60.0,
                 enabled: bool = True) -> None:
        self.program = program
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self.log_every = log_every if enabled else 0.0
        self.counts: dict[str, int] = {}
        self._start = time.monotonic()
        self._last_total = 0
        self._last_time = self._start
        self._drawn = False

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        first = next(iter(self.counts.values()), 0)
        elapsed = max(now - self._last_time, 1e-9)
        rate = (first - self._last_total) / elapsed
        self._last_total, self._last_time = first, now
        parts = ", ".join(f"{n} {name}" for name, n in self.counts.items()) or "0"
        return f"{self.program}: {parts} ({rate:,.1f}/s)"

    async def run(self) -> None:
        """Refresh until cancelled; the live line is cleared at the end."""
        if not self.tty and not self.log_every:
            await trio.sleep_forever()
        try:
            while True:
                await trio.sleep(1.0 if self.tty else self.log_every)
                if self.tty:
                    self.stream.write("\r" + self.line() + "\x1b[K")
                    self.stream.flush()
                    self._drawn = True
                else:
                    log.info("%s", self.line())
        finally:
            if self._drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    def summary(self) -> str:
        total = time.monotonic() - self._start
        parts = ", ".join(f"{n} {name}" for name, n in self.counts.items()) or "nothing"
        return f"{self.program}: {parts} in {total:.1f}s"


def require_one_source(nsqd: Sequence[str], lookupd: Sequence[str],
                       names: tuple[str, str] = ("--nsqd-tcp-address", "--lookupd-http-address")) -> None:
    """NSQ's tools take nsqd addresses or lookupd addresses, one kind, at least one."""
    if not nsqd and not lookupd:
        fatal(f"{names[0]} or {names[1]} required")
    if nsqd and lookupd:
        fatal(f"use {names[0]} or {names[1]} not both")


def validate_consumer_args(topics: Sequence[str], channel: str, lookupd: Sequence[str]) -> None:
    """What ``Consumer`` would refuse, refused up front with go-nsq's words."""
    for topic in topics:
        if not is_valid_name(topic):
            fatal("invalid topic name")
    if not is_valid_name(channel):
        fatal("invalid channel name")
    for address in lookupd:
        try:
            lookupd_url(address, topic="x")
        except ValueError as exc:
            fatal(str(exc))
