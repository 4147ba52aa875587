"""A real browser against a real nsqadmin process and two nsqd: Playwright driving Debian's
Chromium (headless). It clicks through to a channel and pauses it, checks nsqd's /stats,
watches a table refresh in place, runs the same action with JavaScript off, and writes a
screenshot of every page to artifacts/screenshots/ (git-ignored)."""

import socket

import httpx
from nsq_common import MAGIC_V2, commands
from nsq_testing import DEADLINE, free_port, wait_until
from nsq_testing.lmstfy import Lmstfy

from ._browser import nsqadmin_for, shoot, sync_api


def channel_stats(daemon, topic: str, channel: str) -> dict:
    body = httpx.get(f"http://{daemon.http_address}/stats",
                     params={"format": "json", "topic": topic, "channel": channel}).json()
    return body["topics"][0]["channels"][0]


def consumer(daemon, topic: str, channel: str) -> socket.socket:
    """A bare TCP consumer with RDY 1, so the channel page has a client to show."""
    sock = socket.create_connection(("127.0.0.1", daemon.tcp_port), timeout=DEADLINE)
    sock.sendall(MAGIC_V2 + commands.identify({"hostname": "billing-worker-1",
                                               "user_agent": "billing/2.4 go-nsq/1.1.0",
                                               "client_id": "billing-1"})
                 + commands.sub(topic, channel) + commands.rdy(1))
    return sock


def test_pause_a_channel_by_clicking(run_daemon, browser):
    a = run_daemon("nsqd", "--broadcast-address=127.0.0.1")
    b = run_daemon("nsqd", "--broadcast-address=127.0.0.1")
    for daemon in (a, b):
        for topic in ("orders", "payments"):
            httpx.post(f"http://{daemon.http_address}/topic/create", params={"topic": topic})
    for channel in ("billing", "audit"):
        httpx.post(f"http://{a.http_address}/channel/create",
                   params={"topic": "orders", "channel": channel})
    httpx.post(f"http://{b.http_address}/channel/create",
               params={"topic": "orders", "channel": "billing"})
    for n in range(12):
        httpx.post(f"http://{(a, b)[n % 2].http_address}/pub", params={"topic": "orders"},
                   content=b"order %d" % n)
    base = nsqadmin_for(run_daemon, a, f"--nsqd-http-address={b.http_address}",
                        "--refresh-interval=1s")
    expect = sync_api.expect
    worker = consumer(a, "orders", "billing")
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(DEADLINE * 1000)  # a busy machine renders slowly
        page.goto(base + "/")
        expect(page.get_by_role("heading", name="Topics")).to_be_visible()
        expect(page.locator("#live tbody tr")).to_have_count(2)
        page.wait_for_function("() => window.htmx !== undefined")

        page.get_by_role("link", name="orders", exact=True).click()
        expect(page.get_by_role("heading", name="Topic orders")).to_be_visible()

        page.get_by_role("link", name="billing", exact=True).click()
        expect(page.get_by_role("heading", name="Channel billing")).to_be_visible()
        expect(page.get_by_role("rowheader", name="billing-worker-1")).to_be_visible()
        page.evaluate("() => { window.stillHere = true }")
        page.get_by_role("button", name="Pause channel").click()
        expect(page.get_by_role("button", name="Unpause channel")).to_be_visible()
        expect(page.locator("#report")).to_contain_text(
            "Paused channel orders/billing on 2 daemons.")
        assert page.evaluate("() => window.stillHere") is True  # swapped in place, no reload
        assert channel_stats(a, "orders", "billing")["paused"] is True
        assert channel_stats(b, "orders", "billing")["paused"] is True

        # the tables refresh themselves: new messages show up without a reload
        total = page.locator("#live tfoot td").nth(6)
        before = total.inner_text()
        for n in range(5):
            httpx.post(f"http://{b.http_address}/pub", params={"topic": "orders"},
                       content=b"late %d" % n)
        expect(total).not_to_have_text(before, timeout=DEADLINE * 1000)
        assert page.evaluate("() => window.stillHere") is True
        shoot(page, "channel")

        # a destructive action asks first
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Empty channel").click()
        expect(page.locator("#report")).to_contain_text("Emptied channel orders/billing")
        assert channel_stats(b, "orders", "billing")["depth"] == 0

        for path, name in (("/", "topics"), ("/topics/orders", "topic"), ("/nodes", "nodes"),
                           (f"/nodes/{a.http_address}", "node"), ("/counter", "counter")):
            page.goto(base + path)
            expect(page.locator("#live")).to_be_visible()
            shoot(page, name)

        phone = browser.new_page(viewport={"width": 390, "height": 844})
        phone.goto(base + "/topics/orders")
        expect(phone.get_by_role("heading", name="Topic orders")).to_be_visible()
        shoot(phone, "topic-phone")

        # without JavaScript the same buttons are plain forms (Post/Redirect/Get)
        plain = browser.new_context(java_script_enabled=False).new_page()
        plain.goto(base + "/topics/orders/billing")
        plain.get_by_role("button", name="Unpause channel").click()
        expect(plain.locator("#report")).to_contain_text(
            "Unpaused channel orders/billing on 2 daemons.")
        assert plain.url == base + "/topics/orders/billing"
        assert channel_stats(a, "orders", "billing")["paused"] is False
        plain.get_by_role("button", name="Delete channel").click()
        expect(plain.get_by_role("heading", name="Are you sure?")).to_be_visible()
        shoot(plain, "confirm")
        plain.get_by_role("link", name="Cancel").click()
        expect(plain.get_by_role("button", name="Pause channel")).to_be_visible()
    finally:
        worker.close()


