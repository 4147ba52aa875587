"""Throughput benchmark for nsqd, in the spirit of NSQ's bench_writer and bench_reader.

Run it from the repository root with ``python -m bench`` (or ``make bench-tcp``); see
``docs/performance.md`` for the scenarios and targets.

The client side is deliberately plain: blocking sockets, pre-encoded commands, one process per
connection, frames parsed by offset in one big receive buffer. It should never be what limits
the figures; nsqd should be. ``--client library`` runs the same scenarios with the workspace's
client library instead (``bench.library``), side by side with the raw clients.
"""
