"""nsqlookupd's options: NSQ's flag names, defaults and help texts, and the frozen result.

Precedence is NSQ's: a flag given on the command line, else the key in the ``--config`` TOML
file (flag name with ``_`` for ``-``), else the default.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import attrs
from nsq_common import FlagError, FlagSet

from .flags import check, flag_set
from .logger import LogLevel

__all__ = ["ConfigError", "Options", "Parsed", "flag_set", "parse_args"]


@attrs.frozen
class Options:
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = attrs.field(factory=socket.gethostname)
    inactive_producer_timeout: float = 300.0  # seconds
    tombstone_lifetime: float = 45.0  # seconds
    log_level: LogLevel = LogLevel.INFO
    log_prefix: str = "[nsqlookupd] "


class ConfigError(Exception):
    """The config file cannot be used; NSQ logs this as FATAL and exits 1."""


@attrs.frozen
class Parsed:
    options: Options
    version: bool


def parse_args(argv: Sequence[str], flags: FlagSet | None = None) -> Parsed:
    """Command line (and config file) to Options.

    Raises:
        FlagError: a bad command line (print it with the usage, exit 2).
        ConfigError: a bad config file (log FATAL, exit 1).
    """
    flags = flags or flag_set()
    values, given, _ = flags.parse(argv)
    return parsed_values(values, given, flags)


def parsed_values(values: dict[str, Any], given: set[str], flags: FlagSet) -> Parsed:
    """Parsed command-line ``values`` (those ``given`` on it), and the config file's, to
    Options.

    Raises:
        FlagError: a bad command line (print it with the usage, exit 2).
        ConfigError: a bad config file (log FATAL, exit 1).
    """
    check(values, given)
    if values["config"] and not values["version"]:
        try:
            flags.apply_config_file(values["config"], values, given)
        except FlagError as exc:
            raise ConfigError(str(exc)) from None
    return Parsed(_options(values), bool(values["version"]))


def _log_level(value: Any) -> LogLevel:
    """A config file's log level (the command line's: ``check``)."""
    try:
        return LogLevel.parse(str(value))
    except ValueError:
        raise ConfigError(f"failed parsing log_level {value}") from None


def _options(values: dict[str, Any]) -> Options:
    return Options(
        tcp_address=values["tcp_address"],
        http_address=values["http_address"],
        broadcast_address=values["broadcast_address"],
        inactive_producer_timeout=values["inactive_producer_timeout"],
        tombstone_lifetime=values["tombstone_lifetime"],
        log_level=_log_level(values["log_level"]),
        log_prefix=values["log_prefix"],
    )
