"""nsqadmin's pages, actions and JSON API through the ASGI app, with two real nsqd behind it
(``--nsqd-http-address`` mode). One nsqd broadcasts 127.0.0.1, the other its hostname, so
both ways of naming a node are exercised."""

import functools
import itertools
import json
import re
import socket

import httpx
import pytest
import trio
from nsq_testing import DEADLINE, WireClient, free_port, start_daemon, until
from nsq_testing.html import Rows
from nsqadmin import Options, create_app
from nsqadmin.history import History

from ._admin import InProcessAdmins

HTMX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def nsqds(tmp_path_factory):
    started = []
    try:
        for index, extra in enumerate((["--broadcast-address=127.0.0.1"], [])):
            data = tmp_path_factory.mktemp(f"admin-nsqd-{index}")
            started.append(start_daemon("nsqd", ["--tcp-address=127.0.0.1:0",
                                                 "--http-address=127.0.0.1:0",
                                                 f"--data-path={data}", *extra]))
        yield started
    finally:
        for daemon in started:
            daemon.stop()


@pytest.fixture
async def make_admin(nsqds):
    """A factory for in-process nsqadmin apps; each runs its lifespan until the test ends."""
    async with trio.open_nursery() as nursery:
        admins = InProcessAdmins(nursery)

        async def make(extra_nsqd=(), history=None, **overrides):
            addresses = [d.http_address for d in nsqds] + list(extra_nsqd)
            options = Options(nsqd_http_addresses=addresses, **overrides)
            options.validate()
            history = History(min_spacing=0.0) if history is None else history
            return await admins.start(options, history=history)

        yield make
        await admins.close()


@pytest.fixture
async def admin(make_admin):
    return await make_admin()


async def nsqd_topic(daemon, topic):
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        body = (await http.get(f"http://{daemon.http_address}/stats",
                               params={"format": "json", "topic": topic})).json()
    return (body["topics"] or [None])[0]


async def nsqd_post(daemon, path, **params):
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        response = await http.post(f"http://{daemon.http_address}{path}", params=params,
                                   content=params.pop("body", b""))
        assert response.status_code == 200, response.text


async def seed(nsqds, topic, channel="work"):
    """The topic on both nsqds (3 + 2 messages), the channel only on the first."""
    a, b = nsqds
    await nsqd_post(a, "/topic/create", topic=topic)
    await nsqd_post(a, "/channel/create", topic=topic, channel=channel)
    for daemon, count in ((a, 3), (b, 2)):
        for n in range(count):
            await nsqd_post(daemon, "/pub", topic=topic, body=f"m{n}".encode())


async def test_ping_and_static(admin):
    assert (await admin.get("/ping")).text == "OK"
    htmx = await admin.get("/static/htmx.min.js")
    assert htmx.status_code == 200 and b"htmx" in htmx.content[:200]
    css = await admin.get("/static/nsqadmin.css")
    assert css.status_code == 200


async def test_topics_page_shows_totals_from_both_nodes(admin, nsqds):
    await seed(nsqds, "adm_topics")
    page = await admin.get("/")
    assert page.status_code == 200 and page.text.startswith("<!doctype html>")
    assert '<script src="/static/htmx.min.js" defer></script>' in page.text
    assert 'href="/topics/adm_topics"' in page.text
    # topic, depth, trend, messages, rate, trend, channels, nodes
    row = Rows(page.text).row("adm_topics")
    assert row[1] == "2" and row[3] == "5" and row[6] == "1" and row[7] == "2"
    same = await admin.get("/topics")
    assert 'href="/topics/adm_topics"' in same.text


async def test_htmx_refresh_returns_only_the_live_region(admin, nsqds):
    await seed(nsqds, "adm_partial")
    full = await admin.get("/topics/adm_partial")
    assert 'hx-get="/topics/adm_partial"' in full.text and 'hx-trigger="every 5s"' in full.text
    partial = await admin.get("/topics/adm_partial", headers=HTMX)
    assert partial.text.lstrip().startswith('<section id="live"')
    assert "<html" not in partial.text and "adm_partial" in partial.text
    assert "HX-Request" in partial.headers["vary"]


