"""nsqadmin's Jobs pages and settings forms in a real browser (Playwright driving Debian's
Chromium, headless) against a real nsqadmin process and an nsqd serving lmstfy's API: jobs
published with delays and tries, dead letters made, every count, id and try on the pages checked
against lmstfy's own answers, a dead letter respawned from the page and then consumed; a channel
created with max_attempts from the create form, read back from /stats and the page.
Screenshots go to artifacts/screenshots/ (git-ignored)."""


import httpx
from nsq_testing import DEADLINE, free_port, wait_until
from nsq_testing.lmstfy import Lmstfy

from ._browser import new_page, nsqadmin_for, shoot, sync_api


def cell(row, n: int):
    return row.locator("th, td").nth(n)


def test_jobs_pages_match_lmstfy_and_a_respawned_job_is_consumed(run_daemon, browser):
    service = Lmstfy(run_daemon, f"--lmstfy-http-address=127.0.0.1:{free_port()}",
                     f"--lmstfy-admin-http-address=127.0.0.1:{free_port()}",
                     "--broadcast-address=127.0.0.1")
    delayed = service.publish("emails", b"reminder: your cart", delay="600", tries="4")
    dead = []
    for n in range(2):  # one try each, taken and never acknowledged: dead letters
        dead.append(service.publish("emails", b"bounced mail %d" % n, tries="1"))
        assert service.consume("emails", ttr="0").json()["job_id"] == dead[-1]
    wait_until(lambda: service.api("GET", "/emails/deadletter/size").json()["size"] == 2,
               what="two dead letters")
    ready = [service.publish("emails", b"welcome mail for %d" % n, tries=str(3 - n))
             for n in range(2)]
    service.publish("sms", b"code 1234", tries="2")
    base = nsqadmin_for(run_daemon, service.nsqd, "--refresh-interval=1s")
    expect = sync_api.expect
    lmstfy = {"size": service.api("GET", "/emails/size").json()["size"],
              "dead": service.api("GET", "/emails/deadletter").json(),
              "head": service.api("GET", "/emails/peek").json()}
    assert lmstfy["head"]["job_id"] == ready[0] and lmstfy["dead"]["deadletter_head"] == dead[0]

    page = new_page(browser)
    page.goto(base + "/")
    expect(page.get_by_role("link", name="Jobs")).to_be_visible()  # the sampler found lmstfy
    page.get_by_role("link", name="Jobs").click()
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    emails = page.locator("table.queues tbody tr").filter(has_text="emails")
    # ready (lmstfy's size), delayed, in flight, dead letters (lmstfy's), published
    expect(cell(emails, 1)).to_have_text(str(lmstfy["size"]))
    expect(cell(emails, 2)).to_have_text("1")
    expect(cell(emails, 3)).to_have_text("0")
    expect(cell(emails, 4)).to_have_text(str(lmstfy["dead"]["deadletter_size"]))
    expect(cell(emails, 5)).to_have_text("5")
    page.wait_for_function("() => window.htmx !== undefined")
    shoot(page, "jobs")

    page.get_by_role("link", name="emails", exact=True).click()
    expect(page.get_by_role("heading", name="Queue ns/emails")).to_be_visible()
    expect(page.locator('[data-count="ready"]')).to_have_text(str(lmstfy["size"]))
    expect(page.locator('[data-count="dead"]')).to_have_text("2")
    expect(page.locator("#graphs svg.chart")).to_have_count(2)
    next_jobs = page.locator("table.jobs.ready tbody tr")
    expect(next_jobs).to_have_count(2)
    # the next job and its tries, as lmstfy's peek answers them
    expect(cell(next_jobs.nth(0), 0)).to_have_text(lmstfy["head"]["job_id"])
    expect(cell(next_jobs.nth(0), 1)).to_have_text(str(lmstfy["head"]["remain_tries"]))
    expect(cell(next_jobs.nth(1), 0)).to_have_text(ready[1])
    expect(cell(next_jobs.nth(1), 1)).to_have_text("2")
    waiting = page.locator("table.jobs.delayed tbody tr")
    expect(cell(waiting.nth(0), 0)).to_have_text(delayed)
    expect(cell(waiting.nth(0), 1)).to_have_text("4")  # tries
    expect(cell(waiting.nth(0), 3)).to_have_text("10m")  # delay
    dead_rows = page.locator("table.jobs.dead tbody tr")
    expect(dead_rows).to_have_count(2)
    expect(cell(dead_rows.nth(0), 0)).to_have_text(lmstfy["dead"]["deadletter_head"])
    expect(cell(dead_rows.nth(1), 0)).to_have_text(dead[1])
    page.wait_for_function("() => window.htmx !== undefined")
    shoot(page, "jobs-queue")

    # look a job up by lmstfy's id
    page.get_by_role("textbox", name="Job ID").fill(delayed)
    page.get_by_role("button", name="Look up").click()
    expect(page.get_by_role("heading", name=f"Job {delayed}")).to_be_visible()
    expect(page.locator("table.jobs.found")).to_contain_text("reminder: your cart")

    # respawn the oldest dead letter from the page, then consume it through lmstfy's API
    respawn = page.locator("section.panel").filter(has_text="Respawn")
    respawn.get_by_role("spinbutton", name="TTL").fill("120")
    respawn.get_by_role("button", name="Respawn").click()
    expect(page.locator("#report")).to_contain_text(
        "Respawned the dead letters of ns/emails on 1 daemon. 1 job back in the queue.")
    expect(page.locator('[data-count="dead"]')).to_have_text("1")
    assert service.api("GET", "/emails/deadletter/size").json()["size"] == 1
    consumed = []
    while not consumed or consumed[-1]["job_id"] != dead[0]:
        job = service.consume("emails", ttr="30").json()
        consumed.append(job)
        assert service.api("DELETE", f"/emails/job/{job['job_id']}").status_code == 204
    # (the two ready jobs may come before it or after: where lmstfy's respawn puts a job is
    # the queue's business, not the page's)
    assert {j["job_id"] for j in consumed} <= {*ready, dead[0]}
    assert consumed[-1]["remain_tries"] == 0 and 0 < consumed[-1]["ttl"] <= 120
    expect(page.locator('[data-count="ready"]')).to_have_text(
        str(len(ready) + 1 - len(consumed)))  # refreshed in place
    shoot(page, "jobs-queue-respawned")

    # the namespace: its queues and tokens (never shown whole), a new token
    page.get_by_role("link", name="ns", exact=True).click()
    expect(page.get_by_role("heading", name="Namespace ns")).to_be_visible()
    tokens = page.locator("table.tokens tbody tr")
    expect(tokens).to_have_count(1)
    expect(cell(tokens.nth(0), 0)).to_have_text("…" + service.token[-4:])
    expect(cell(tokens.nth(0), 1)).to_have_text("tests")
    assert service.token not in page.content()
    page.get_by_role("textbox", name="Description").fill("billing service")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#report")).to_contain_text("The new token is ")
    expect(tokens).to_have_count(2)
    listed = service.admin("GET", "/token/ns").json()["tokens"]
    assert sorted(listed.values()) == ["billing service", "tests"]
    shoot(page, "jobs-namespace")

    phone = new_page(browser, 390, 844)
    phone.goto(f"{base}/jobs/{service.nsqd.http_address}/ns/emails")
    expect(phone.get_by_role("heading", name="Queue ns/emails")).to_be_visible()
    shoot(phone, "jobs-queue-phone")


