"""nsqadmin's options: the Go nsqadmin's flag names, defaults and config-file keys.

``build_flagset`` describes every flag (cf. apps/nsqadmin/main.go); ``Options`` is the frozen,
validated result the server runs with. Durations are seconds (floats).
"""

from __future__ import annotations

import ipaddress
import posixpath
from typing import Any

import attrs
from nsq_common import FlagSet

LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}


def build_flagset() -> FlagSet:
    fs = FlagSet("nsqadmin")
    add = fs.add
    add("config", "string", "", "path to config file")
    add("version", "bool", False, "print version string")
    add("log-level", "string", "info", "set log verbosity: debug, info, warn, error, or fatal")
    add("log-prefix", "string", "[nsqadmin] ", "log message prefix")
    add("verbose", "bool", False, "[deprecated] has no effect, use --log-level", deprecated=True)
    add("http-address", "string", "0.0.0.0:4171", "<addr>:<port> to listen on for HTTP clients")
    add("base-path", "string", "/", "URL base path")
    add("dev-static-dir", "string", "", "(development use only)")
    add("graphite-url", "string", "", "graphite HTTP address")
    add("proxy-graphite", "bool", False, "proxy HTTP requests to graphite")
    add("statsd-counter-format", "string", "stats.counters.%s.count", "The counter stats key "
        "formatting applied by the implementation of statsd. If no formatting is desired, set "
        "this to an empty string.")
    add("statsd-gauge-format", "string", "stats.gauges.%s", "The gauge stats key formatting "
        "applied by the implementation of statsd. If no formatting is desired, set this to an "
        "empty string.")
    add("statsd-prefix", "string", "nsq.%s", "prefix used for keys sent to statsd (%s for host "
        "replacement, must match nsqd)")
    add("statsd-interval", "duration", 60.0, "time interval nsqd is configured to push to statsd "
        "(must match nsqd)")
    add("notification-http-endpoint", "string", "", "HTTP endpoint (fully qualified) to which "
        "POST notifications of admin actions will be sent")
    add("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
    add("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request")
    add("http-client-tls-insecure-skip-verify", "bool", False, "configure the HTTP client to skip "
        "verification of TLS certificates")
    add("http-client-tls-root-ca-file", "string", "", "path to CA file for the HTTP client")
    add("http-client-tls-cert", "string", "", "path to certificate file for the HTTP client")
    add("http-client-tls-key", "string", "", "path to key file for the HTTP client")
    add("allow-config-from-cidr", "string", "127.0.0.1/8", "A CIDR from which to allow HTTP "
        "requests to the /config endpoint")
    add("acl-http-header", "string", "X-Forwarded-User", "HTTP header to check for "
        "authenticated admin users")
    add("lookupd-http-address", "strings", [], "lookupd HTTP address (may be given multiple "
        "times)", config_key="nsqlookupd_http_addresses")
    add("nsqd-http-address", "strings", [], "nsqd HTTP address (may be given multiple times)",
        config_key="nsqd_http_addresses")
    add("admin-user", "strings", [], "admin user (may be given multiple times; if specified, only "
        "these users will be able to perform privileged actions; acl-http-header is used to "
        "determine the authenticated user)", config_key="admin_users")
    # Ours, not the Go nsqadmin's.
    add("admin-basic-auth-file", "string", "", "file of user:pbkdf2_sha256$... lines (made with "
        "python -m nsqadmin.passwd); when set, changing the cluster needs HTTP basic auth as "
        "one of these users (and one of --admin-user, if given); reading stays open")
    add("refresh-interval", "duration", 5.0, "how often pages refresh their tables in place and "
        "the cluster is sampled for sparklines and graphs")
    add("history-file", "string", "", "path to a file that keeps the graphs' history across "
        "restarts (written every --history-save-interval and on exit; loaded at start)")
    add("history-save-interval", "duration", 60.0, "how often --history-file is written")
    add("history-max-series", "int", 1000, "most graph series (one metric of one topic, "
        "channel or node; at most ~21 KiB each) kept in memory")
    add("lmstfy-admin-account", "string", "", "<user>:<password> to present to the lmstfy "
        "admin API of the nsqd that serve it (their --lmstfy-admin-account), for the Jobs "
        "pages' tokens, limits and jobs")
    return fs


def normalize_base_path(path: str) -> str:
    """Leading slash, cleaned, as nsqadmin does: ``""`` -> ``/``, ``"admin/"`` -> ``/admin``."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    return posixpath.normpath(path).replace("//", "/")


def _tuple(value: Any) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class Options:
    """What nsqadmin runs with; attribute names are the config-file keys."""

    http_address: str = "0.0.0.0:4171"
    base_path: str = attrs.field(default="/", converter=normalize_base_path)
    log_level: str = "info"
    log_prefix: str = "[nsqadmin] "
    nsqlookupd_http_addresses: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    nsqd_http_addresses: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    notification_http_endpoint: str = ""
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    http_client_tls_insecure_skip_verify: bool = False
    http_client_tls_root_ca_file: str = ""
    http_client_tls_cert: str = ""
    http_client_tls_key: str = ""
    allow_config_from_cidr: str = "127.0.0.1/8"
    acl_http_header: str = "X-Forwarded-User"
    admin_users: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    admin_basic_auth_file: str = ""
    graphite_url: str = ""
    proxy_graphite: bool = False
    statsd_prefix: str = "nsq.%s"
    statsd_counter_format: str = "stats.counters.%s.count"
    statsd_gauge_format: str = "stats.gauges.%s"
    statsd_interval: float = 60.0
    dev_static_dir: str = ""
    refresh_interval: float = 5.0
    history_file: str = ""
    history_save_interval: float = 60.0
    history_max_series: int = 1000
    lmstfy_admin_account: str = ""

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> Options:
        """Build from parsed flag values (keys as ``build_flagset`` names them)."""
        names = {f.name for f in attrs.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    @property
    def lookupd_mode(self) -> bool:
        return bool(self.nsqlookupd_http_addresses)

    def validate(self) -> None:
        """The Go nsqadmin's start-up checks.

        Raises:
            ValueError: with the Go nsqadmin's message.
        """
        if not self.nsqd_http_addresses and not self.nsqlookupd_http_addresses:
            raise ValueError("--nsqd-http-address or --lookupd-http-address required")
        if self.nsqd_http_addresses and self.nsqlookupd_http_addresses:
            raise ValueError("use --nsqd-http-address or --lookupd-http-address not both")
        if self.http_client_tls_cert and not self.http_client_tls_key:
            raise ValueError("--http-client-tls-key must be specified with --http-client-tls-cert")
        if self.http_client_tls_key and not self.http_client_tls_cert:
            raise ValueError("--http-client-tls-cert must be specified with --http-client-tls-key")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ValueError(f"invalid log level {self.log_level!r}")
        for flag, addresses in (("--lookupd-http-address", self.nsqlookupd_http_addresses),
                                ("--nsqd-http-address", self.nsqd_http_addresses)):
            for address in addresses:
                scheme, sep, rest = address.partition("://")
                if sep and scheme not in ("http", "https"):
                    raise ValueError(f"failed to resolve {flag} ({address}) - unsupported scheme "
                                     f"{scheme!r} (http:// or https://)")
                _, sep, port = (rest if sep else address).rstrip("/").rpartition(":")
                if not sep or not (port.isascii() and port.isdigit()):
                    raise ValueError(f"failed to resolve {flag} ({address}) - address {address}: "
                                     "missing port in address")
        if self.proxy_graphite and not self.graphite_url:
            raise ValueError("--proxy-graphite requires --graphite-url")
        if self.allow_config_from_cidr:
            try:
                ipaddress.ip_network(self.allow_config_from_cidr, strict=False)
            except ValueError as exc:
                raise ValueError(f"failed to parse --allow-config-from-cidr "
                                 f"({self.allow_config_from_cidr}) - {exc}") from None
        if self.refresh_interval <= 0:
            raise ValueError("--refresh-interval must be positive")
        if self.history_save_interval <= 0:
            raise ValueError("--history-save-interval must be positive")
        if self.history_max_series < 1:
            raise ValueError("--history-max-series must be at least 1")
        if self.lmstfy_admin_account and ":" not in self.lmstfy_admin_account:
            raise ValueError("invalid --lmstfy-admin-account (<user>:<password>)")