async def test_topic_page_per_node_breakdown_and_channels(admin, nsqds):
    await seed(nsqds, "adm_topic")
    a, b = nsqds
    page = (await admin.get("/topics/adm_topic")).text
    rows = Rows(page)
    # nsqd, depth, memory + disk, messages, channels
    first = next(r for r in rows.rows if r and r[0].endswith(f" 127.0.0.1:{a.http_port}"))
    assert first[1:] == ["0", "0 + 0", "3", "1"]
    second = next(r for r in rows.rows if r and r[0].endswith(f":{b.http_port}"))
    assert second[1:] == ["2", "2 + 0", "2", "0"]
    assert rows.row("Total")[1:] == ["2", "2 + 0", "5", "1"]
    # channel, depth, trend, memory + disk, in flight, deferred, requeued, timed out, messages
    work = rows.row("work")
    assert work[1] == "3" and work[3] == "3 + 0" and work[4:9] == ["0", "0", "0", "0", "3"]
    header = next(r for r in rows.rows if r and r[0] == "Channel")
    assert work[header.index("Connections")] == "0"
    assert work[header.index("Behind latest")] == "3"  # the log's offsets: 3 published, none done
    assert "Pause topic" in page and "Empty topic" in page and "Delete topic" in page


async def test_channel_page_lists_every_client(admin, nsqds):
    await seed(nsqds, "adm_clients")
    a, _ = nsqds
    consumer = await WireClient.connect(a.tcp_address)
    try:
        await consumer.identify(hostname="worker-1", user_agent="admin-test/1.0",
                                client_id="w1")
        await consumer.subscribe("adm_clients", "work", rdy=7)
        async def rdy_applied():
            channel = (await nsqd_topic(a, "adm_clients"))["channels"][0]
            return channel["clients"] and channel["clients"][0]["ready_count"] == 7

        await until(rdy_applied, what="nsqd applied RDY 7")
        page = (await admin.get("/topics/adm_clients/work")).text
        rows = Rows(page)
        client = rows.row("worker-1")
        # client, user agent, protocol, nsqd, features, RDY, in flight, finished, requeued
        assert client[1] == "admin-test/1.0" and client[2] == "V2"
        assert client[3].endswith(f":{a.http_port}")
        assert client[5] == "7" and client[6] == "3"
        assert "ago" in client[10]
        api = (await admin.get("/api/topics/adm_clients/work")).json()
        assert api["client_count"] == 1 and api["clients"][0]["user_agent"] == "admin-test/1.0"
        assert api["clients"][0]["node"] == f"127.0.0.1:{a.http_port}"
    finally:
        await consumer.aclose()


async def test_the_favicon(admin):
    page = (await admin.get("/")).text
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    icon = await admin.get("/favicon.ico")
    assert (icon.status_code, icon.headers["content-type"]) == (200, "image/x-icon")
    assert icon.content[:4] == b"\0\0\1\0" and icon.content[22:26] == b"\x89PNG"
    svg = await admin.get("/static/favicon.svg")
    assert svg.status_code == 200 and svg.text.startswith("<svg")


async def test_nodes_and_node_pages(admin, nsqds):
    await seed(nsqds, "adm_nodes")
    a, b = nsqds
    page = (await admin.get("/nodes")).text
    rows = Rows(page)
    row_a = next(r for r in rows.rows if len(r) > 3 and r[3] == str(a.http_port))
    # hostname, broadcast address, tcp port, http port, version, health, topics
    assert row_a[1] == "127.0.0.1" and row_a[2] == str(a.tcp_port) and row_a[4] == "1.3.0"
    assert row_a[5] == "OK" and "adm_nodes" in row_a[6]
    row_b = next(r for r in rows.rows if len(r) > 3 and r[3] == str(b.http_port))
    assert row_b[5] == "OK"
    # both run on this machine: each is named hostname:http_port, not just the hostname
    hostname = socket.gethostname()
    assert (row_a[0], row_b[0]) == (f"{hostname}:{a.http_port}", f"{hostname}:{b.http_port}")
    node = await admin.get(f"/nodes/127.0.0.1:{a.http_port}")
    assert node.status_code == 200 and "adm_nodes" in node.text
    assert "work" in node.text
    # the second nsqd is named by its hostname, reached at the configured address
    name_b = (await admin.get("/api/nodes")).json()["nodes"]
    name_b = next(f"{n['broadcast_address']}:{n['http_port']}" for n in name_b
                  if n["http_port"] == b.http_port)
    assert (await admin.get(f"/nodes/{name_b}")).status_code == 200
    assert (await admin.get(f"/nodes/{b.http_address}")).status_code == 200
    missing = await admin.get("/nodes/nowhere:1")
    assert missing.status_code == 404 and "No node called" in missing.text


