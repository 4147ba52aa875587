"""nsqadmin's Jobs pages through the ASGI app, against a real nsqd that serves lmstfy's API:
what the pages show is what lmstfy's own API answers (counts, job ids, tries), and the actions
(respawn, delete, empty, tokens, limits) happen in lmstfy."""

import re
import socket

import httpx
import pytest
from nsq_testing import DEADLINE, free_port, wait_until
from nsq_testing.html import Rows
from nsq_testing.lmstfy import Lmstfy
from nsqadmin import Options
from nsqadmin.formatting import human_duration
from nsqadmin.lmstfy import token_ref

from ._admin import InProcessAdmins

HTMX = {"HX-Request": "true"}


def lmstfy_service(run_daemon, *args, **kwargs):
    """An nsqd with lmstfy's listeners on ports it is told (nsqadmin finds them in /config)."""
    return Lmstfy(run_daemon, f"--lmstfy-http-address=127.0.0.1:{free_port()}",
                  f"--lmstfy-admin-http-address=127.0.0.1:{free_port()}",
                  "--broadcast-address=127.0.0.1", *args, **kwargs)


@pytest.fixture
async def make_admin(nursery):
    admins = InProcessAdmins(nursery)

    async def make(*services, **overrides):
        options = Options(nsqd_http_addresses=[s.nsqd.http_address for s in services],
                          **overrides)
        options.validate()
        return await admins.start(options)

    yield make
    await admins.close()


def dead_size(service, queue):
    return service.api("GET", f"/{queue}/deadletter/size").json()["size"]


def make_dead(service, queue, body):
    """A job with one try, consumed and not acknowledged: a dead letter once its ttr is up."""
    job_id = service.publish(queue, body, tries="1")
    before = dead_size(service, queue)
    assert service.consume(queue, ttr="0").json()["job_id"] == job_id
    wait_until(lambda: dead_size(service, queue) == before + 1, what="the dead letter")
    return job_id


async def test_the_jobs_pages_say_what_lmstfy_says(run_daemon, make_admin):
    service = lmstfy_service(run_daemon)
    dead = make_dead(service, "emails", b"bounce")
    first = service.publish("emails", b"welcome mail for 42", tries="3")
    service.publish("emails", b"receipt for 42", tries="2")
    delayed = service.publish("emails", b"reminder", delay="3600", tries="5")
    service.publish("sms", b"code 1234")
    admin = await make_admin(service)
    node = service.nsqd.http_address

    overview = (await admin.get("/jobs")).text
    assert '<a href="/jobs" aria-current="page">Jobs</a>' in overview
    rows = Rows(overview)
    emails, sms = rows.row("emails"), rows.row("sms")
    size = service.api("GET", "/emails/size").json()["size"]
    stats = httpx.get(f"http://{node}/stats", params={"format": "json", "topic":
                                                      "lmstfy.ns.emails"}).json()
    (channel,) = stats["topics"][0]["channels"]
    # ready (lmstfy's size), delayed, in flight, dead letters (lmstfy's), published
    assert emails[1:6] == [str(size), str(channel["deferred_count"]),
                           str(channel["in_flight_count"]), str(dead_size(service, "emails")),
                           "4"]
    assert emails[4] == "1" and sms[1] == "1"
    assert f'href="/jobs/{node}/ns"' in overview
    assert "Jobs" in (await admin.get("/")).text  # the menu offers the Jobs pages now

    before = service.api("GET", "/emails/peek").json()
    queue = (await admin.get(f"/jobs/{node}/ns/emails")).text
    head = service.api("GET", "/emails/peek").json()
    assert head["job_id"] == first
    rows = Rows(queue)
    header = rows.row("Job ID")
    tries, ttl, delay, body = (header.index(h) for h in ("Tries left", "TTL", "Delay", "Body"))
    ready = rows.row(first)  # lmstfy's next job is the first row, its tries as lmstfy says
    assert rows.rows.index(ready) == rows.rows.index(header) + 1
    assert ready[tries] == str(head["remain_tries"]) == "3"
    assert ready[body] == "welcome mail for 42" and ready[delay] == "none"
    # (the TTL the page got from lmstfy, between the two asked around it: a second may pass)
    assert ready[ttl] in {human_duration(h["ttl"] * 1e9) for h in (before, head)}
    assert (rows.row(delayed)[tries], rows.row(delayed)[delay]) == ("5", "1h")
    assert rows.row(dead)[tries] == "0"  # a dead letter has no try left
    assert 'data-count="dead">1<' in queue
    assert 'hx-get="/graphs/jobs/' in queue and "Jobs published per second to queue" in queue

    looked = (await admin.get(f"/jobs/{node}/ns/emails", params={"job": dead})).text
    assert f"<h2>Job {dead}</h2>" in looked and ">bounce</code>" in looked
    lmstfy_says = service.api("GET", f"/emails/job/{dead}").json()
    assert Rows(looked).row(dead)[ttl] == (human_duration(lmstfy_says["ttl"] * 1e9)
                                           if lmstfy_says["ttl"] else "none")
    missing = (await admin.get(f"/jobs/{node}/ns/emails",
                               params={"job": "01M8DB4B3BNTGK79XQEWF00000"})).text
    assert "lmstfy has no job 01M8DB4B3BNTGK79XQEWF00000" in missing
    # a job looked up says what the tables say of it: its tries left and its delay
    looked = (await admin.get(f"/jobs/{node}/ns/emails", params={"job": delayed})).text
    found = Rows(looked.split(f"<h2>Job {delayed}</h2>", 1)[1].split("<h2>", 1)[0])
    in_table = Rows(looked.split("<h2>Delayed jobs</h2>", 1)[1]).row(delayed)
    assert (found.row(delayed)[tries], found.row(delayed)[delay]) == ("5", "1h")
    assert (in_table[tries], in_table[delay]) == ("5", "1h")
    looked = (await admin.get(f"/jobs/{node}/ns/emails", params={"job": first})).text
    found = Rows(looked.split(f"<h2>Job {first}</h2>", 1)[1].split("<h2>", 1)[0])
    assert (found.row(first)[tries], found.row(first)[delay]) == ("3", "none")
    assert Rows(looked).row(dead)[tries] == "0"
    assert "lmstfy has no job ../x" in (await admin.get(f"/jobs/{node}/ns/emails",
                                                        params={"job": "../x"})).text

    namespace = (await admin.get(f"/jobs/{node}/ns")).text
    token_row = Rows(namespace).row("…" + service.token[-4:])
    assert token_row[1] == "tests" and service.token not in namespace  # never whole
    assert Rows(namespace).row("emails")[1] == str(size)


