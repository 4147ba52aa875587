"""Soak: a long run under churn, out of the default run (``-m slow``).

One publisher keeps publishing while two consumers come and go (one is dropped without a
word, leaving messages in flight) and nsqd is stopped and started three times; at the end
every acknowledged message has been delivered at least once.
"""

import signal

import pytest
import trio
from nsq_common import commands
from nsq_testing import WireClient, free_port

pytestmark = pytest.mark.slow

TOTAL = 300_000
PER_PHASE = 17_000  # at least, whatever the machine's speed: over 50,000 in all


async def test_churn_publishers_consumers_and_restarts(run_daemon, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    tcp, http = free_port(), free_port()
    args = ["--mem-queue-size=2000", f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp}",
            f"--http-address=127.0.0.1:{http}"]
    acknowledged: set[bytes] = set()
    delivered: set[bytes] = set()
    published = 0
    daemon = run_daemon("nsqd", *args)
    first = await WireClient.connect(daemon.tcp_address)
    await first.subscribe("soak", "c")  # the channel exists from the start
    await first.aclose()

    async def publisher(until: float, at_least: int) -> None:
        # for the phase's time and, on a slow machine, until it has published its share
        nonlocal published
        client = await WireClient.connect(daemon.tcp_address)
        try:
            while (trio.current_time() < until or published < at_least) and published < TOTAL:
                batch = [b"s-%d" % (published + i) for i in range(100)]
                await client.send(commands.mpub("soak", batch))
                if await client.response() != b"OK":
                    return
                acknowledged.update(batch)
                published += 100
        except (EOFError, trio.BrokenResourceError, trio.TooSlowError):
            pass
        finally:
            await client.aclose()

    async def consumer(until: float, rdy: int, answer: bool) -> None:
        client = await WireClient.connect(daemon.tcp_address)
        try:
            await client.subscribe("soak", "c", rdy)
            while trio.current_time() < until:
                try:
                    msg = await client.message(timeout=0.5)
                except trio.TooSlowError:
                    continue
                if answer:
                    delivered.add(msg.body)
                    await client.send(commands.fin(msg.id))
        except (EOFError, trio.BrokenResourceError):
            pass
        finally:
            await client.aclose()  # a silent consumer just goes: its messages come back

    for phase in range(3):
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher, start + 8, (phase + 1) * PER_PHASE)
            nursery.start_soon(consumer, start + 8, 500, True)
            nursery.start_soon(consumer, start + 3, 200, False)
        assert daemon.stop(signal.SIGTERM) == 0
        daemon = run_daemon("nsqd", *args)

    with trio.fail_after(300):
        while len(delivered) < len(acknowledged):
            before = len(delivered)
            await consumer(trio.current_time() + 15, 2500, True)  # 15 s with none: all there is
            if len(delivered) == before:
                break
    missing = acknowledged - delivered
    print(f"published {published}, acknowledged {len(acknowledged)}, delivered {len(delivered)}")
    assert published > 50_000
    assert not missing, f"{len(missing)} acknowledged messages never delivered"
