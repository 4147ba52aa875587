"""What every tool shares: Go-style flags, Go-style logs, signals, and the progress line.

* Flags are parsed with ``nsq_common.FlagSet`` (``-flag value``, ``--flag=value``, repeatable
  flags), with NSQ's names and defaults; ``-h`` prints Go's usage text.
* ``fatal`` prints like Go's ``log.Fatal`` (date, time, text on stderr) and exits 1.
* ``--consumer-opt`` / ``--producer-opt`` take go-nsq's ``name,value`` (``name`` alone sets a
  boolean), applied with ``Config.set``.
* Tools stop on SIGINT / SIGTERM through ``stop_on_signals``; ``Progress`` (``_progress``)
  shows their counts.
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
from nsq_common import NSQ_VERSION, FlagError, FlagSet, exit_with_flag_error

from .._config import Config
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


def tool_config(opts: dict[str, Any], program: str, flag: str = "consumer-opt",
                max_in_flight: int | None = None) -> Config:
    """A tool's client options: go-nsq's from ``--consumer-opt`` / ``--producer-opt`` (``flag``),
    then its user agent and, for a consumer, ``max_in_flight``."""
    config = apply_opts(Config(), opts[flag.replace("-", "_")], flag)
    config = config.set("user_agent", user_agent(program))
    if max_in_flight is not None:
        config = config.set("max_in_flight", str(max_in_flight))
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