async def test_actions_happen_in_lmstfy(run_daemon, make_admin):
    service = lmstfy_service(run_daemon)
    admin = await make_admin(service)
    node = service.nsqd.http_address
    here = f"/jobs/{node}/ns/emails"
    dead = [make_dead(service, "emails", b"bounce %d" % n) for n in range(3)]
    size = service.api("GET", "/emails/size").json()["size"]

    respawned = await admin.post(here, headers=HTMX,
                                 data={"action": "respawn", "limit": "1", "ttl": "60"})
    assert "Respawned the dead letters of ns/emails on 1 daemon. 1 job back in the queue." \
        in respawned.text
    assert dead_size(service, "emails") == 2
    assert service.api("GET", "/emails/size").json()["size"] == size + 1
    job = service.consume("emails").json()
    assert (job["job_id"], job["remain_tries"], 0 < job["ttl"] <= 60) == (dead[0], 0, True)

    ask = await admin.post(here, data={"action": "empty_dead"})
    assert "Are you sure?" in ask.text and "Delete every dead letter of ns/emails" in ask.text
    emptied = await admin.post(here, data={"action": "empty_dead", "confirm": "yes"})
    assert emptied.status_code == 303
    assert dead_size(service, "emails") == 0
    assert "Emptied the dead letters of ns/emails on 1 daemon. 2 deleted." in (
        await admin.get(here)).text

    waiting = service.publish("emails", b"to delete")
    deleted = await admin.post(here, data={"action": "delete_job", "job_id": waiting,
                                           "confirm": "yes"})
    assert deleted.status_code == 303
    assert service.api("GET", f"/emails/job/{waiting}").status_code == 404

    # tokens: made by lmstfy, shown whole once, limited, deleted
    ns_page = f"/jobs/{node}/ns"
    created = await admin.post(ns_page, headers=HTMX,
                               data={"action": "create_token", "description": "billing"})
    token = re.search(r"The new token is (\S+) :", created.text).group(1)
    listed = service.admin("GET", "/token/ns").json()["tokens"]
    assert listed[token] == "billing"
    limited = await admin.post(ns_page, headers=HTMX, data={
        "action": "set_limit", "token": token_ref(token), "read": "5", "write": "2",
        "interval": "10"})
    assert "Now 5 consumes and 2 publishes per 10 s" in limited.text
    assert service.admin("GET", f"/token/ns/{token}/limit").json() == {
        "read": 5, "write": 2, "interval": 10}
    assert "5 consumes, 2 publishes per 10 s" in (await admin.get(ns_page)).text
    await admin.post(ns_page, data={"action": "delete_limit", "token": token_ref(token)})
    assert service.admin("GET", f"/token/ns/{token}/limit").status_code == 404
    await admin.post(ns_page, data={"action": "delete_token", "token": token_ref(token),
                                    "confirm": "yes"})
    assert token not in service.admin("GET", "/token/ns").json()["tokens"]
    bad = await admin.post(ns_page, headers=HTMX, data={
        "action": "set_limit", "token": token_ref(service.token), "read": "0", "write": "0",
        "interval": "1"})
    assert "A limit is a number of consumes" in bad.text