async def test_pause_by_plain_form_redirects_and_flashes_once(admin, nsqds):
    await seed(nsqds, "adm_form")
    a, _ = nsqds
    response = await admin.post("/topics/adm_form/work", data={"action": "pause"})
    assert response.status_code == 303 and response.headers["location"] == "/topics/adm_form/work"
    assert (await nsqd_topic(a, "adm_form"))["channels"][0]["paused"] is True
    flashed = await admin.get("/topics/adm_form/work")
    assert "Paused channel adm_form/work on 1 daemon." in flashed.text
    assert "paused" in flashed.text and "Unpause channel" in flashed.text
    again = await admin.get("/topics/adm_form/work")
    assert "Paused channel" not in again.text


async def test_htmx_action_swaps_live_region_and_reports_out_of_band(admin, nsqds):
    await seed(nsqds, "adm_htmx")
    a, _ = nsqds
    await nsqd_post(a, "/topic/pause", topic="adm_htmx")
    response = await admin.post("/topics/adm_htmx", data={"action": "unpause"}, headers=HTMX)
    assert response.status_code == 200
    assert response.text.lstrip().startswith('<section id="live"')
    assert 'id="report" aria-live="polite" hx-swap-oob="true"' in response.text
    assert "Unpaused topic adm_htmx on 2 daemons." in response.text
    assert (await nsqd_topic(a, "adm_htmx"))["paused"] is False
    # a channel row's own pause button on the topic page
    response = await admin.post("/topics/adm_htmx", data={"action": "pause", "channel": "work"},
                                headers=HTMX)
    assert "Paused channel adm_htmx/work on 1 daemon." in response.text
    assert (await nsqd_topic(a, "adm_htmx"))["channels"][0]["paused"] is True


async def test_destructive_actions_ask_first(admin, nsqds):
    await seed(nsqds, "adm_delete")
    a, b = nsqds
    ask = await admin.post("/topics/adm_delete", data={"action": "delete"})
    assert ask.status_code == 200 and "Are you sure?" in ask.text
    assert 'name="confirm" value="yes"' in ask.text
    assert await nsqd_topic(a, "adm_delete") is not None
    empty = await admin.post("/topics/adm_delete/work", data={"action": "empty", "confirm": "yes"})
    assert empty.status_code == 303
    assert (await nsqd_topic(a, "adm_delete"))["channels"][0]["depth"] == 0
    done = await admin.post("/topics/adm_delete", data={"action": "delete", "confirm": "yes"})
    assert done.status_code == 303 and done.headers["location"] == "/"
    assert await nsqd_topic(a, "adm_delete") is None and await nsqd_topic(b, "adm_delete") is None
    landing = await admin.get("/")
    assert "Deleted topic adm_delete on 2 daemons." in landing.text
    # htmx delete of a channel: the browser is sent to the topic page
    await seed(nsqds, "adm_delete2")
    gone = await admin.post("/topics/adm_delete2/work", headers=HTMX,
                            data={"action": "delete", "confirm": "yes"})
    assert gone.headers["hx-redirect"] == "/topics/adm_delete2"
    assert (await nsqd_topic(a, "adm_delete2"))["channels"] == []


