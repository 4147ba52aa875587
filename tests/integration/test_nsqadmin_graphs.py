"""nsqadmin's graphs against a real nsqd: on the topic, channel and node pages, the window
chooser, the refreshable fragment, values equal to nsqd's /stats, and ``--history-file`` across
a restart of the real nsqadmin process."""

import gzip
import itertools
import json
import re
import signal
import time

import httpx
import pytest
import trio
from nsq_testing import DEADLINE, start_daemon, until, wait_until
from nsqadmin import Options, create_app
from nsqadmin.history import History

from ._admin import InProcessAdmins

HTMX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory):
    data = tmp_path_factory.mktemp("graphs-nsqd")
    daemon = start_daemon("nsqd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                                   "--broadcast-address=127.0.0.1", f"--data-path={data}"])
    yield daemon
    daemon.stop()


@pytest.fixture
def history():
    """The in-process nsqadmin's history: its clock moves one (fake) second per reading."""
    ticks = itertools.count(1_700_000_000)
    return History(clock=lambda: float(next(ticks)))


@pytest.fixture
async def admin(nsqd, nursery, history):
    """An in-process nsqadmin (no background sampling: pages sample when they load)."""
    admins = InProcessAdmins(nursery)
    yield await admins.start(
        Options(nsqd_http_addresses=[nsqd.http_address], refresh_interval=2.0), history=history)
    await admins.close()


async def publish(nsqd, topic, count, channel="work"):
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        base = f"http://{nsqd.http_address}"
        (await http.post(f"{base}/topic/create", params={"topic": topic})).raise_for_status()
        (await http.post(f"{base}/channel/create", params={"topic": topic, "channel": channel})
         ).raise_for_status()
        (await http.post(f"{base}/mpub", params={"topic": topic},
                         content=b"\n".join(b"m%d" % n for n in range(count)))).raise_for_status()
        body = (await http.get(f"{base}/stats", params={"format": "json", "topic": topic})).json()
    return body["topics"][0]


def latest(html: str, label: str, chart: int = 0) -> str:
    """The ``data-latest`` of ``label`` in the page's ``chart``-th chart."""
    svg = html.split('<svg class="chart"')[chart + 1]
    return re.search(rf'data-label="{label}" data-latest="([^"]*)"', svg).group(1)


async def test_channel_page_graphs_match_stats(admin, nsqd):
    stats = await publish(nsqd, "gr_orders", 37)
    for _ in range(3):  # three samples (a fake second apart)
        page = (await admin.get("/topics/gr_orders/work")).text
    channel = stats["channels"][0]
    assert latest(page, "Depth") == str(channel["depth"]) == "37"
    assert latest(page, "In flight") == "0"
    assert latest(page, "Rate", chart=1) == "0"
    assert 'id="graphs"' in page and 'hx-get="/graphs/topics/gr_orders/work?window=10m"' in page
    assert 'hx-trigger="every 2s"' in page
    assert re.search(r'<text class="tick ytick"[^>]*>40</text>', page)
    assert re.search(r'<text class="tick xtick"[^>]*>\d\d:\d\d</text>', page)
    assert ">messages</text>" in page and ">messages/s</text>" in page
    assert "Depth and in flight of channel work: now Depth 37, In flight 0" in page
    # the live region's refresh does not redraw the graphs (they refresh on their own)
    live = (await admin.get("/topics/gr_orders/work", headers=HTMX)).text
    assert 'id="graphs"' not in live and 'id="live"' in live


async def test_fragment_windows_and_rates(admin, nsqd):
    await publish(nsqd, "gr_rates", 10)
    await admin.get("/topics/gr_rates")
    await publish(nsqd, "gr_rates", 20)
    page = (await admin.get("/topics/gr_rates")).text
    assert "Depth of gr_rates: now 0" in page  # the topic's own queue: all went to its channel
    assert re.search(r"Messages per second to gr_rates: now [\d.]+/s", page)
    for window, name in (("10m", "10 minutes"), ("1h", "1 hour"), ("6h", "6 hours")):
        fragment = await admin.get("/graphs/topics/gr_rates", params={"window": window})
        assert fragment.status_code == 200
        assert fragment.headers["cache-control"] == "no-store"
        text = fragment.text
        assert text.lstrip().startswith('<section id="graphs"')
        assert f'aria-current="true">{name}</a>' in text
        assert f'hx-get="/graphs/topics/gr_rates?window={window}"' in text
        assert latest(text, "Depth") == "0"
    # without JavaScript the chooser is links to the page itself
    page = (await admin.get("/topics/gr_rates", params={"window": "6h"})).text
    assert 'href="/topics/gr_rates?window=1h"' in page
    assert 'aria-current="true">6 hours</a>' in page
    assert re.search(r'class="tick xtick"[^>]*>\d\d:00</text>', page)  # hourly ticks
    junk = (await admin.get("/graphs/topics/gr_rates", params={"window": "1y"})).text
    assert 'aria-current="true">10 minutes</a>' in junk


async def test_node_page_graphs_its_totals(admin, nsqd):
    await publish(nsqd, "gr_node", 5)
    page = (await admin.get(f"/nodes/{nsqd.http_address}")).text
    assert f'hx-get="/graphs/nodes/{nsqd.http_address}?window=10m"' in page
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        stats = (await http.get(f"http://{nsqd.http_address}/stats",
                                params={"format": "json"})).json()
    waiting = sum(t["depth"] + sum(c["depth"] for c in t["channels"]) for t in stats["topics"])
    assert latest(page, "Depth") == str(waiting)
    fragment = (await admin.get(f"/graphs/nodes/{nsqd.http_address}")).text
    assert "Messages per second to node" in fragment


async def test_rates_with_three_topics_are_the_stats_counters_rates(admin, history, nsqd):
    """Three topics gaining at different rates: the node's, each topic's and each channel's
    rate in nsqadmin is the increase of nsqd's /stats counters between the two samples over
    the time between them (issue: the node's was a difference between topics' counts)."""
    gains = {"gr_three_a": 300, "gr_three_b": 20, "gr_three_c": 1}
    for topic in gains:
        await publish(nsqd, topic, 5)
    node = nsqd.http_address

    async def counts():
        async with httpx.AsyncClient(timeout=DEADLINE) as http:
            body = (await http.get(f"http://{node}/stats", params={"format": "json"})).json()
        return {t["topic_name"]: (t["message_count"], t["channels"][0]["message_count"]
                                  if t["channels"] else 0) for t in body["topics"]}

    before = await counts()
    await admin.get("/")  # a sample of every topic, channel and node
    for topic, gain in gains.items():
        await publish(nsqd, topic, gain)
    after = await counts()
    page = (await admin.get("/")).text  # the next sample
    (t0, _), (t1, _) = history.points(("messages", "", "", node))[-2:]
    seconds = t1 - t0
    node_gain = sum(after[t][0] - before.get(t, (0, 0))[0] for t in after)
    assert node_gain == sum(gains.values())  # nothing else published meanwhile
    assert history.rate("", "", node) == node_gain / seconds
    for topic, gain in gains.items():
        assert after[topic][0] - before[topic][0] == gain
        assert history.rate(topic) == gain / seconds
        assert history.rate(topic, "work") == (after[topic][1] - before[topic][1]) / seconds
        shown = re.search(rf'>{topic}</a>.*?<td class="num">([\d.,]+)/s</td>', page, re.S)
        assert float(shown.group(1).replace(",", "")) == pytest.approx(gain / seconds, abs=0.05)
    graph = (await admin.get(f"/graphs/nodes/{node}")).text
    assert float(latest(graph, "Rate", chart=1)) == pytest.approx(node_gain / seconds)


async def test_unknown_names_draw_empty_graphs(admin):
    text = (await admin.get("/graphs/topics/nope/none")).text
    assert "collecting samples" in text and "data-latest" not in text


def graph_latest(base: str, path: str) -> str | None:
    text = httpx.get(f"{base}/graphs{path}", timeout=DEADLINE).text
    found = re.search(r'data-label="Depth" data-latest="([^"]*)"', text)
    return found.group(1) if found else None


def strip_times(base: str, path: str) -> list[float]:
    """The times of the samples the graph's hover strips show (the latest in each slot)."""
    text = httpx.get(f"{base}/graphs{path}", timeout=DEADLINE).text
    return [float(t) for t in re.findall(r'<rect [^>]*data-t="([\d.]+)"', text)]


def _span(times: list[float]) -> float:
    return max(times) - min(times) if times else 0.0


def test_history_file_survives_a_restart(nsqd, tmp_path):
    trio.run(publish, nsqd, "gr_restart", 12)
    path = tmp_path / "history.gz"
    args = [f"--nsqd-http-address={nsqd.http_address}", "--http-address=127.0.0.1:0",
            "--refresh-interval=1s", f"--history-file={path}", "--history-save-interval=1h"]
    first = start_daemon("nsqadmin", args, expect=("HTTP",))
    try:
        base = f"http://{first.http_address}"
        wait_until(lambda: graph_latest(base, "/topics/gr_restart/work") == "12",
                   what="the sampler's first samples")
        # samples over more than a strip's slot (10 min / MAX_STRIPS = 3.75 s): then the next
        # nsqadmin's samples, all later, cannot share a slot with every old one and hide them
        # all (a strip shows the latest sample of its slot)
        wait_until(lambda: _span(strip_times(base, "/topics/gr_restart/work")) > 4.0,
                   what="samples over more than 4 s")
        stopped_at = time.time()  # nsqadmin's clock: the next one samples after this
    finally:
        assert first.stop(signal.SIGTERM) == 0
    saved = json.loads(gzip.decompress(path.read_bytes()))  # written on the way out
    keys = [tuple(s["key"]) for s in saved["series"]]
    assert ("depth", "gr_restart", "work", "") in keys
    assert ("depth", "", "", nsqd.http_address) in keys

    second = start_daemon("nsqadmin", args, expect=("HTTP",))
    try:
        base = f"http://{second.http_address}"
        # straight away: the old points are drawn
        assert min(strip_times(base, "/topics/gr_restart/work")) < stopped_at
        assert graph_latest(base, "/topics/gr_restart/work") == "12"
        assert "history: " in "".join(second.log) and "series restored" in "".join(second.log)
    finally:
        second.stop()


async def test_sampler_keeps_graphs_current_without_page_loads(nsqd, nursery):
    await publish(nsqd, "gr_sampled", 4)
    options = Options(nsqd_http_addresses=[nsqd.http_address], refresh_interval=0.05)
    app = create_app(options)
    history = app.state.admin.history
    done = trio.Event()

    async def lifespan():
        async with app.router.lifespan_context(app):
            await done.wait()

    nursery.start_soon(lifespan)
    await until(lambda: len(history.points(("depth", "gr_sampled", "work", ""))) >= 2)
    assert history.latest(("depth", "", "", nsqd.http_address)) is not None
    done.set()


def rate_shown(base: str, path: str, window: str = "10m") -> tuple[float, float] | None:
    """The rate graph's latest point of ``path``: (its time, messages per second)."""
    text = httpx.get(f"{base}/graphs{path}", params={"window": window}, timeout=DEADLINE).text
    svg = text.split('<svg class="chart"')[2]
    found = re.search(r'<circle class="dot"[^>]*data-t="([\d.]+)" data-value="([^"]+)"', svg)
    return (float(found.group(1)), float(found.group(2))) if found else None


@pytest.fixture
def sparse_admin(nsqd):
    """A real nsqadmin whose sampler samples once, at start (pages sample when they load)."""
    daemon = start_daemon("nsqadmin", [f"--nsqd-http-address={nsqd.http_address}",
                                       "--http-address=127.0.0.1:0", "--refresh-interval=1h"],
                          expect=("HTTP",))
    yield daemon
    daemon.stop()


def test_a_topic_published_between_samples_shows_its_rate(nsqd, sparse_admin):
    """``make run``: nsqadmin samples the node, then a topic is created and published to; its
    first sample counts all of it over the time since the node's last sample (the graph stayed
    flat: a rate needs two samples of the topic)."""
    base = f"http://{sparse_admin.http_address}"
    node = nsqd.http_address
    wait_until(lambda: graph_latest(base, f"/nodes/{node}") is not None,
               what="the sampler's first sample")
    (sampled,) = set(strip_times(base, f"/nodes/{node}"))  # its one sample
    trio.run(publish, nsqd, "gr_between", 30)
    httpx.get(f"{base}/topics/gr_between", timeout=DEADLINE).raise_for_status()  # a sample
    for path in ("/topics/gr_between", "/topics/gr_between/work"):
        shown = rate_shown(base, path)
        assert shown is not None, path
        at, rate = shown
        # (the page gives both times to the millisecond: up to 1 ms of the interval unknown)
        assert rate * (at - sampled) == pytest.approx(30, rel=1e-3, abs=rate * 0.0011)


def test_messages_published_before_nsqadmin_started_show_as_a_rate(nsqd):
    """nsqadmin's first sample of a node: the counts are averaged since nsqd's start_time."""
    trio.run(publish, nsqd, "gr_before", 24)
    started = httpx.get(f"http://{nsqd.http_address}/stats", params={"format": "json"},
                        timeout=DEADLINE).json()["start_time"]
    daemon = start_daemon("nsqadmin", [f"--nsqd-http-address={nsqd.http_address}",
                                       "--http-address=127.0.0.1:0", "--refresh-interval=1h"],
                          expect=("HTTP",))
    try:
        base = f"http://{daemon.http_address}"
        wait_until(lambda: graph_latest(base, "/topics/gr_before") is not None,
                   what="the sampler's first sample")
        for path in ("/topics/gr_before", "/topics/gr_before/work"):
            shown = rate_shown(base, path, window="6h")  # nsqd's start is in this window
            assert shown is not None, path
            at, rate = shown
            assert rate * (at - started) == pytest.approx(24, rel=1e-3)
    finally:
        daemon.stop()
