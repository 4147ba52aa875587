"""nsqadmin and the topic log (beyond NSQ) through the ASGI app, against two real nsqd
(``--nsqd-http-address`` mode): a topic's retained range and retention on its page and in its
settings form, a channel's position on its page, a new channel's start from the create form,
and channels rewound from the page (plain form and htmx) and the JSON API, on every nsqd or
one, with the messages delivered again by nsqd."""

import datetime
import time

import httpx
import pytest
from nsq_testing import DEADLINE
from nsq_testing.html import Rows
from nsqadmin import Options

from ._admin import InProcessAdmins

HTMX = {"HX-Request": "true"}


@pytest.fixture
def nsqds(run_daemon):
    return run_daemon("nsqd", "--broadcast-address=127.0.0.1"), run_daemon("nsqd")


@pytest.fixture
async def make_admin(nursery, nsqds):
    admins = InProcessAdmins(nursery)

    async def make(**overrides):
        options = Options(nsqd_http_addresses=[d.http_address for d in nsqds], **overrides)
        options.validate()
        return await admins.start(options)

    yield make
    await admins.close()


@pytest.fixture
async def admin(make_admin):
    return await make_admin()


async def nsqd_call(daemon, method, path, **params):
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        response = await http.request(method, f"http://{daemon.http_address}{path}",
                                      params=params, content=params.pop("body", b""))
    assert response.status_code == 200, response.text
    return response.json() if response.content.startswith(b"{") else None


async def nsqd_topic(daemon, topic, **params):
    body = await nsqd_call(daemon, "GET", "/stats", format="json", topic=topic, **params)
    return (body["topics"] or [None])[0]


async def consume_all(daemon, topic, channel):
    """Every message the channel has ready, taken and finished over nsqd's HTTP consume."""
    bodies = []
    while True:
        taken = await nsqd_call(daemon, "POST", "/channel/consume", topic=topic,
                                channel=channel, n="100")
        if not taken["messages"]:
            return bodies
        for msg in taken["messages"]:
            bodies.append(msg["body"])
            await nsqd_call(daemon, "POST", "/message/fin", topic=topic, channel=channel,
                            id=msg["id"])