async def test_forms_refuse_bad_input_and_other_origins(admin, nsqds):
    await seed(nsqds, "adm_refuse")
    bad = await admin.post("/", data={"action": "create", "topic": "no spaces"}, headers=HTMX)
    assert "Invalid topic name" in bad.text
    cross = await admin.post("/topics/adm_refuse", data={"action": "pause"},
                             headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    assert (await nsqd_topic(nsqds[0], "adm_refuse"))["paused"] is False


async def test_create_topic_and_channel_in_nsqd_mode(admin, nsqds):
    response = await admin.post("/", data={"action": "create", "topic": "adm_new",
                                           "channel": "fresh"})
    assert response.status_code == 303
    for daemon in nsqds:
        created = await nsqd_topic(daemon, "adm_new")
        assert [c["channel_name"] for c in created["channels"]] == ["fresh"]


async def test_json_api(admin, nsqds):
    await seed(nsqds, "adm_api")
    a, b = nsqds
    topics = (await admin.get("/api/topics")).json()
    assert "adm_api" in topics["topics"] and topics["message"] == ""
    response = await admin.get("/api/topics/adm_api")
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"
    topic = response.json()
    assert (topic["node"], topic["depth"], topic["message_count"]) == ("*", 2, 5)
    assert sorted(n["node"].rsplit(":", 1)[1] for n in topic["nodes"]) == sorted(
        [str(a.http_port), str(b.http_port)])
    assert [c["channel_name"] for c in topic["channels"]] == ["work"]
    assert list(topic)[-1] == "message"
    assert (await admin.get("/api/topics/adm_api/nope")).json() == {"message": ""}
    counter = (await admin.get("/api/counter")).json()["stats"]
    assert counter[f"adm_api:work:127.0.0.1:{a.http_port}"]["message_count"] == 3
    node = (await admin.get(f"/api/nodes/127.0.0.1:{a.http_port}")).json()
    assert node["node"] == f"127.0.0.1:{a.http_port}"
    assert any(t["topic_name"] == "adm_api" for t in node["topics"])
    assert (await admin.get("/api/nodes/nowhere:1")).json() == {"message": "NODE_NOT_FOUND"}

    act = await admin.post("/api/topics/adm_api/work", json={"action": "pause"})
    assert act.json() == {"message": ""}
    assert (await nsqd_topic(a, "adm_api"))["channels"][0]["paused"] is True
    bad = await admin.post("/api/topics/adm_api", json={"action": "explode"})
    assert (bad.status_code, bad.json()) == (400, {"message": "INVALID_ACTION"})
    empty = await admin.post("/api/topics/adm_api", json={"action": "empty"})
    assert empty.status_code == 200
    assert (await nsqd_topic(b, "adm_api"))["depth"] == 0
    invalid = await admin.post("/api/topics", json={"topic": "bad name"})
    assert (invalid.status_code, invalid.json()) == (400, {"message": "INVALID_TOPIC"})
    assert (await admin.post("/api/topics", json={"topic": "adm_api2"})).status_code == 200
    assert await nsqd_topic(b, "adm_api2") is not None
    assert (await admin.delete("/api/topics/adm_api/work")).json() == {"message": ""}
    assert (await nsqd_topic(a, "adm_api"))["channels"] == []
    assert (await admin.delete("/api/topics/adm_api")).status_code == 200
    assert await nsqd_topic(a, "adm_api") is None
    assert (await admin.get("/api/nothing")).json() == {"message": "NOT_FOUND"}


async def test_config_endpoint(admin):
    assert (await admin.get("/config/nsqd_http_addresses")).status_code == 200
    assert (await admin.get("/config/http_client_connect_timeout")).json() == 2 * 10**9
    assert (await admin.get("/config/bogus")).json() == {"message": "INVALID_OPTION"}
    put = await admin.put("/config/log_level", content=b"warn")
    assert put.json() == 3
    assert (await admin.put("/config/log_level", content=b"loud")).status_code == 400
    moved = await admin.put("/config/nsqlookupd_http_addresses", content=b'["127.0.0.1:1"]')
    assert moved.json() == ["127.0.0.1:1"]
    assert "Discovery through 1 nsqlookupd." in (await admin.get("/lookup")).text
    back = await admin.put("/config/nsqlookupd_http_addresses", content=b"[]")
    assert back.json() == [] and "Watching the configured nsqd" in (await admin.get("/")).text
    assert (await admin.put("/config/nsqlookupd_http_addresses", content=b"{")).status_code == 400


async def test_config_refuses_outside_cidr(make_admin):
    admin = await make_admin(allow_config_from_cidr="10.0.0.0/8")
    assert (await admin.get("/config/log_level")).json() == {"message": "FORBIDDEN"}


async def test_unreachable_nsqd_is_shown_and_the_rest_renders(make_admin, nsqds):
    await seed(nsqds, "adm_down")
    dead = f"127.0.0.1:{free_port()}"
    admin = await make_admin(extra_nsqd=[dead])
    page = await admin.get("/")
    assert page.status_code == 200
    assert "1 daemon did not answer" in page.text and dead in page.text
    assert "connection refused" in page.text
    assert Rows(page.text).row("adm_down")[3] == "5"  # both live nodes still counted
    nodes = Rows((await admin.get("/nodes")).text)
    down = next(r for r in nodes.rows if r and r[0] == "127.0.0.1" and "unreachable" in r)
    assert down[3] == dead.rsplit(":", 1)[1]
    assert sum(1 for r in nodes.rows if "OK" in r) == 2
    topic = await admin.get("/topics/adm_down")
    assert dead in topic.text and Rows(topic.text).row("Total")[3] == "5"
    api = (await admin.get("/api/topics/adm_down")).json()
    assert api["message"].startswith("WARNING: GET http://" + dead)
    assert api["message_count"] == 5


async def test_every_nsqd_down_still_renders(nsqds):
    dead = f"127.0.0.1:{free_port()}"
    app = create_app(Options(nsqd_http_addresses=[dead]), sampling=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://admin.test") as admin:
        page = await admin.get("/")
        assert page.status_code == 200 and "No nsqd answered" in page.text
        api = await admin.get("/api/topics")
        assert api.status_code == 502
        assert api.json()["message"].startswith("UPSTREAM_ERROR: failed to query any nsqd: ")


async def test_sparklines_and_rates_from_samples(make_admin, nsqds):
    # samples a (fake) second apart: each reading of the history's clock moves it on by one
    ticks = itertools.count()
    admin = await make_admin(history=History(min_spacing=0.0, clock=lambda: float(next(ticks))))
    await seed(nsqds, "adm_spark")
    for _ in range(2):  # three samples, two rates
        await admin.get("/topics/adm_spark")
        for n in range(6):
            await nsqd_post(nsqds[0], "/pub", topic="adm_spark", body=b"x%d" % n)
    page = (await admin.get("/topics/adm_spark")).text
    assert '<svg class="spark"' in page and "<polyline" in page
    assert re.search(r"Messages per second to adm_spark: now [\d.,]+", page)
    row = Rows((await admin.get("/")).text).row("adm_spark")
    assert row[4].endswith("/s")


async def test_admin_users_guard_actions(make_admin, nsqds):
    await seed(nsqds, "adm_acl")
    admin = await make_admin(admin_users=["alice"])
    page = await admin.get("/topics/adm_acl")
    assert "Pause topic" not in page.text
    refused = await admin.post("/topics/adm_acl", data={"action": "pause"})
    assert refused.status_code == 403
    api = await admin.post("/api/topics/adm_acl", json={"action": "pause"})
    assert (api.status_code, api.json()) == (403, {"message": "FORBIDDEN"})
    alice = {"X-Forwarded-User": "alice"}
    assert "Pause topic" in (await admin.get("/topics/adm_acl", headers=alice)).text
    ok = await admin.post("/topics/adm_acl", data={"action": "pause"}, headers=alice)
    assert ok.status_code == 303
    assert (await nsqd_topic(nsqds[0], "adm_acl"))["paused"] is True


async def test_base_path(make_admin, nsqds):
    await seed(nsqds, "adm_base")
    admin = await make_admin(base_path="/admin")
    assert (await admin.get("/admin/ping")).text == "OK"
    page = await admin.get("/admin/")
    assert 'href="/admin/topics/adm_base"' in page.text
    assert 'src="/admin/static/htmx.min.js"' in page.text
    moved = await admin.post("/admin/topics/adm_base", data={"action": "pause"})
    assert moved.headers["location"] == "/admin/topics/adm_base"


async def test_notifications_like_nsqadmin(make_admin, nsqds, nursery):
    await seed(nsqds, "adm_notify")
    received = []
    arrived = trio.Event()

    async def handle(stream):
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"content-length: *(\d+)", head, re.I).group(1))
        while len(body) < length:
            body += await stream.receive_some(65536)
        received.append((head.decode(), json.loads(body)))
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await stream.aclose()
        if len(received) == 2:
            arrived.set()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    admin = await make_admin(notification_http_endpoint=f"http://127.0.0.1:{port}/hook")
    await admin.post("/api/topics/adm_notify/work", json={"action": "pause"},
                     headers={"User-Agent": "curl/8", "Authorization": "Basic YWxpY2U6c2VjcmV0"})
    await admin.post("/topics/adm_notify", data={"action": "empty", "confirm": "yes"})
    with trio.fail_after(DEADLINE):
        await arrived.wait()
    by_action = {body["action"]: (head, body) for head, body in received}
    head, pause = by_action["pause_channel"]
    assert head.startswith("POST /hook ") and "application/json" in head.lower()
    assert list(pause) == ["action", "topic", "channel", "timestamp", "user", "remote_ip",
                           "user_agent", "url", "via"]
    assert (pause["topic"], pause["channel"], pause["user"]) == ("adm_notify", "work", "alice")
    assert pause["remote_ip"] == "127.0.0.1:40000" and pause["user_agent"] == "curl/8"
    assert pause["url"] == "http://admin.test/api/topics/adm_notify/work"
    _, empty = by_action["empty_topic"]
    assert "channel" not in empty and "user" not in empty and "node" not in empty


