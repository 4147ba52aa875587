"""nsqlookupd's flags: NSQ's names, defaults and help texts.

``check`` is NSQ's start-up check of their values. Apart from ``options`` (which makes the
frozen ``Options`` of them) so that the command parses and checks its flags without loading
attrs: the early start waits for them (docs/performance.md).
"""

from __future__ import annotations

import socket

from nsq_common import FlagError, FlagSet, go_quote

TYPE_CHECKING = False
if TYPE_CHECKING:  # no run-time import: the early start waits for this module
    from collections.abc import Collection, Mapping
    from typing import Any

#: NSQ's log levels, by the names ``logger.LogLevel`` gives them (numbered from 1).
LOG_LEVEL_NAMES = ("DEBUG", "INFO", "WARN", "ERROR", "FATAL")


def flag_set() -> FlagSet:
    flags = FlagSet("nsqlookupd")
    flags.add("config", "string", "", "path to config file")
    flags.add("version", "bool", False, "print version string")
    flags.add("log-level", "string", "info",
              "set log verbosity: debug, info, warn, error, or fatal")
    flags.add("log-prefix", "string", "[nsqlookupd] ", "log message prefix")
    flags.add("verbose", "bool", False, "[deprecated] has no effect, use --log-level",
              deprecated=True)
    flags.add("tcp-address", "string", "0.0.0.0:4160",
              "<addr>:<port> to listen on for TCP clients")
    flags.add("http-address", "string", "0.0.0.0:4161",
              "<addr>:<port> to listen on for HTTP clients")
    flags.add("broadcast-address", "string", socket.gethostname(),
              "address of this lookupd node, (default to the OS hostname)")
    flags.add("inactive-producer-timeout", "duration", 300.0,
              "duration of time a producer will remain in the active list since its last ping")
    flags.add("tombstone-lifetime", "duration", 45.0,
              "duration of time a producer will remain tombstoned if registration remains")
    return flags


def log_level_number(text: str) -> int:
    """``debug`` (1), ``info``, ``warn``, ``error`` or ``fatal`` (5), any case.

    Raises:
        ValueError: with NSQ's wording.
    """
    name = text.upper()
    if name not in LOG_LEVEL_NAMES:
        raise ValueError(f"invalid log level '{text}' (debug, info, warn, error, fatal)")
    return LOG_LEVEL_NAMES.index(name) + 1


def check(values: Mapping[str, Any], given: Collection[str]) -> None:
    """NSQ's start-up check of the command line's values (those ``given`` on it; a config
    file's are checked as it is read, ``options``).

    Raises:
        FlagError: with Go's wording (printed with the usage, exit 2).
    """
    if "log_level" in given:
        value = str(values["log_level"])
        try:
            log_level_number(value)
        except ValueError as exc:
            raise FlagError(f"invalid value {go_quote(value)} for flag -log-level: {exc}") from None
