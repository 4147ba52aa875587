"""nsqd pushes its stats to a statsd listener (a UDP socket of this test, on loopback)."""

import socket

from nsq_common import commands
from nsq_testing import DEADLINE, WireClient


async def test_statsd_lines(run_daemon):
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client = None
    try:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(DEADLINE)  # a push comes every 200 ms on a quiet machine
        port = listener.getsockname()[1]
        daemon = run_daemon("nsqd", f"--statsd-address=127.0.0.1:{port}", "--statsd-interval=200ms",
                            "--statsd-prefix=nsq.%s", "--broadcast-address=host.example")
        client = await WireClient.connect(daemon.tcp_address)
        await client.subscribe("sd", "c")
        await client.send(commands.mpub("sd", [b"a", b"bb"]))
        assert await client.response() == b"OK"
        prefix = f"nsq.host_example_{daemon.http_port}."
        lines: set[str] = set()
        # one push ends with mem.gc_runs; take pushes until one has seen the messages
        while True:
            push: set[str] = set()
            while not any(line.startswith(f"{prefix}mem.gc_runs:") for line in push):
                push.update(listener.recv(65536).decode().split("\n"))
            lines |= push
            if f"{prefix}topic.sd.message_count:2|c" in push:
                break
        assert all(len(line) < 508 for line in lines)
        assert f"{prefix}topic.sd.message_bytes:3|c" in lines
        assert f"{prefix}topic.sd.channel.c.depth:2|g" in lines
        assert f"{prefix}topic.sd.channel.c.clients:1|g" in lines
        assert any(line.startswith(f"{prefix}mem.heap_objects:") for line in lines)
        # the next push sends the counters as deltas: 0 now
        later: set[str] = set()
        while not any(line.startswith(f"{prefix}mem.gc_runs:") for line in later):
            later.update(listener.recv(65536).decode().split("\n"))
        assert f"{prefix}topic.sd.message_count:0|c" in later
    finally:
        listener.close()
        if client is not None:
            await client.aclose()