async def test_ephemeral_names_survive_urls(admin, nsqds):
    await seed(nsqds, "adm_eph")
    a, _ = nsqds
    await nsqd_post(a, "/channel/create", topic="adm_eph", channel="tmp#ephemeral")
    topic = (await admin.get("/topics/adm_eph")).text
    assert 'href="/topics/adm_eph/tmp%23ephemeral"' in topic
    page = await admin.get("/topics/adm_eph/tmp%23ephemeral")
    assert page.status_code == 200 and 'hx-get="/topics/adm_eph/tmp%23ephemeral"' in page.text
    paused = await admin.post("/topics/adm_eph/tmp%23ephemeral", data={"action": "pause"})
    assert paused.headers["location"] == "/topics/adm_eph/tmp%23ephemeral"
    channels = {c["channel_name"]: c for c in (await nsqd_topic(a, "adm_eph"))["channels"]}
    assert channels["tmp#ephemeral"]["paused"] is True and channels["work"]["paused"] is False
    swapped = await admin.post("/topics/adm_eph/tmp%23ephemeral", data={"action": "unpause"},
                               headers=HTMX)
    assert swapped.text.lstrip().startswith('<section id="live"')


async def test_job_features_show_where_they_are_used(admin, nsqds):
    """Dead letters and expired counts on the channel page, the TTL on the topic page; none
    of it on the pages of topics that do not use them."""
    a, _ = nsqds
    await seed(nsqds, "adm_plain")
    assert "Dead letters" not in (await admin.get("/topics/adm_plain/work")).text
    assert 'data-setting="message_ttl"' not in (await admin.get("/topics/adm_plain")).text
    await nsqd_post(a, "/topic/create", topic="adm_jobs", message_ttl="3600")
    await nsqd_post(a, "/channel/create", topic="adm_jobs", channel="work", max_attempts="1")
    await nsqd_post(a, "/pub", topic="adm_jobs", body=b"poison")
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        base = f"http://{a.http_address}"
        params = {"topic": "adm_jobs", "channel": "work"}
        (msg,) = (await http.post(f"{base}/channel/consume", params=params)).json()["messages"]
        r = await http.post(f"{base}/message/deadletter", params={**params, "id": msg["id"]})
        assert r.status_code == 200
    page = (await admin.get("/topics/adm_jobs/work")).text
    rows = Rows(page)
    header = next(r for r in rows.rows if r and r[0] == "nsqd")
    total = rows.row("Total")
    assert total[header.index("Dead letters")] == "1" and total[header.index("Expired")] == "0"
    assert "Max attempts: <strong data-setting=\"max_attempts\">1</strong>" in page
    assert "Expired messages: <strong data-setting=\"dead_letter_expired\">dropped" in page
    topic_page = (await admin.get("/topics/adm_jobs")).text
    assert "Message TTL: <strong data-setting=\"message_ttl\">1h (3,600 s)</strong>" in topic_page
    # the topic's channel table has the job columns, because a channel uses them
    rows = Rows(topic_page)
    header = next(r for r in rows.rows if r and r[0] == "Channel")
    work = rows.row("work")
    assert (work[header.index("Dead letters")], work[header.index("Expired")]) == ("1", "0")
    assert "max 1" in work[0]
    api = (await admin.get("/api/topics/adm_jobs/work")).json()
    assert api["dead_letter_count"] == 1 and api["max_attempts"] == 1
    assert list(api).index("dead_letter_count") > list(api).index("e2e_processing_latency")
    node = Rows((await admin.get(f"/nodes/{a.http_address}")).text)
    header = next(r for r in node.rows if r and r[0] == "Channel" and "Dead letters" in r)
    row = next(r for r in node.rows if r and r[0].startswith("work max 1"))
    assert row[header.index("Dead letters")] == "1"
    plain = (await admin.get("/api/topics/adm_plain/work")).json()
    assert "dead_letter_count" not in plain and "max_attempts" not in plain
    rows = Rows((await admin.get("/topics/adm_plain")).text)
    assert "Dead letters" not in next(r for r in rows.rows if r and r[0] == "Channel")