def test_create_a_channel_with_max_attempts_from_the_form(run_daemon, browser):
    nsqd = run_daemon("nsqd", "--broadcast-address=127.0.0.1")
    base = nsqadmin_for(run_daemon, nsqd, "--refresh-interval=1s")
    expect = sync_api.expect
    page = new_page(browser)
    page.goto(base + "/")
    page.get_by_role("textbox", name="Topic").fill("invoices")
    page.get_by_role("textbox", name="Channel").fill("mailer")
    page.get_by_text("Settings beyond NSQ").click()
    page.get_by_role("spinbutton", name="Max attempts").fill("5")
    page.get_by_role("combobox", name="Expired messages").select_option("true")
    shoot(page, "create-with-settings")
    page.get_by_role("button", name="Create", exact=True).click()
    expect(page.locator("#report")).to_contain_text(
        "Created channel invoices/mailer (max attempts 5, expired messages kept as dead "
        "letters) on 1 daemon.")
    stats = httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE,
                      params={"format": "json", "topic": "invoices"}).json()
    (channel,) = stats["topics"][0]["channels"]
    assert (channel["channel_name"], channel["max_attempts"], channel["dead_letter_expired"]) == (
        "mailer", 5, True)

    page.goto(base + "/topics/invoices/mailer")
    expect(page.locator('[data-setting="max_attempts"]')).to_have_text("5")
    expect(page.locator('[data-setting="dead_letter_expired"]')).to_have_text(
        "kept as dead letters")
    # and changed from the channel's settings form
    page.get_by_role("spinbutton", name="Max attempts").fill("2")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#report")).to_contain_text("Updated channel invoices/mailer")
    expect(page.locator('[data-setting="max_attempts"]')).to_have_text("2")
    stats = httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE,
                      params={"format": "json", "topic": "invoices"}).json()
    assert stats["topics"][0]["channels"][0]["max_attempts"] == 2
    shoot(page, "channel-settings")
    page.goto(base + "/topics/invoices")
    expect(page.locator("#live")).to_contain_text("max 2")
    shoot(page, "topic-with-settings")
