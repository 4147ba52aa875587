"""nsqd's flags: NSQ's names, defaults, help texts and config-file keys (cf. nsqd/options.go),
and NSQ's start-up checks of their values (``check``).

Apart from ``options`` (which makes the frozen ``Options`` of them) so that the command parses
and checks its flags without loading attrs: the early start waits for them
(docs/performance.md).
"""

from __future__ import annotations

import socket
import zlib

from nsq_common import NSQ_LOG_LEVELS, FlagSet

TYPE_CHECKING = False
if TYPE_CHECKING:  # no run-time import: the early start waits for this module
    from collections.abc import Mapping
    from typing import Any


def default_node_id() -> int:
    """NSQ's default: crc32 of md5(hostname), modulo 1024."""
    return node_id_of(socket.gethostname())


def node_id_of(hostname: str) -> int:
    """crc32 of md5(``hostname``), modulo 1024, as NSQ computes its default node id."""
    return zlib.crc32(_md5(hostname.encode())) % 1024


def _md5(data: bytes) -> bytes:
    """The MD5 digest of ``data``, by CPython's own small ``_md5`` module where the build has
    it: ``hashlib`` loads OpenSSL, the largest import of a start before its early OK."""
    try:
        from _md5 import md5  # type: ignore[import-not-found]  # (no stubs: CPython's own)
    except ImportError:  # a build without it
        from hashlib import md5
    digest: bytes = md5(data).digest()
    return digest


