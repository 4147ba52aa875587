"""nsqd's options: NSQ's flag names, defaults and config-file keys (cf. nsqd/options.go).

``build_flagset`` describes every flag; ``Options`` is the frozen result the daemon runs with,
``Settings`` the few values ``PUT /config`` changes at run time.
Durations are seconds (floats) inside Python; the wire and /config show them as NSQ does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .flags import build_flagset, check, default_node_id

__all__ = ["Options", "Settings", "build_flagset", "default_node_id"]


@attrs.frozen(kw_only=True)
class Options:
    """The values nsqd runs with, named by config key (as /config/<key> names them).

    Frozen, lists as tuples: nothing changes them once nsqd runs. The few settings that can
    change at run time (``PUT /config/<key>``) start from here and live in ``Settings``.
    Defaults come from ``build_flagset``, the one place that declares them.
    """

    config: str
    version: bool
    verbose: bool
    log_level: str
    log_prefix: str
    id: int
    https_address: str
    http_address: str
    tcp_address: str
    broadcast_address: str
    broadcast_tcp_port: int
    broadcast_http_port: int
    nsqlookupd_tcp_addresses: tuple[str, ...]
    http_client_connect_timeout: float
    http_client_request_timeout: float
    data_path: str
    export_go_data_path: str
    mem_queue_size: int
    max_bytes_per_file: int
    sync_every: int
    sync_timeout: float
    queue_scan_worker_pool_max: int
    queue_scan_selection_count: int
    msg_timeout: float
    max_msg_timeout: float
    max_msg_size: int
    max_req_timeout: float
    max_body_size: int
    max_heartbeat_interval: float
    max_rdy_count: int
    max_attempts: int
    max_output_buffer_size: int
    max_output_buffer_timeout: float
    min_output_buffer_timeout: float
    output_buffer_timeout: float
    max_channel_consumers: int
    statsd_address: str
    statsd_prefix: str
    statsd_interval: float
    statsd_mem_stats: bool
    statsd_udp_packet_size: int
    statsd_exclude_ephemeral: bool
    e2e_processing_latency_percentiles: tuple[float, ...]
    e2e_processing_latency_window_time: float
    auth_http_addresses: tuple[str, ...]
    tls_cert: str
    tls_key: str
    tls_client_auth_policy: str
    tls_root_ca_file: str
    tls_required: str
    tls_min_version: str
    deflate: bool
    max_deflate_level: int
    snappy: bool
    lmstfy_http_address: str
    lmstfy_admin_http_address: str
    lmstfy_admin_accounts: tuple[str, ...]
    etcd_endpoints: tuple[str, ...]
    default_replicas: int
    min_insync_replicas: int
    replica_lag_max: float
    replica_down_timeout: float

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Options:
        """Options from the flag set's values (``FlagSet.parse_command_line``/``defaults``).

        Raises:
            TypeError: a key that is not an option, or a missing one.
        """
        fields: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value
                                  for key, value in values.items()}
        return cls(**fields)

    @classmethod
    def defaults(cls, **overrides: Any) -> Options:
        values = build_flagset().defaults()
        unknown = set(overrides) - values.keys()
        if unknown:
            raise TypeError(f"unknown options: {sorted(unknown)}")
        values.update(overrides)
        return cls.from_values(values)

    @staticmethod
    def keys() -> list[str]:
        """Every option's config key."""
        return [field.name for field in attrs.fields(Options)]

    def value(self, key: str) -> Any:
        """The option named ``key`` (a config key from ``keys()``)."""
        return getattr(self, key)

    def validate(self) -> None:
        """NSQ's start-up checks (``flags.check``, which the command runs on the flag values
        before it builds the Options).

        Raises:
            ValueError: with NSQ's message.
        """
        check(attrs.asdict(self, recurse=False))


@attrs.define(eq=False)
class Settings:
    """What ``PUT /config/<key>`` may change while nsqd runs: the one mutable part of the
    configuration (everything else is ``Options``, frozen)."""

    log_level: str
    nsqlookupd_tcp_addresses: list[str]

    @classmethod
    def from_options(cls, opts: Options) -> Settings:
        return cls(opts.log_level, list(opts.nsqlookupd_tcp_addresses))

    @staticmethod
    def keys() -> list[str]:
        return [field.name for field in attrs.fields(Settings)]
