"""Rewinding a channel from nsqadmin in a real browser (Playwright driving Debian's Chromium,
headless), against real nsqd and nsqadmin processes: a topic given a retention and a channel
that starts at the earliest message from the create form, its messages consumed by a real
consumer (nsq_tail over TCP), the channel rewound from its page to a time before them, and
every one delivered again. Screenshots go to artifacts/screenshots/ (git-ignored)."""

import subprocess
import sys
import time
from datetime import UTC, datetime

import httpx
from nsq_testing import DEADLINE

from ._browser import new_page, nsqadmin_for, shoot, sync_api


def consume(nsqd, topic: str, channel: str, n: int) -> list[bytes]:
    """``n`` messages of the channel, taken (and finished) by nsq_tail over TCP."""
    proc = subprocess.Popen([sys.executable, "-m", "nsq_client.tools.nsq_tail",
                             f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={topic}",
                             f"--channel={channel}", f"--n={n}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    return out.splitlines()


def channel_stats(nsqd, topic: str, channel: str) -> dict:
    stats = httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE,
                      params={"format": "json", "topic": topic, "channel": channel,
                              "include_offsets": "true"}).json()
    return stats["topics"][0]["channels"][0]


def test_rewind_a_channel_from_its_page_and_get_its_messages_again(run_daemon, browser):
    nsqd = run_daemon("nsqd", "--broadcast-address=127.0.0.1")
    base = nsqadmin_for(run_daemon, nsqd, "--refresh-interval=1s")
    expect = sync_api.expect
    page = new_page(browser)

    # the topic and its channel from the create form: kept an hour, from the earliest message
    page.goto(base + "/")
    page.get_by_role("textbox", name="Topic").fill("clicks")
    page.get_by_role("textbox", name="Channel").fill("archive")
    page.get_by_text("Settings beyond NSQ").click()
    page.get_by_role("textbox", name="Retention").fill("1h")
    page.get_by_role("combobox", name="Starts at").select_option("earliest")
    page.get_by_role("button", name="Create", exact=True).click()
    expect(page.locator("#report")).to_contain_text(
        "Created channel clicks/archive (retention 1h0m0s, starting at the earliest) on 1 "
        "daemon.")

    before = int(time.time()) - 5  # (the form takes whole seconds)
    bodies = [f"click {n}".encode() for n in range(5)]
    httpx.post(f"http://{nsqd.http_address}/mpub", params={"topic": "clicks"},
               content=b"\n".join(bodies), timeout=DEADLINE).raise_for_status()
    assert consume(nsqd, "clicks", "archive", 5) == bodies
    assert (channel_stats(nsqd, "clicks", "archive")["mark_delete_offset"]) == 5

    page.goto(base + "/topics/clicks")
    expect(page.locator('[data-setting="retention"]')).to_have_text("1h (1h0m0s)")
    log = page.locator("table.log tbody tr")
    expect(log.locator("td").nth(0)).to_have_text("0")
    expect(log.locator("td").nth(1)).to_have_text("4")
    shoot(page, "topic-log")

    page.goto(base + "/topics/clicks/archive")
    position = page.locator("table.positions tbody tr")
    # kept, mark-delete, read, latest, behind latest: everything consumed
    expect(position.locator("td")).to_have_text(["0 \u2013 4", "5", "5", "4", "0"])
    shoot(page, "channel-position")

    # rewind to a time before the messages, from the page (it asks first)
    page.wait_for_function("() => window.htmx !== undefined")
    rewind = page.locator("section.panel").filter(has_text="Rewind to")
    rewind.get_by_label("Time, UTC").fill(
        datetime.fromtimestamp(before, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    rewind.get_by_role("button", name="Rewind").click()
    expect(page.locator("#report")).to_contain_text(
        "Rewound channel clicks/archive to "
        f"{datetime.fromtimestamp(before, UTC).strftime('%Y-%m-%dT%H:%M:%S')}Z on 1 daemon. "
        f"Its position now: offset 0 on 127.0.0.1:{nsqd.http_port}.")
    assert asked and asked[0].startswith("Rewind channel archive?")
    expect(position.locator("td")).to_have_text(["0 \u2013 4", "0", "0", "4", "5"])
    shoot(page, "channel-rewound")

    # and every message is delivered again, in order
    assert consume(nsqd, "clicks", "archive", 5) == bodies
    expect(position.locator("td")).to_have_text(["0 \u2013 4", "5", "5", "4", "0"])  # refreshed


def test_after_a_rewind_the_graphs_say_what_the_table_says(run_daemon, browser):
    """A rewind past some messages lowers the depth: the report, the table and the graph's
    legend all say the new depth at once (the graphs are redrawn after the table, from the
    sample it was drawn from), not the legend the old one until its next refresh."""
    nsqd = run_daemon("nsqd", "--broadcast-address=127.0.0.1")
    base_nsqd = f"http://{nsqd.http_address}"
    httpx.post(f"{base_nsqd}/topic/create", params={"topic": "clicks", "retention": "1h"},
               timeout=DEADLINE).raise_for_status()
    httpx.post(f"{base_nsqd}/channel/create", params={"topic": "clicks", "channel": "archive"},
               timeout=DEADLINE).raise_for_status()
    httpx.post(f"{base_nsqd}/mpub", params={"topic": "clicks"}, timeout=DEADLINE,
               content=b"\n".join(b"click %d" % n for n in range(50))).raise_for_status()
    # a refresh far beyond the test's deadlines: whatever changes, the action changed it
    base = nsqadmin_for(run_daemon, nsqd, f"--refresh-interval={int(DEADLINE * 10)}s")
    expect = sync_api.expect
    page = new_page(browser)
    page.goto(f"{base}/topics/clicks/archive")
    page.wait_for_function("() => window.htmx !== undefined")
    legend = page.locator('#graphs svg.chart .legend-item[data-label="Depth"]').first
    depth_cell = page.locator("#live table").first.locator("tbody tr").first.locator("td").first
    expect(depth_cell).to_have_text("50")
    expect(legend).to_have_attribute("data-latest", "50")

    rewind = page.locator("section.panel").filter(has_text="Rewind to")
    rewind.get_by_label("an offset").check()
    rewind.get_by_label("Offset", exact=True).fill("10")
    page.once("dialog", lambda dialog: dialog.accept())
    rewind.get_by_role("button", name="Rewind").click()
    expect(page.locator("#report")).to_contain_text("Its position now: offset 10 on ")
    expect(depth_cell).to_have_text("40")
    expect(legend).to_have_attribute("data-latest", "40")
    assert channel_stats(nsqd, "clicks", "archive")["depth"] == 40
