"""nsqadmin's options: the Go nsqadmin's flag names, defaults and config-file keys.

``build_flagset`` describes every flag (cf. apps/nsqadmin/main.go); ``Options`` is the frozen,
validated result the server runs with. Durations are seconds (floats).
"""

from __future__ import annotations

from typing import Any

import attrs

from .flags import LOG_LEVELS, build_flagset, check, normalize_base_path

__all__ = ["LOG_LEVELS", "Options", "build_flagset", "normalize_base_path"]


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
        """The Go nsqadmin's start-up checks (``flags.check``, which the command runs on the
        flag values before it builds the Options).

        Raises:
            ValueError: with the Go nsqadmin's message.
        """
        check(attrs.asdict(self, recurse=False))
