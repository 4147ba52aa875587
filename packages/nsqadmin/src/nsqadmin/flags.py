"""nsqadmin's flags: the Go nsqadmin's names, defaults, help texts and config-file keys (cf.
apps/nsqadmin/main.go).

``check`` is the Go nsqadmin's start-up checks of their values. Apart from ``options`` (which
makes the frozen ``Options`` of them) so that the command parses and checks its flags without
loading attrs: the early start waits for them (docs/performance.md).
"""

from __future__ import annotations

import posixpath

from nsq_common import FlagSet

TYPE_CHECKING = False
if TYPE_CHECKING:  # no run-time import: the early start waits for this module
    from collections.abc import Mapping
    from typing import Any

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


def check(values: Mapping[str, Any]) -> None:
    """The Go nsqadmin's start-up checks of the options (``values`` by config key, as
    ``FlagSet.parse_command_line`` gives them, or an ``Options``' fields).

    Raises:
        ValueError: with the Go nsqadmin's message.
    """
    if not values["nsqd_http_addresses"] and not values["nsqlookupd_http_addresses"]:
        raise ValueError("--nsqd-http-address or --lookupd-http-address required")
    if values["nsqd_http_addresses"] and values["nsqlookupd_http_addresses"]:
        raise ValueError("use --nsqd-http-address or --lookupd-http-address not both")
    if values["http_client_tls_cert"] and not values["http_client_tls_key"]:
        raise ValueError("--http-client-tls-key must be specified with --http-client-tls-cert")
    if values["http_client_tls_key"] and not values["http_client_tls_cert"]:
        raise ValueError("--http-client-tls-cert must be specified with --http-client-tls-key")
    log_level = values["log_level"]
    if log_level.lower() not in LOG_LEVELS:
        raise ValueError(f"invalid log level {log_level!r}")
    for flag, addresses in (("--lookupd-http-address", values["nsqlookupd_http_addresses"]),
                            ("--nsqd-http-address", values["nsqd_http_addresses"])):
        for address in addresses:
            scheme, sep, rest = address.partition("://")
            if sep and scheme not in ("http", "https"):
                raise ValueError(f"failed to resolve {flag} ({address}) - unsupported scheme "
                                 f"{scheme!r} (http:// or https://)")
            _, sep, port = (rest if sep else address).rstrip("/").rpartition(":")
            if not sep or not (port.isascii() and port.isdigit()):
                raise ValueError(f"failed to resolve {flag} ({address}) - address {address}: "
                                 "missing port in address")
    if values["proxy_graphite"] and not values["graphite_url"]:
        raise ValueError("--proxy-graphite requires --graphite-url")
    cidr = values["allow_config_from_cidr"]
    if cidr:
        import ipaddress  # here: --help and --version need not load it

        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError as exc:
            raise ValueError(f"failed to parse --allow-config-from-cidr ({cidr}) - {exc}") from None
    if values["refresh_interval"] <= 0:
        raise ValueError("--refresh-interval must be positive")
    if values["history_save_interval"] <= 0:
        raise ValueError("--history-save-interval must be positive")
    if values["history_max_series"] < 1:
        raise ValueError("--history-max-series must be at least 1")
    if values["lmstfy_admin_account"] and ":" not in values["lmstfy_admin_account"]:
        raise ValueError("invalid --lmstfy-admin-account (<user>:<password>)")
