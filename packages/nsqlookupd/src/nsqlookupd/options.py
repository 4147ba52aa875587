"""nsqlookupd's options: NSQ's flag names, defaults and help texts, and the frozen result.

Precedence is NSQ's: a flag given on the command line, else the key in the ``--config`` TOML
file (flag name with ``_`` for ``-``), else the default.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import attrs
from nsq_common import FlagError, FlagSet, go_quote

from .logger import LogLevel


@attrs.frozen
class Options:
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = attrs.field(factory=socket.gethostname)
    inactive_producer_timeout: float = 300.0  # seconds
    tombstone_lifetime: float = 45.0  # seconds
    log_level: LogLevel = LogLevel.INFO
    log_prefix: str = "[nsqlookupd] "


def flag_set() -> FlagSet:
    defaults = Options()
    flags = FlagSet("nsqlookupd")
    flags.add("config", "string", "", "path to config file")
    flags.add("version", "bool", False, "print version string")
    flags.add("log-level", "string", "info",
              "set log verbosity: debug, info, warn, error, or fatal")
    flags.add("log-prefix", "string", defaults.log_prefix, "log message prefix")
    flags.add("verbose", "bool", False, "[deprecated] has no effect, use --log-level",
              deprecated=True)
    flags.add("tcp-address", "string", defaults.tcp_address,
              "<addr>:<port> to listen on for TCP clients")
    flags.add("http-address", "string", defaults.http_address,
              "<addr>:<port> to listen on for HTTP clients")
    flags.add("broadcast-address", "string", defaults.broadcast_address,
              "address of this lookupd node, (default to the OS hostname)")
    flags.add("inactive-producer-timeout", "duration", defaults.inactive_producer_timeout,
              "duration of time a producer will remain in the active list since its last ping")
    flags.add("tombstone-lifetime", "duration", defaults.tombstone_lifetime,
              "duration of time a producer will remain tombstoned if registration remains")
    return flags


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
    if "log_level" in given:
        _log_level(values["log_level"], flag=True)
    if values["config"] and not values["version"]:
        try:
            flags.apply_config_file(values["config"], values, given)
        except FlagError as exc:
            raise ConfigError(str(exc)) from None
    return Parsed(_options(values), bool(values["version"]))


def _log_level(value: Any, *, flag: bool) -> LogLevel:
    try:
        return LogLevel.parse(str(value))
    except ValueError as exc:
        if flag:
            raise FlagError(
                f"invalid value {go_quote(str(value))} for flag -log-level: {exc}") from None
        raise ConfigError(f"failed parsing log_level {value}") from None


def _options(values: dict[str, Any]) -> Options:
    return Options(
        tcp_address=values["tcp_address"],
        http_address=values["http_address"],
        broadcast_address=values["broadcast_address"],
        inactive_producer_timeout=values["inactive_producer_timeout"],
        tombstone_lifetime=values["tombstone_lifetime"],
        log_level=_log_level(values["log_level"], flag=False),
        log_prefix=values["log_prefix"],
    )