async def test_settings_from_the_create_and_update_forms(admin, nsqds):
    """A channel made with max_attempts from the create form: /stats says it, and the page;
    the settings forms change a topic's TTL and a channel's settings on every nsqd."""
    a, b = nsqds
    created = await admin.post("/", data={"action": "create", "topic": "adm_set",
                                          "channel": "mail", "max_attempts": "4",
                                          "message_ttl": "90", "dead_letter_expired": ""})
    assert created.status_code == 303
    for daemon in nsqds:
        topic = await nsqd_topic(daemon, "adm_set")
        assert topic["message_ttl"] == 90
        (channel,) = topic["channels"]
        assert (channel["channel_name"], channel["max_attempts"]) == ("mail", 4)
        assert "dead_letter_expired" not in channel
    report = (await admin.get("/topics/adm_set/mail")).text
    assert "Created channel adm_set/mail (TTL 90 s, max attempts 4) on 2 daemons." in report
    assert 'Max attempts: <strong data-setting="max_attempts">4</strong>' in report
    assert '<form class="create" method="post" action="/topics/adm_set/mail">' in report
    assert 'name="max_attempts" min="0" max="65535" value="4"' in report

    updated = await admin.post("/topics/adm_set/mail", data={
        "action": "settings", "max_attempts": "7", "dead_letter_expired": "true"})
    assert updated.status_code == 303
    for daemon in nsqds:
        (channel,) = (await nsqd_topic(daemon, "adm_set"))["channels"]
        assert (channel["max_attempts"], channel["dead_letter_expired"]) == (7, True)
    page = (await admin.get("/topics/adm_set/mail")).text
    assert "Updated channel adm_set/mail (max attempts 7, expired messages kept as dead " \
           "letters) on 2 daemons." in page
    assert "kept as dead letters</strong>" in page
    await admin.post("/topics/adm_set", data={"action": "settings", "message_ttl": "0"})
    assert "message_ttl" not in await nsqd_topic(b, "adm_set")
    assert 'data-setting="message_ttl"' not in (await admin.get("/topics/adm_set")).text

    # refused before any daemon is asked; the JSON API takes the same settings
    bad = await admin.post("/topics/adm_set/mail", headers=HTMX,
                           data={"action": "settings", "max_attempts": "70000"})
    assert "Invalid setting: INVALID_MAX_ATTEMPTS." in bad.text
    nothing = await admin.post("/topics/adm_set/mail", headers=HTMX, data={"action": "settings"})
    assert "Nothing to change." in nothing.text
    r = await admin.post("/api/topics", json={"topic": "adm_set", "channel": "api",
                                               "max_attempts": 2, "paused": True})
    assert r.status_code == 200, r.text
    channels = {c["channel_name"]: c for c in (await nsqd_topic(a, "adm_set"))["channels"]}
    assert (channels["api"]["max_attempts"], channels["api"]["paused"]) == (2, True)
    r = await admin.post("/api/topics/adm_set/api", json={"action": "update", "max_attempts": 0})
    assert r.status_code == 200
    channels = {c["channel_name"]: c for c in (await nsqd_topic(a, "adm_set"))["channels"]}
    assert "max_attempts" not in channels["api"]
    r = await admin.post("/api/topics", json={"topic": "adm_set", "message_ttl": -1})
    assert (r.status_code, r.json()) == (400, {"message": "INVALID_TTL"})


