"""nsqadmin's graphs in a real browser (Playwright driving Debian's Chromium, headless) against
a real nsqadmin process and nsqd: a known number of messages is published, the channel page's
graph must come to show exactly /stats' depth, with value and time axes labelled; it refreshes
in place, changes window, shows hover values; screenshots go to artifacts/screenshots/."""

import re

import httpx
from nsq_testing import DEADLINE

from ._browser import nsqadmin_for, shoot, sync_api

PUBLISHED = 37


def depth_in_stats(nsqd, topic: str, channel: str) -> int:
    body = httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE,
                     params={"format": "json", "topic": topic, "channel": channel}).json()
    return body["topics"][0]["channels"][0]["depth"]


def publish(nsqd, topic: str, count: int, first: int = 0) -> None:
    body = b"\n".join(b"order %d" % n for n in range(first, first + count))
    httpx.post(f"http://{nsqd.http_address}/mpub", params={"topic": topic},
               content=body, timeout=DEADLINE).raise_for_status()


def test_channel_graph_shows_what_stats_says(run_daemon, browser):
    nsqd = run_daemon("nsqd", "--broadcast-address=127.0.0.1")
    base_nsqd = f"http://{nsqd.http_address}"
    httpx.post(f"{base_nsqd}/topic/create", params={"topic": "orders"}).raise_for_status()
    httpx.post(f"{base_nsqd}/channel/create",
               params={"topic": "orders", "channel": "billing"}).raise_for_status()
    publish(nsqd, "orders", PUBLISHED)
    base = nsqadmin_for(run_daemon, nsqd, "--refresh-interval=1s")
    expect = sync_api.expect

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(DEADLINE * 1000)
    page.goto(base + "/topics/orders/billing")
    page.wait_for_function("() => window.htmx !== undefined")
    page.evaluate("() => { window.stillHere = true }")
    graphs = page.locator("#graphs")
    depth_chart, rate_chart = graphs.locator("svg.chart").nth(0), graphs.locator("svg.chart").nth(1)
    expect(depth_chart).to_be_visible()
    depth = depth_chart.locator('.legend-item[data-label="Depth"]')
    expect(depth).to_have_attribute("data-latest", str(PUBLISHED))
    assert int(depth.get_attribute("data-latest")) == depth_in_stats(nsqd, "orders", "billing")
    expect(depth).to_contain_text(f"Depth {PUBLISHED}")
    expect(depth_chart.locator('.legend-item[data-label="In flight"]')).to_have_attribute(
        "data-latest", "0")

    # axes: value ticks from 0 up past the depth, clock times, both units named
    for chart, unit in ((depth_chart, "messages"), (rate_chart, "messages/s")):
        ticks = chart.locator("text.ytick").all_text_contents()
        assert ticks[0] == "0" and len(ticks) >= 2, ticks
        times = chart.locator("text.xtick").all_text_contents()
        assert len(times) >= 4 and all(re.fullmatch(r"\d\d:\d\d", t) for t in times), times
        units = chart.locator("text.unit").all_text_contents()
        assert units[0] == unit and units[1].startswith("time ("), units
    top = float(depth_chart.locator("text.ytick").last.get_attribute("data-value"))
    assert top >= PUBLISHED
    shoot(page, "graphs-channel")

    # the graphs refresh in place: more messages show up, and the rate chart draws them
    publish(nsqd, "orders", 13, first=PUBLISHED)
    expect(depth).to_have_attribute("data-latest", str(PUBLISHED + 13))
    assert depth_in_stats(nsqd, "orders", "billing") == PUBLISHED + 13
    page.wait_for_function(
        """() => [...document.querySelectorAll('#graphs svg.chart')[1]
                   .querySelectorAll('.hover rect')]
                 .some(r => parseFloat(r.dataset.values) > 0)""")
    assert page.evaluate("() => window.stillHere") is True

    # hover: the strip under the pointer is shaded and carries the values as its tooltip.
    # The graphs are redrawn every second, but not while the pointer is on them (a tooltip
    # being read stays): put it there, let an answer already on its way land, then the
    # strips stay where they are (before, a redraw mid-hover moved a neighbour under it).
    depth_chart.hover()
    page.wait_for_function("() => !document.querySelector('#graphs.htmx-request')")
    assert page.evaluate("() => document.querySelector('#graphs').matches(':hover')")
    strip = depth_chart.locator(".hover rect").last
    strip.hover()
    shade = strip.evaluate("r => getComputedStyle(r).fillOpacity")
    assert float(shade) > 0
    tooltip = strip.locator("title").text_content()
    assert re.fullmatch(rf"\d\d:\d\d:\d\d · Depth {PUBLISHED + 13} · In flight 0", tooltip)
    shoot(graphs, "graphs-channel-hover", full_page=False)

    # another window: the region is swapped, the address bar keeps the choice
    graphs.get_by_role("link", name="6 hours").click()
    expect(graphs.get_by_role("link", name="6 hours")).to_have_attribute("aria-current", "true")
    expect(page).to_have_url(re.compile(r"\?window=6h$"))
    expect(graphs.locator("svg.chart").first.locator('.legend-item[data-label="Depth"]')
           ).to_have_attribute("data-latest", str(PUBLISHED + 13))
    assert page.evaluate("() => window.stillHere") is True
    page.reload()
    expect(graphs.get_by_role("link", name="6 hours")).to_have_attribute("aria-current", "true")

    # the topic and node pages have theirs
    page.goto(base + "/topics/orders")
    expect(page.locator("#graphs svg.chart")).to_have_count(2)
    page.goto(f"{base}/nodes/{nsqd.http_address}")
    node_depth = page.locator('#graphs .legend-item[data-label="Depth"]')
    expect(node_depth).to_have_attribute("data-latest", str(PUBLISHED + 13))
    shoot(page, "graphs-node")

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.goto(base + "/topics/orders/billing")
    expect(phone.locator("#graphs svg.chart").first).to_be_visible()
    shoot(phone, "graphs-channel-phone")


FETCHES = """path => performance.getEntriesByType('resource')
    .filter(e => e.initiatorType === 'xmlhttprequest' && new URL(e.name).pathname === path)
    .length"""


def test_the_graphs_are_fetched_once_per_refresh_of_the_tables(run_daemon, browser):
    """The graphs are redrawn after each refresh of the page's tables, once: before, their
    trigger's filter was read as part of its ``from:`` selector, so every redraw of the graphs
    asked for the next one, about 20 requests a second, and a pointer could not rest on them."""
    nsqd = run_daemon("nsqd", "--broadcast-address=127.0.0.1")
    base_nsqd = f"http://{nsqd.http_address}"
    httpx.post(f"{base_nsqd}/topic/create", params={"topic": "orders"},
               timeout=DEADLINE).raise_for_status()
    httpx.post(f"{base_nsqd}/channel/create", params={"topic": "orders", "channel": "billing"},
               timeout=DEADLINE).raise_for_status()
    base = nsqadmin_for(run_daemon, nsqd, "--refresh-interval=1s")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(DEADLINE * 1000)
    page.goto(f"{base}/topics/orders/billing")
    page.evaluate("() => performance.setResourceTimingBufferSize(100000)")
    page.wait_for_function(f"() => ({FETCHES})('/graphs/topics/orders/billing') >= 3")
    tables = page.evaluate(FETCHES, "/topics/orders/billing")
    graphs = page.evaluate(FETCHES, "/graphs/topics/orders/billing")
    assert 3 <= graphs <= tables, (graphs, tables)
