"""Two consumers with very different RDY windows on one channel, over real TCP: one publish fills
both windows at once, and nothing is left waiting for a FIN, a publish or a timeout to wake the
channel (a batching consumer would otherwise sit idle for a whole msg_timeout)."""

import httpx
import trio
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient

WAIT = 20.0  # generous: a quiet machine needs well under a second; msg_timeout is 60 s


async def ready_counts(daemon, topic):
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        doc = (await http.get(f"http://{daemon.http_address}/stats",
                              params={"format": "json", "topic": topic})).json()
    channel = doc["topics"][0]["channels"][0]
    return sorted(c["ready_count"] for c in channel["clients"])


async def test_a_small_window_beside_a_big_one_leaves_nothing_queued(nsqd):
    topic = "spread"
    small = await WireClient.connect(nsqd.tcp_address)
    big = await WireClient.connect(nsqd.tcp_address)
    pub = await WireClient.connect(nsqd.tcp_address)
    try:
        await small.subscribe(topic, "c", rdy=1)
        await big.subscribe(topic, "c", rdy=100)
        with trio.fail_after(WAIT):  # RDY has no answer: wait until nsqd has applied both
            while await ready_counts(nsqd, topic) != [1, 100]:
                await trio.sleep(0.02)

        await pub.send(commands.mpub(topic, [b"%d" % i for i in range(101)]))
        assert await pub.response(WAIT) == b"OK"

        got_small = await small.messages(1, WAIT)
        got_big = await big.messages(100, WAIT)
        bodies = sorted(int(m.body) for m in got_small + got_big)
        assert bodies == list(range(101))
    finally:
        for client in (small, big, pub):
            await client.aclose()