def build_flagset() -> FlagSet:
    fs = FlagSet("nsqd")
    add = fs.add
    add("config", "string", "", "path to config file")
    add("version", "bool", False, "print version string")
    add("verbose", "bool", False, "[deprecated] has no effect, use --log-level", deprecated=True)
    add("log-level", "string", "info", "set log verbosity: debug, info, warn, error, or fatal")
    add("log-prefix", "string", "[nsqd] ", "log message prefix")
    add("node-id", "int", default_node_id(), "unique part for message IDs, (int) in range [0,1024) "
        "(default is hash of hostname)", config_key="id")
    add("https-address", "string", "0.0.0.0:4152", "<addr>:<port> to listen on for HTTPS clients")
    add("http-address", "string", "0.0.0.0:4151", "<addr>:<port> to listen on for HTTP clients")
    add("tcp-address", "string", "0.0.0.0:4150", "<addr>:<port> to listen on for TCP clients")
    add("broadcast-address", "string", socket.gethostname(),
        "address that will be registered with lookupd (defaults to the OS hostname)")
    add("broadcast-tcp-port", "int", 0, "TCP port that will be registered with lookupd "
        "(defaults to the TCP port that this nsqd is listening on)")
    add("broadcast-http-port", "int", 0, "HTTP port that will be registered with lookupd "
        "(defaults to the HTTP port that this nsqd is listening on)")
    add("lookupd-tcp-address", "strings", [], "lookupd TCP address (may be given multiple times)",
        config_key="nsqlookupd_tcp_addresses")
    add("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
    add("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request")
    add("data-path", "string", "", "path to store disk-backed messages")
    add("export-go-data-path", "string", "", "offline: write into this empty directory a data "
        "directory Go's nsqd 1.3 starts on, holding every message of --data-path not finished "
        "yet, then exit (nsqd must not be running on --data-path)")
    add("mem-queue-size", "int", 10000,
        "number of messages to keep in memory (per topic/channel)")
    add("max-bytes-per-file", "int", 104857600, "number of bytes per diskqueue file before rolling")
    add("sync-every", "int", 2500, "number of messages per diskqueue fsync")
    add("sync-timeout", "duration", 2.0, "duration of time per diskqueue fsync")
    add("queue-scan-worker-pool-max", "int", 4, "max concurrency for checking in-flight and deferred "
        "message timeouts")
    add("queue-scan-selection-count", "int", 20, "number of channels to check per cycle (every 100ms) "
        "for in-flight and deferred timeouts")
    add("msg-timeout", "duration", 60.0, "default duration to wait before auto-requeing a message")
    add("max-msg-timeout", "duration", 900.0, "maximum duration before a message will timeout")
    add("max-msg-size", "int", 1048576, "maximum size of a single message in bytes")
    add("max-req-timeout", "duration", 3600.0, "maximum requeuing timeout for a message")
    add("max-body-size", "int", 5242880, "maximum size of a single command body")
    add("max-heartbeat-interval", "duration", 60.0,
        "maximum client configurable duration of time between client heartbeats")
    add("max-rdy-count", "int", 2500, "maximum RDY count for a client")
    add("max-attempts", "int", 0, "deliveries of a message on a channel before it goes to the "
        "channel's dead-letter queue, for channels without their own max_attempts (0: unlimited, "
        "as in NSQ)")
    add("max-output-buffer-size", "int", 65536,
        "maximum client configurable size (in bytes) for a client output buffer")
    add("max-output-buffer-timeout", "duration", 30.0, "maximum client configurable duration of "
        "time between flushing to a client")
    add("min-output-buffer-timeout", "duration", 0.025, "minimum client configurable duration of "
        "time between flushing to a client")
    add("output-buffer-timeout", "duration", 0.25,
        "default duration of time between flushing data to clients")
    add("max-channel-consumers", "int", 0, "maximum channel consumer connection count per nsqd "
        "instance (default 0, i.e., unlimited)")
    add("statsd-address", "string", "", "UDP <addr>:<port> of a statsd daemon for pushing stats")
    add("statsd-prefix", "string", "nsq.%s", "prefix used for keys sent to statsd (%s for host "
        "replacement)")
    add("statsd-interval", "duration", 60.0, "duration between pushing to statsd")
    add("statsd-mem-stats", "bool", True, "toggle sending memory and GC stats to statsd")
    add("statsd-udp-packet-size", "int", 508, "the size in bytes of statsd UDP packets")
    add("statsd-exclude-ephemeral", "bool", False, "Skip ephemeral topics and channels when "
        "sending stats to statsd")
    add("e2e-processing-latency-percentile", "floats", [], "message processing time percentiles "
        "(as float (0, 1.0]) to track (can be specified multiple times or comma separated "
        "'1.0,0.99,0.95', default none)", config_key="e2e_processing_latency_percentiles")
    add("e2e-processing-latency-window-time", "duration", 600.0, "calculate end to end latency "
        "quantiles for this duration of time (ie: 60s would only show quantile calculations "
        "from the past 60 seconds)")
    add("auth-http-address", "strings", [], "<addr>:<port> or a full url to query auth server "
        "(may be given multiple times)", config_key="auth_http_addresses")
    add("tls-cert", "string", "", "path to certificate file")
    add("tls-key", "string", "", "path to key file")
    add("tls-client-auth-policy", "string", "", "client certificate auth policy ('require' or "
        "'require-verify')")
    add("tls-root-ca-file", "string", "", "path to certificate authority file")
    add("tls-required", "string", "false", "require TLS for client connections (true, false, "
        "tcp-https)")
    add("tls-min-version", "string", "tls1.0", "minimum SSL/TLS version acceptable ('ssl3.0', "
        "'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')")
    add("deflate", "bool", True, "enable deflate feature negotiation (client compression)")
    add("max-deflate-level", "int", 6, "max deflate compression level a client can negotiate "
        "(> values == > nsqd CPU usage)")
    add("snappy", "bool", True, "enable snappy feature negotiation (client compression)")
    add("lmstfy-http-address", "string", "", "<addr>:<port> to listen on for lmstfy's job-queue "
        "HTTP API (lmstfy's port is 7777; default off)")
    add("lmstfy-admin-http-address", "string", "", "<addr>:<port> to listen on for lmstfy's "
        "admin HTTP API: tokens, limits, info, metrics (lmstfy's port is 7778; default off)")
    add("lmstfy-admin-account", "strings", [], "<user>:<password> allowed to manage lmstfy "
        "tokens and limits with HTTP basic auth (may be given multiple times; default: no auth)",
        config_key="lmstfy_admin_accounts")
    add("etcd-endpoints", "strings", [], "etcd v3 client URL(s) (http://<addr>:<port>, comma "
        "separated or given multiple times) of the cluster that coordinates replicated topics "
        "(default none: no replication)")
    add("default-replicas", "int", 1, "replicas of a topic created without replicas=N "
        "(with --etcd-endpoints)")
    add("min-insync-replicas", "int", 2, "in-sync replicas (at most the topic's replicas) "
        "that must hold a message before its publish is acknowledged (with --etcd-endpoints)")
    add("replica-lag-max", "duration", 10.0, "how long a follower may stay behind its leader "
        "before it leaves the in-sync set (with --etcd-endpoints)")
    add("replica-down-timeout", "duration", 300.0, "how long a replica's node may be gone "
        "before the replica is placed on another node (with --etcd-endpoints)")
    return fs


def etcd_endpoints(values: Mapping[str, Any]) -> list[str]:
    """The etcd endpoints given (each --etcd-endpoints value split at commas)."""
    return [e.strip() for v in values["etcd_endpoints"] for e in v.split(",") if e.strip()]


def check(values: Mapping[str, Any]) -> None:
    """NSQ's start-up checks of the options (``values`` by config key, as
    ``FlagSet.parse_command_line`` gives them, or an ``Options``' fields).

    Raises:
        ValueError: with NSQ's message.
    """
    if not 0 <= values["id"] < 1024:
        raise ValueError("--node-id must be [0,1024)")
    if not 1 <= values["max_deflate_level"] <= 9:
        raise ValueError("--max-deflate-level must be [1,9]")
    if values["log_level"].lower() not in NSQ_LOG_LEVELS:
        raise ValueError(f"invalid log level {values['log_level']!r}")
    for p in values["e2e_processing_latency_percentiles"]:
        if not 0 < p <= 1:
            raise ValueError(f"invalid E2E processing latency percentile: {p}")
    for account in values["lmstfy_admin_accounts"]:
        if ":" not in account:
            raise ValueError(f"invalid --lmstfy-admin-account {account!r} (user:password)")
    for endpoint in etcd_endpoints(values):
        scheme, sep, rest = endpoint.partition("://")
        if scheme not in ("http", "https") or not sep or not rest.strip("/"):
            raise ValueError(f"invalid --etcd-endpoints {endpoint!r} (http://<addr>:<port>)")
    if values["default_replicas"] < 1:
        raise ValueError("--default-replicas must be at least 1")
    if values["min_insync_replicas"] < 1:
        raise ValueError("--min-insync-replicas must be at least 1")
    if values["tls_client_auth_policy"] and not (values["tls_cert"] and values["tls_key"]):
        raise ValueError("cannot require TLS client connections without TLS key and cert")
