"""nsq_auth's flags (Go syntax, through ``nsq_common.FlagSet``) and the frozen ``Options``."""

from __future__ import annotations

from typing import Any

import attrs
from nsq_common import FlagSet

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")


@attrs.frozen(kw_only=True)
class Options:
    """What nsq_auth runs with; the defaults are the flags' (``build_flagset``)."""

    http_address: str = "127.0.0.1:4181"
    secrets_file: str = ""
    log_level: str = "info"
    log_prefix: str = "[nsq_auth] "

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> Options:
        names = {f.name for f in attrs.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def validate(self) -> None:
        """Raises: ValueError, worded for the command line."""
        if not self.secrets_file:
            raise ValueError("--secrets-file is required")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ValueError(f"invalid log level {self.log_level!r}")
        _, sep, port = self.http_address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"--http-address ({self.http_address}) - missing port in address")


def build_flagset() -> FlagSet:
    default = Options()
    fs = FlagSet("nsq_auth")
    fs.add("version", "bool", False, "print version string")
    fs.add("http-address", "string", default.http_address, "<addr>:<port> to listen on for HTTP "
           "clients (nsqd's --auth-http-address)")
    fs.add("secrets-file", "string", default.secrets_file, "path to the TOML file of secrets "
           "(required; read again on SIGHUP)")
    fs.add("log-level", "string", default.log_level,
           "set log verbosity: debug, info, warn, error, or fatal")
    fs.add("log-prefix", "string", default.log_prefix, "log message prefix")
    return fs