def utc_form_time(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")


async def test_retention_and_start_from_the_forms_and_the_log_on_the_pages(admin, nsqds):
    a, b = nsqds
    for daemon, count in ((a, 5), (b, 2)):
        await nsqd_call(daemon, "POST", "/topic/create", topic="rp")
        for n in range(count):
            await nsqd_call(daemon, "POST", "/pub", topic="rp", body=f"m{n}".encode())
    # without a retention: none shown, but the log is (nsqadmin asks for the offsets)
    page = (await admin.get("/topics/rp")).text
    assert 'data-setting="retention"' not in page and "<h2>Log" in page
    created = await admin.post("/", data={"action": "create", "topic": "rp", "channel": "late",
                                          "start": "latest", "retention": "1h",
                                          "message_ttl": "", "max_attempts": ""})
    assert created.status_code == 303
    for daemon, end in ((a, 5), (b, 2)):
        topic = await nsqd_topic(daemon, "rp")  # a retention: the offsets come unasked
        assert topic["retention"] == 3600 * 10**9
        assert (topic["earliest_offset"], topic["latest_offset"]) == (0, end - 1)
        (late,) = topic["channels"]
        # start=latest: not the messages the topic held for its first channel (NSQ's way)
        assert (late["mark_delete_offset"], late["depth"]) == (end, 0)
    r = await admin.post("/api/topics", json={"topic": "rp", "channel": "early",
                                               "start": "earliest"})
    assert (r.status_code, r.json()) == (200, {"message": ""})
    for daemon, end in ((a, 5), (b, 2)):
        early = (await nsqd_topic(daemon, "rp", channel="early"))["channels"][0]
        assert (early["mark_delete_offset"], early["depth"]) == (0, end)

    page = (await admin.get("/topics/rp")).text
    assert "Created channel rp/late (retention 1h0m0s, starting at the latest) on 2 " \
           "daemons." in page
    assert 'Retention: <strong data-setting="retention">1h (1h0m0s)</strong>' in page
    assert 'name="retention" value="1h0m0s"' in page
    rows = Rows(page)
    header = next(r for r in rows.rows if r and r[0] == "nsqd" and "Earliest kept" in r)
    log_a = next(r for r in rows.rows if len(r) == len(header)
                 and r[0].endswith(f":{a.http_port}") and r[1] == "0")
    assert log_a[header.index("Latest")] == "4"
    channels = next(r for r in rows.rows if r and r[0] == "Channel")
    assert rows.row("early")[channels.index("Behind latest")] == "7"  # 5 + 2, none read
    assert rows.row("late")[channels.index("Behind latest")] == "0"

    position = Rows((await admin.get("/topics/rp/early")).text)
    header = next(r for r in position.rows if r and "Mark-delete" in r)
    on_a = next(r for r in position.rows if len(r) == len(header)
                and r[0].endswith(f":{a.http_port}"))
    assert on_a[1:] == ["0 \u2013 4", "0", "0", "4", "5"]
    assert position.rows[position.rows.index(header) + 3][-1] == "7"  # the total behind
    api = (await admin.get("/api/topics/rp/early")).json()
    assert api["lag"] == 7 and list(api).index("lag") > list(api).index("e2e_processing_latency")
    assert {n["node"]: n["mark_delete_offset"] for n in api["nodes"]} == {
        f"127.0.0.1:{a.http_port}": 0, next(n["node"] for n in api["nodes"]
                                            if n["node"] != f"127.0.0.1:{a.http_port}"): 0}

    # the topic's settings form changes the retention on every nsqd, and takes it away
    updated = await admin.post("/topics/rp", data={"action": "settings", "message_ttl": "",
                                                   "retention": "2h",
                                                   "retention_bytes": "5000000"})
    assert updated.status_code == 303
    for daemon in nsqds:
        topic = await nsqd_topic(daemon, "rp")
        assert (topic["retention"], topic["retention_bytes"]) == (7200 * 10**9, 5000000)
    assert "Updated topic rp (retention 2h0m0s, retention 5,000,000 bytes) on 2 daemons." in (
        await admin.get("/topics/rp")).text
    await nsqd_call(b, "POST", "/topic/create", topic="rp", retention="30m")
    page = (await admin.get("/topics/rp")).text
    assert (f'<strong data-setting="retention">2h (2h0m0s)</strong> <small class="muted">'
            f'(differs by nsqd: 127.0.0.1:{a.http_port} 2h (2h0m0s), ') in page
    assert "30m (30m0s))</small>" in page
    await admin.post("/topics/rp", data={"action": "settings", "retention": "0",
                                         "retention_bytes": "0"})
    for daemon in nsqds:
        assert "retention" not in await nsqd_topic(daemon, "rp")
    assert 'data-setting="retention"' not in (await admin.get("/topics/rp")).text
    bad = await admin.post("/topics/rp", headers=HTMX,
                           data={"action": "settings", "retention": "forever"})
    assert "Invalid setting: INVALID_RETENTION." in bad.text
    no_channel = await admin.post("/", headers=HTMX, data={"action": "create", "topic": "rp",
                                                           "start": "earliest"})
    assert "where it starts are a channel&#39;s: name the channel." in no_channel.text


async def test_rewind_from_the_page_and_the_api_delivers_again(make_admin, nsqds):
    a, b = nsqds
    admin = await make_admin()
    node_a = f"127.0.0.1:{a.http_port}"
    before = time.time() - 60  # a minute before anything was published
    for daemon, count in ((a, 3), (b, 2)):
        await nsqd_call(daemon, "POST", "/topic/create", topic="rw", retention="1h")
        await nsqd_call(daemon, "POST", "/channel/create", topic="rw", channel="c")
        for n in range(count):
            await nsqd_call(daemon, "POST", "/pub", topic="rw", body=f"m{n}".encode())
    first = {d.http_port: await consume_all(d, "rw", "c") for d in nsqds}
    assert sorted(map(len, first.values())) == [2, 3]
    page = (await admin.get("/topics/rw/c")).text
    assert "Rewind to…" in page and '<small>(now: 20' in page and 'name="time" step="1">' in page
    assert "hx-confirm=\"Rewind channel c?" in page

    # a plain form asks first, then rewinds every nsqd and reports where the channel is now
    form = {"action": "rewind", "to": "time", "time": utc_form_time(before), "offset": ""}
    ask = await admin.post("/topics/rw/c", data=form)
    assert "Are you sure?" in ask.text and "Rewind channel c of topic rw to " in ask.text
    assert (await nsqd_topic(a, "rw"))["channels"][0]["depth"] == 0  # nothing done yet
    done = await admin.post("/topics/rw/c", data={**form, "confirm": "yes"})
    assert done.status_code == 303
    report = (await admin.get("/topics/rw/c")).text
    assert f"Rewound channel rw/c to {utc_form_time(int(before))}Z on 2 daemons. Its " \
           "position now: offset 0 on " in report
    again = {d.http_port: await consume_all(d, "rw", "c") for d in nsqds}
    assert again == first  # every message delivered again, in order

    # htmx, one nsqd, by offset: only that one moves
    moved = await admin.post("/topics/rw/c", headers=HTMX, data={
        "action": "rewind", "to": "offset", "offset": "2", "node": node_a, "confirm": "yes"})
    assert f"Rewound channel rw/c to offset 2 on {node_a} on 1 daemon. Its position now: " \
           f"offset 2 on {node_a}." in moved.text
    assert (await nsqd_topic(a, "rw"))["channels"][0]["depth"] == 1
    assert (await nsqd_topic(b, "rw"))["channels"][0]["depth"] == 0
    assert await consume_all(a, "rw", "c") == first[a.http_port][2:]
    # past the end of the log: refused there, the cursor left alone (nsqd would skip ahead)
    past = await admin.post("/topics/rw/c", headers=HTMX, data={
        "action": "rewind", "to": "offset", "offset": "100", "node": node_a, "confirm": "yes"})
    assert "Could not rewind rw/c to offset 100" in past.text
    assert "offset 100 is past the end of its log: the next message published gets 3" in past.text
    assert (await nsqd_topic(a, "rw", include_offsets="true"))["channels"][0][
        "mark_delete_offset"] == 3
    refused = await admin.post("/topics/rw/c", headers=HTMX,
                               data={"action": "rewind", "to": "time", "time": "noon"})
    assert "Not a time: &#39;noon&#39;" in refused.text

    # the JSON API: the offsets each nsqd answered
    r = await admin.post("/api/topics/rw/c", json={"action": "rewind", "to": "earliest"})
    assert r.status_code == 200
    body = r.json()
    assert body["message"] == "" and set(body["offsets"].values()) == {0}
    assert len(body["offsets"]) == 2 and node_a in body["offsets"]
    assert {d.http_port: await consume_all(d, "rw", "c") for d in nsqds} == first
    r = await admin.post("/api/topics/rw/c", json={"action": "rewind",
                                                    "timestamp": time.time() + 3600})
    # a time after now: every nsqd refuses it (nothing moves a cursor past the end), and an
    # action that failed on every nsqd is an error
    assert r.status_code == 502, r.text
    assert r.json()["message"].startswith("UPSTREAM_ERROR") and "out of range" in r.text
    r = await admin.post("/api/topics/rw/c", json={"action": "rewind", "offset": -1})
    assert r.status_code == 400
    assert r.json()["message"].startswith("INVALID_REWIND: An offset is a whole number")
    r = await admin.post("/api/topics/rw", json={"action": "rewind", "to": "earliest"})
    assert (r.status_code, r.json()) == (400, {"message": "INVALID_ACTION"})
    r = await admin.post("/api/topics/rw/nope", json={"action": "rewind", "to": "earliest"})
    assert r.json() == {"message": "", "offsets": {}}  # no nsqd has it: nothing to do

    # admin users only
    guarded = await make_admin(admin_users=["alice"])
    assert "Rewind to…" not in (await guarded.get("/topics/rw/c")).text
    r = await guarded.post("/api/topics/rw/c", json={"action": "rewind", "to": "earliest"})
    assert (r.status_code, r.json()) == (403, {"message": "FORBIDDEN"})
    r = await guarded.post("/topics/rw/c", data={"action": "rewind", "to": "earliest",
                                                 "confirm": "yes"})
    assert r.status_code == 403
    assert (await nsqd_topic(a, "rw"))["channels"][0]["depth"] == 0


async def test_one_name_per_node_and_a_failed_rewind_is_an_error(make_admin, nsqds):
    """The rewind API takes a node by the name the pages show it (``hostname:http_port``), by
    its ``broadcast_address:http_port`` and by the address nsqadmin reaches it at; a rewind
    that failed on every nsqd is an error (502), one that failed on some a warning (200)."""
    a, b = nsqds
    admin = await make_admin()
    for daemon, count in ((a, 3), (b, 2)):
        await nsqd_call(daemon, "POST", "/topic/create", topic="names", retention="1h")
        await nsqd_call(daemon, "POST", "/channel/create", topic="names", channel="c")
        for n in range(count):
            await nsqd_call(daemon, "POST", "/pub", topic="names", body=f"m{n}".encode())
    hostname = (await nsqd_call(a, "GET", "/info"))["hostname"]
    shown = f"{hostname}:{a.http_port}"  # what the pages show for node a
    topic_page = (await admin.get("/topics/names")).text
    assert f">{shown}</a>" in topic_page
    node_a = f"127.0.0.1:{a.http_port}"  # its broadcast address:http port, and its address
    for name in (shown, node_a):
        r = await admin.post("/api/topics/names/c", json={
            "action": "rewind", "to": "offset", "offset": "1", "node": name})
        assert (r.status_code, r.json()) == (200, {"message": "", "offsets": {node_a: 1}})
        r = await admin.get(f"/api/nodes/{name}")
        assert r.status_code == 200 and r.json()["node"] == name
        assert (await admin.get(f"/nodes/{name}")).status_code == 200

    r = await admin.post("/api/topics/names/c", json={
        "action": "rewind", "to": "earliest", "node": "nowhere:4151"})
    assert r.status_code == 404
    assert r.json()["message"] == "NODE_NOT_FOUND: no nsqd nowhere:4151 has topic names"
    # refused by the one nsqd asked: an error, the cursor left alone
    r = await admin.post("/api/topics/names/c", json={
        "action": "rewind", "to": "offset", "offset": "100", "node": shown})
    assert r.status_code == 502
    assert r.json()["message"] == ("UPSTREAM_ERROR: offset 100 is past the end of its log: "
                                   "the next message published gets 3")
    # refused by every nsqd
    r = await admin.post("/api/topics/names/c", json={"action": "rewind", "offset": 100})
    assert r.status_code == 502 and r.json()["message"].count("past the end") == 2
    # refused by one (b's log ends at 2), done on the other: a warning
    r = await admin.post("/api/topics/names/c", json={"action": "rewind", "offset": 3})
    assert r.status_code == 200
    assert r.json()["offsets"] == {node_a: 3}
    assert r.json()["message"].startswith("WARNING: ") and "past the end" in r.json()["message"]