async def test_who_may_act_and_lmstfy_accounts(run_daemon, make_admin):
    service = lmstfy_service(run_daemon, "--lmstfy-admin-account=ops:s3cret",
                             auth=("ops", "s3cret"))
    node = service.nsqd.http_address
    make_dead(service, "emails", b"x")
    without = await make_admin(service)
    page = (await without.get(f"/jobs/{node}/ns/emails")).text
    assert "[401]" in page  # lmstfy's admin API wants the account nsqadmin was not given
    admin = await make_admin(service, lmstfy_admin_account="ops:s3cret",
                             admin_users=["alice"])
    page = await admin.get(f"/jobs/{node}/ns/emails")
    assert "[401]" not in page.text and ">x</code>" in page.text
    assert "Respawn" not in page.text  # not an admin: no actions offered
    refused = await admin.post(f"/jobs/{node}/ns/emails", data={"action": "respawn"})
    assert refused.status_code == 403 and dead_size(service, "emails") == 1
    done = await admin.post(f"/jobs/{node}/ns/emails", headers={**HTMX, "X-Forwarded-User":
                                                                "alice"},
                            data={"action": "respawn"})
    assert "1 job back in the queue" in done.text and dead_size(service, "emails") == 0


async def test_no_lmstfy_no_jobs_menu(run_daemon, make_admin):
    plain = type("Plain", (), {"nsqd": run_daemon("nsqd")})
    admin = await make_admin(plain)
    assert ">Jobs</a>" not in (await admin.get("/")).text
    page = (await admin.get("/jobs")).text
    assert "No nsqd serves lmstfy's API" in page
    assert (await admin.get(f"/jobs/{plain.nsqd.http_address}/ns")).status_code == 404


async def test_a_namespace_without_a_token(run_daemon, make_admin):
    service = lmstfy_service(run_daemon)
    make_dead(service, "emails", b"x")
    assert service.admin("DELETE", f"/token/ns/{service.token}").status_code == 204
    admin = await make_admin(service)
    node = service.nsqd.http_address
    page = (await admin.get(f"/jobs/{node}/ns")).text
    assert "Namespace ns has no token" in page
    respawn = await admin.post(f"/jobs/{node}/ns/emails", headers=HTMX,
                               data={"action": "respawn"})
    assert "namespace ns has no token" in respawn.text
    assert httpx.get(f"{service.data_url}/api/ns/emails/deadletter/size",
                     timeout=DEADLINE).json()["size"] == 1


async def test_two_lmstfy_on_one_machine_are_told_apart(run_daemon, make_admin):
    one, two = lmstfy_service(run_daemon), lmstfy_service(run_daemon)
    one.publish("emails", b"a")
    two.publish("orders", b"b")
    admin = await make_admin(one, two)
    page = (await admin.get("/jobs")).text
    hostname = socket.gethostname()
    for service, queue in ((one, "emails"), (two, "orders")):
        port = service.nsqd.http_port
        assert f'lmstfy on</span> {hostname}:{port} <small' in page
        assert f'href="/jobs/{service.nsqd.http_address}/ns/{queue}"' in page
    queue = (await admin.get(f"/jobs/{two.nsqd.http_address}/ns/orders")).text
    assert f"lmstfy on {hostname}:{two.nsqd.http_port}" in queue
    # the breadcrumb names the node too: Jobs, node, namespace, queue
    crumbs = re.search(r'<nav class="crumbs"[^>]*>(.*?)</nav>', queue).group(1)
    assert re.findall(r"<li[^>]*>(?:<a [^>]*>)?([^<]*)", crumbs) == [
        "Jobs", f"{hostname}:{two.nsqd.http_port}", "ns", "orders"]
