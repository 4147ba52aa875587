"""nsqadmin's background sampler against a real nsqlookupd and nsqd: with nobody looking it asks
the lookupd for ``/nodes`` once and then samples the nsqd it knows (nsqlookupd logs every
request, as Go's does: ``make run`` showed a ``GET /nodes`` line every refresh interval with no
dashboard open); a page or API request, or a known nsqd that stops answering, makes it ask again.

What the lookupd was asked is read from its log, between two requests of the test's own
(``/nodes?mark=...``): every request it answered before a mark is logged above that mark's line.
"""

from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from nsq_testing import DEADLINE, start_daemon, until
from nsqadmin import Options, create_app
from nsqadmin.history import History
from nsqadmin.sampler import VIEWED_WITHIN

INTERVAL = 0.05  # --refresh-interval: samples are counted, never timed


@pytest.fixture(scope="module")
def lookupd():
    daemon = start_daemon("nsqlookupd", ["--tcp-address=127.0.0.1:0",
                                         "--http-address=127.0.0.1:0"])
    yield daemon
    daemon.stop()


def start_nsqd(lookupd, data):
    return start_daemon("nsqd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                                 "--broadcast-address=127.0.0.1", f"--data-path={data}",
                                 f"--lookupd-tcp-address={lookupd.tcp_address}"])


async def registered(lookupd, *nsqds):
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        async def listed():
            body = (await http.get(f"http://{lookupd.http_address}/nodes")).json()
            ports = {p["http_port"] for p in body["producers"]}
            return all(d.http_port in ports for d in nsqds)

        await until(listed, what="every nsqd registered with nsqlookupd")


@pytest.fixture(scope="module")
def nsqd(lookupd, tmp_path_factory):
    daemon = start_nsqd(lookupd, tmp_path_factory.mktemp("sampler-nsqd"))
    trio.run(registered, lookupd, daemon)
    yield daemon
    daemon.stop()


async def mark(lookupd, name: str) -> None:
    """Ask lookupd for ``/nodes?mark=name`` and wait for its log line."""
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        (await http.get(f"http://{lookupd.http_address}/nodes",
                        params={"mark": name})).raise_for_status()
    await until(lambda: f"GET /nodes?mark={name} " in lookupd.output(),
                what=f"lookupd's log line of mark {name}")


def nodes_asked(lookupd, after: str, before: str | None = None) -> int:
    """How many ``GET /nodes`` (without a mark) lookupd logged between two marks."""
    text = lookupd.output()
    start = text.index(f"GET /nodes?mark={after} ")
    end = text.index(f"GET /nodes?mark={before} ") if before else len(text)
    return text[start:end].count("GET /nodes (")


@asynccontextmanager
async def sampling_admin(lookupd, nursery):
    """An in-process nsqadmin on ``lookupd`` with its background sampler running: (a client of
    its pages, a function giving how many samples of ``node`` it has taken)."""
    history = History(min_spacing=0.001)  # every sample is a point of the finest tier
    app = create_app(Options(nsqlookupd_http_addresses=[lookupd.http_address],
                             refresh_interval=INTERVAL), history=history)
    done, stopped = trio.Event(), trio.Event()

    async def lifespan():
        try:
            async with app.router.lifespan_context(app):
                await done.wait()
        finally:
            stopped.set()

    nursery.start_soon(lifespan)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://admin.test") as client:
            yield client, lambda node: len(history.points(("depth", "", "", node.http_address)))
    finally:
        done.set()
        await stopped.wait()


async def samples_reach(samples, node, count: int) -> int:
    return await until(lambda: samples(node) >= count and samples(node),
                       what=f"{count} samples of {node.http_address}")


async def test_nobody_looking_no_nodes_asked_a_view_asks_again(lookupd, nsqd, nursery):
    await mark(lookupd, "before")
    async with sampling_admin(lookupd, nursery) as (client, samples):
        await samples_reach(samples, nsqd, 10)
        await mark(lookupd, "quiet")
        assert nodes_asked(lookupd, "before", "quiet") == 1  # at its first sample only

        # a page's graphs, which draw from memory and ask the cluster nothing themselves
        viewed = await client.get(f"/graphs/nodes/{nsqd.http_address}")
        assert viewed.status_code == 200
        seen = samples(nsqd)
        await until(lambda: nodes_asked(lookupd, "quiet") >= 1,
                    what="the sampler asks lookupd for /nodes again after a view")

        # each sample after the first one that ends after the view starts at least an interval
        # after the one before: from this one on, the view is more than VIEWED_WITHIN old
        await samples_reach(samples, nsqd, seen + VIEWED_WITHIN + 3)
        await mark(lookupd, "left")
        await samples_reach(samples, nsqd, samples(nsqd) + 10)
        await mark(lookupd, "quiet_again")
        assert nodes_asked(lookupd, "left", "quiet_again") == 0


async def test_a_node_that_stops_answering_makes_it_ask_again(lookupd, nsqd, nursery,
                                                              tmp_path):
    other = start_nsqd(lookupd, tmp_path)
    try:
        await registered(lookupd, nsqd, other)
        async with sampling_admin(lookupd, nursery) as (_, samples):
            await samples_reach(samples, other, 2)
            await samples_reach(samples, nsqd, samples(nsqd) + 10)
            await mark(lookupd, "both")
            other.kill()  # gone without unregistering: lookupd lists it a while yet
            await until(lambda: nodes_asked(lookupd, "both") >= 1,
                        what="the sampler asks lookupd for /nodes when an nsqd fails")
            seen = samples(nsqd)
            await samples_reach(samples, nsqd, seen + 2)  # the one left is still sampled
    finally:
        other.stop()