async def test_dead_letters_listed_respawned_and_emptied(admin, nsqds):
    """The channel page lists the first dead letters with Respawn and Empty (which asks
    first); the peek page shows the next messages and takes none."""
    a, _ = nsqds
    params = {"topic": "adm_dead", "channel": "work"}
    await nsqd_post(a, "/topic/create", topic="adm_dead")
    await nsqd_post(a, "/channel/create", **params)
    await nsqd_post(a, "/channel/pause", **params)
    for body in (b"first", b"\xff\xfe binary"):
        await nsqd_post(a, "/pub", topic="adm_dead", body=body)
    peek = await admin.get("/topics/adm_dead/work/peek")
    assert peek.status_code == 200
    first = next(row for row in Rows(peek.text).rows if row and row[-1] == "first")
    assert len(first[1]) == 16 and first[2] == "0"  # id, attempts so far
    assert "binary, 9 bytes" in peek.text
    assert (await nsqd_topic(a, "adm_dead"))["channels"][0]["depth"] == 2  # nothing taken
    assert "Dead letters" not in (await admin.get("/topics/adm_dead/work")).text

    await nsqd_post(a, "/channel/unpause", **params)
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        base = f"http://{a.http_address}"
        taken = (await http.post(f"{base}/channel/consume", params={**params, "n": "2"})).json()
        for msg in taken["messages"]:
            r = await http.post(f"{base}/message/deadletter", params={**params, "id": msg["id"]})
            assert r.status_code == 200
    page = await admin.get("/topics/adm_dead/work")
    assert "<h2>Dead letters</h2>" in page.text and "Respawn dead letters" in page.text
    assert "The first dead letters on each nsqd (of 2)" in page.text
    assert ">first</code>" in page.text

    ask = await admin.post("/topics/adm_dead/work", data={"action": "empty_dead_letters"})
    assert "Are you sure?" in ask.text and "Delete every dead letter of channel work" in ask.text
    respawn = await admin.post("/topics/adm_dead/work", headers=HTMX,
                               data={"action": "respawn_dead_letters"})
    assert "Respawned the dead letters of adm_dead/work on 1 daemon." in respawn.text
    channel = (await nsqd_topic(a, "adm_dead"))["channels"][0]
    assert "dead_letter_count" not in channel and channel["depth"] == 2  # none: no key

    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        taken = (await http.post(f"{base}/channel/consume", params={**params, "n": "2"})).json()
        assert [m["attempts"] for m in taken["messages"]] == [1, 1]  # reset by the respawn
        for msg in taken["messages"]:
            await http.post(f"{base}/message/deadletter", params={**params, "id": msg["id"]})
    emptied = await admin.post("/topics/adm_dead/work",
                               data={"action": "empty_dead_letters", "confirm": "yes"})
    assert emptied.status_code == 303
    channel = (await nsqd_topic(a, "adm_dead"))["channels"][0]
    assert "dead_letter_count" not in channel and channel["depth"] == 0
    assert "Emptied the dead letters of adm_dead/work on 1 daemon." in (
        await admin.get("/topics/adm_dead/work")).text
