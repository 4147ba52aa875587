"""Push stats to statsd over UDP every ``--statsd-interval``, with nsqd's metric names.

Counters (``|c``) are deltas since the previous push, gauges (``|g``) current values. The key
prefix is ``--statsd-prefix`` with ``%s`` replaced by ``<broadcast address>_<http port>`` (dots
and colons made underscores), ending in a dot. Lines are packed into datagrams of at most
``--statsd-udp-packet-size`` bytes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import trio

from .stats import channel_stats, memory_stats

if TYPE_CHECKING:
    from .options import Options
    from .topic import Topic


class StatsdSource(Protocol):
    """What the statsd pusher reads of the broker (``broker.Broker`` is one)."""

    opts: Options
    http_port: int
    topics: dict[str, Topic]


log = logging.getLogger("nsqd")


def prefix(template: str, broadcast_address: str, http_port: int) -> str:
    host = f"{broadcast_address}_{http_port}".replace(".", "_").replace(":", "_")
    out = template.replace("%s", host) if "%s" in template else template
    return out if out.endswith(".") or not out else out + "."


class StatsdState:
    """The counters of the previous push, to send deltas."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}

    def delta(self, key: str, value: int) -> int:
        before = self.last.get(key, 0)
        self.last[key] = value
        return max(0, value - before)


# What is sent of each topic and channel, in nsqd's order: (name, /stats field, kind); a
# counter ("c") goes as its change since the previous push, a gauge ("g") as it is.
TOPIC_FIGURES = (("message_count", "message_count", "c"), ("message_bytes", "message_bytes", "c"),
                 ("depth", "depth", "g"), ("backend_depth", "backend_depth", "g"))
CHANNEL_FIGURES = (
    ("message_count", "message_count", "c"), ("depth", "depth", "g"),
    ("backend_depth", "backend_depth", "g"), ("in_flight_count", "in_flight_count", "g"),
    ("deferred_count", "deferred_count", "g"), ("requeue_count", "requeue_count", "c"),
    ("timeout_count", "timeout_count", "c"), ("clients", "client_count", "g"),
)


def collect(broker: StatsdSource, state: StatsdState, key_prefix: str) -> list[str]:
    """Every statsd line for this push."""
    opts = broker.opts
    lines: list[str] = []

    def send(name: str, value: int, kind: str) -> None:
        sent = state.delta(name, value) if kind == "c" else value
        lines.append(f"{key_prefix}{name}:{sent}|{kind}")

    def send_figures(stem: str, source: object, figures: tuple[tuple[str, str, str], ...]
                     ) -> None:
        for name, field, kind in figures:
            send(f"{stem}.{name}", getattr(source, field), kind)

    for topic in list(broker.topics.values()):
        if topic.ephemeral and opts.statsd_exclude_ephemeral:
            continue
        send_figures(f"topic.{topic.name}", topic, TOPIC_FIGURES)
        for channel in list(topic.channels.values()):
            if channel.ephemeral and opts.statsd_exclude_ephemeral:
                continue
            send_figures(f"topic.{topic.name}.channel.{channel.name}",
                         channel_stats(channel, include_clients=False), CHANNEL_FIGURES)
    if opts.statsd_mem_stats:
        mem = memory_stats()
        # every figure of /stats's memory as a gauge but the GC runs, sent as a counter
        for key, value in mem.to_json().items():
            if key != "gc_total_runs":
                send(f"mem.{key}", value, "g")
        send("mem.gc_runs", mem.gc_total_runs, "c")
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