def test_lookupd_mode_with_a_dead_lookupd(run_daemon, browser):
    lookupd = run_daemon("nsqlookupd")
    dead = f"127.0.0.1:{free_port()}"
    admin = run_daemon("nsqadmin", f"--lookupd-http-address={lookupd.http_address}",
                       f"--lookupd-http-address={dead}", "--http-address=127.0.0.1:0",
                       expect=("HTTP",))
    base = f"http://{admin.http_address}"
    expect = sync_api.expect
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(base + "/lookup")
    expect(page.locator("#live")).to_contain_text("1 daemon did not answer")
    expect(page.locator("#live")).to_contain_text(dead)
    page.get_by_role("textbox", name="Topic").fill("signups")
    page.get_by_role("textbox", name="Channel").fill("welcome-mail")
    page.get_by_role("button", name="Create").click()
    expect(page.locator("#report")).to_contain_text("Created channel signups/welcome-mail")
    expect(page.locator("#live")).to_contain_text("welcome-mail")
    topics = httpx.get(f"http://{lookupd.http_address}/topics").json()["topics"]
    assert topics == ["signups"]
    shoot(page, "lookup")
    page.goto(base + "/")
    expect(page.get_by_role("link", name="signups")).to_be_visible()
    shoot(page, "topics-degraded")


def test_dead_letters_and_peek_by_clicking(run_daemon, browser):
    """A channel with a dead letter: the channel page lists it, Respawn puts it back, the
    peek view shows it next in line and takes nothing; Empty asks first."""
    nsqd = run_daemon("nsqd", "--broadcast-address=127.0.0.1")
    api = f"http://{nsqd.http_address}"
    params = {"topic": "invoices", "channel": "mailer"}
    httpx.post(f"{api}/topic/create", params={"topic": "invoices"})
    httpx.post(f"{api}/channel/create", params={**params, "max_attempts": "2"})
    for n in range(2):
        httpx.post(f"{api}/pub", params={"topic": "invoices"}, content=b"invoice %d" % n)
    taken = httpx.post(f"{api}/channel/consume", params={**params, "n": "2"}).json()
    for msg in taken["messages"]:
        httpx.post(f"{api}/message/deadletter", params={**params, "id": msg["id"]})
    base = nsqadmin_for(run_daemon, nsqd)
    expect = sync_api.expect
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(DEADLINE * 1000)
    page.goto(base + "/topics/invoices/mailer")
    expect(page.get_by_role("heading", name="Dead letters")).to_be_visible()
    dead = page.locator("table.messages")
    expect(dead.locator("tbody tr")).to_have_count(2)
    expect(dead).to_contain_text("invoice 0")
    page.wait_for_function("() => window.htmx !== undefined")
    shoot(page, "dead-letters")

    page.get_by_role("button", name="Respawn dead letters").click()
    expect(page.locator("#report")).to_contain_text(
        "Respawned the dead letters of invoices/mailer on 1 daemon.")
    expect(page.get_by_role("heading", name="Dead letters")).to_have_count(0)
    stats = channel_stats(nsqd, "invoices", "mailer")
    assert stats["dead_letter_count"] == 0 and stats["depth"] == 2

    page.get_by_role("link", name="Peek at the next messages").click()
    expect(page.get_by_role("heading", name="Peek mailer")).to_be_visible()
    rows = page.locator("table.messages tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("invoice 0")
    expect(rows.nth(1)).to_contain_text("invoice 1")
    shoot(page, "peek")
    assert channel_stats(nsqd, "invoices", "mailer")["depth"] == 2  # peeking took nothing

    taken = httpx.post(f"{api}/channel/consume", params={**params, "n": "1"}).json()
    httpx.post(f"{api}/message/deadletter",
               params={**params, "id": taken["messages"][0]["id"]})
    page.goto(base + "/topics/invoices/mailer")
    page.wait_for_function("() => window.htmx !== undefined")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Empty dead letters").click()
    expect(page.locator("#report")).to_contain_text(
        "Emptied the dead letters of invoices/mailer on 1 daemon.")
    assert channel_stats(nsqd, "invoices", "mailer")["dead_letter_count"] == 0


def test_a_job_queue_in_nsqadmin(run_daemon, browser):
    """A queue of lmstfy's API is a topic and channel like any other: nsqadmin lists it, and
    its dead letters are respawned from the channel page, back into lmstfy's queue."""
    service = Lmstfy(run_daemon, "--broadcast-address=127.0.0.1")
    job_id = service.publish("emails", b"welcome mail", tries="1")
    assert service.consume("emails", ttr="0").json()["job_id"] == job_id
    wait_until(lambda: service.api("GET", "/emails/deadletter/size").json()["size"] == 1,
               what="the job to become a dead letter")
    base = nsqadmin_for(run_daemon, service.nsqd)
    expect = sync_api.expect
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(DEADLINE * 1000)
    page.goto(f"{base}/")
    page.get_by_role("link", name="lmstfy.ns.emails", exact=True).click()
    expect(page.get_by_role("heading", name="Topic lmstfy.ns.emails")).to_be_visible()
    page.get_by_role("link", name="jobs", exact=True).click()
    expect(page.get_by_role("heading", name="Dead letters")).to_be_visible()
    expect(page.locator("table.messages")).to_contain_text("welcome mail")
    page.wait_for_function("() => window.htmx !== undefined")
    shoot(page, "job-queue")
    page.get_by_role("button", name="Respawn dead letters").click()
    expect(page.locator("#report")).to_contain_text(
        "Respawned the dead letters of lmstfy.ns.emails/jobs on 1 daemon.")
    assert service.api("GET", "/emails/size").json()["size"] == 1
    job = service.consume("emails").json()
    assert (job["job_id"], job["remain_tries"]) == (job_id, 0)
