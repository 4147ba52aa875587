"""Push stats to statsd over UDP every ``--statsd-interval``, with nsqd's metric names.

Counters (``|c``) are deltas since the previous push, gauges (``|g``) current values. The key
prefix is ``--statsd-prefix`` with ``%s`` replaced by ``<broadcast address>_<http port>`` (dots
and colons made underscores), ending in a dot. Lines are packed into datagrams of at most
``--statsd-udp-packet-size`` bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import trio

from .stats import memory_stats

if TYPE_CHECKING:
    from .options import Options
    from .topic import Topic


class StatsdSource(Protocol):
    """What the statsd pusher reads of the broker (``broker.Broker`` is one)."""

    @property
    def opts(self) -> Options: ...
    @property
    def http_port(self) -> int: ...
    @property
    def topics(self) -> Mapping[str, Topic]: ...

log = logging.getLogger("nsqd")


def prefix(template: str, broadcast_address: str, http_port: int) -> str:
    host = f"{broadcast_address}_{http_port}".replace(".", "_").replace(":", "_")
    out = template.replace("%s", host) if "%s" in template else template
    return out if out.endswith(".") or not out else out + "."


class StatsdState:
    """The counters of the previous push, to send deltas."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}
        self.gc_runs = 0

    def delta(self, key: str, value: int) -> int:
        before = self.last.get(key, 0)
        self.last[key] = value
        return max(0, value - before)


def collect(broker: StatsdSource, state: StatsdState, key_prefix: str) -> list[str]:
    """Every statsd line for this push."""
    opts = broker.opts
    lines: list[str] = []

    def counter(name: str, value: int) -> None:
        lines.append(f"{key_prefix}{name}:{state.delta(name, value)}|c")

    def gauge(name: str, value: int) -> None:
        lines.append(f"{key_prefix}{name}:{value}|g")

    for topic in list(broker.topics.values()):
        if topic.ephemeral and opts.statsd_exclude_ephemeral:
            continue
        t = f"topic.{topic.name}"
        counter(f"{t}.message_count", topic.message_count)
        counter(f"{t}.message_bytes", topic.message_bytes)
        gauge(f"{t}.depth", topic.depth)
        gauge(f"{t}.backend_depth", topic.backend_depth)
        for channel in list(topic.channels.values()):
            if channel.ephemeral and opts.statsd_exclude_ephemeral:
                continue
            c = f"{t}.channel.{channel.name}"
            counter(f"{c}.message_count", channel.message_count)
            gauge(f"{c}.depth", channel.depth)
            gauge(f"{c}.backend_depth", channel.backend_depth)
            gauge(f"{c}.in_flight_count", len(channel.in_flight))
            gauge(f"{c}.deferred_count", len(channel.deferred))
            counter(f"{c}.requeue_count", channel.requeue_count)
            counter(f"{c}.timeout_count", channel.timeout_count)
            gauge(f"{c}.clients", len(channel.clients))
    if opts.statsd_mem_stats:
        mem = memory_stats()
        # every figure of /stats's memory as a gauge but the GC runs, sent as a counter
        for key, value in mem.to_json().items():
            if key != "gc_total_runs":
                gauge(f"mem.{key}", value)
        runs = mem.gc_total_runs
        lines.append(f"{key_prefix}mem.gc_runs:{max(0, runs - state.gc_runs)}|c")
        state.gc_runs = runs
    return lines


def packets(lines: list[str], size: int) -> list[bytes]:
    out: list[bytes] = []
    current = b""
    for line in lines:
        data = line.encode()
        if current and len(current) + 1 + len(data) > size:
            out.append(current)
            current = b""
        current = data if not current else current + b"\n" + data
    if current:
        out.append(current)
    return out


async def run_statsd(broker: StatsdSource) -> None:
    opts = broker.opts
    host, _, port = opts.statsd_address.rpartition(":")
    state = StatsdState()
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    with sock:
        while True:
            await trio.sleep(opts.statsd_interval)
            key_prefix = prefix(opts.statsd_prefix, opts.broadcast_address,
                                opts.broadcast_http_port or broker.http_port)
            try:
                for packet in packets(collect(broker, state, key_prefix),
                                      opts.statsd_udp_packet_size):
                    await sock.sendto(packet, (host or "127.0.0.1", int(port)))
            except OSError as exc:
                log.warning("STATSD: failed to send to %s - %s", opts.statsd_address, exc)
