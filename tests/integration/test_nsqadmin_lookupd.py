"""nsqadmin in ``--lookupd-http-address`` mode, through the ASGI app, with a real nsqlookupd
and two real nsqd registered with it (``--lookupd-tcp-address``)."""

import httpx
import pytest
from nsq_testing import DEADLINE, free_port, start_daemon, until, wait_until
from nsqadmin import Options, create_app

PROBE = "lkp_probe"


@pytest.fixture(scope="module")
def lookupd_cluster(tmp_path_factory):
    """(lookupd, [nsqd, nsqd], registers_itself)"""
    lookupd = start_daemon("nsqlookupd", ["--tcp-address=127.0.0.1:0",
                                          "--http-address=127.0.0.1:0"])
    nsqds = []
    try:
        for index in range(2):
            data = tmp_path_factory.mktemp(f"lookupd-nsqd-{index}")
            nsqds.append(start_daemon("nsqd", [
                "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                f"--data-path={data}", "--broadcast-address=127.0.0.1",
                f"--lookupd-tcp-address={lookupd.tcp_address}"]))
        for daemon in nsqds:
            httpx.post(f"http://{daemon.http_address}/topic/create", params={"topic": PROBE},
                       timeout=DEADLINE)

        def both_registered():
            found = httpx.get(f"http://{lookupd.http_address}/lookup", params={"topic": PROBE},
                              timeout=DEADLINE)
            return found.status_code == 200 and len(found.json()["producers"]) == 2

        try:
            registers = wait_until(both_registered, what="both nsqd registered with nsqlookupd")
        except TimeoutError:
            registers = False
        yield lookupd, nsqds, registers
    finally:
        for daemon in [*nsqds, lookupd]:
            daemon.stop()


@pytest.fixture
async def cluster(lookupd_cluster):
    """Returns ``register(topic)``: waits until lookupd lists every nsqd that has ``topic``."""
    lookupd, nsqds, registers = lookupd_cluster
    if not registers:
        pytest.skip("nsqd does not register with nsqlookupd (--lookupd-tcp-address)")

    async def register(topic: str) -> None:
        async with httpx.AsyncClient(timeout=DEADLINE) as http:
            expected = 0
            for daemon in nsqds:
                stats = (await http.get(f"http://{daemon.http_address}/stats",
                                        params={"format": "json", "topic": topic})).json()
                expected += bool(stats["topics"])

            async def listed():
                found = await http.get(f"http://{lookupd.http_address}/lookup",
                                       params={"topic": topic})
                return found.status_code == 200 and len(found.json()["producers"]) == expected

            await until(listed, what=f"lookupd lists {expected} producers of {topic}")

    return register


@pytest.fixture
async def admin(lookupd_cluster):
    lookupd, _, _ = lookupd_cluster
    async with AdminApp(lookupd.http_address) as client:
        yield client


class AdminApp:
    """An in-process nsqadmin on these lookupds, its lifespan running while in use."""

    def __init__(self, *lookupds: str) -> None:
        options = Options(nsqlookupd_http_addresses=lookupds)
        options.validate()
        self.app = create_app(options, sampling=False)

    async def __aenter__(self) -> httpx.AsyncClient:
        self.lifespan = self.app.router.lifespan_context(self.app)
        await self.lifespan.__aenter__()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                        base_url="http://admin.test")
        return self.client

    async def __aexit__(self, *exc) -> None:
        await self.client.aclose()
        await self.lifespan.__aexit__(None, None, None)


async def post(daemon, path, **params):
    body = params.pop("body", b"")
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        response = await http.post(f"http://{daemon.http_address}{path}", params=params,
                                   content=body)
    assert response.status_code == 200, response.text


async def get(daemon, path, **params):
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        return await http.get(f"http://{daemon.http_address}{path}", params=params)


async def seed(nsqds, topic):
    a, b = nsqds
    await post(a, "/topic/create", topic=topic)
    await post(a, "/channel/create", topic=topic, channel="work")
    for daemon, count in ((a, 2), (b, 1)):
        for n in range(count):
            await post(daemon, "/pub", topic=topic, body=b"m%d" % n)


def test_nsqd_registers_itself(lookupd_cluster):
    """The tests below need it; without it they skip, and this one says why."""
    _, _, registers = lookupd_cluster
    assert registers, "nsqd did not register its topics with nsqlookupd"


async def test_topics_and_topic_pages(admin, cluster, lookupd_cluster):
    _, nsqds, _ = lookupd_cluster
    await seed(nsqds, "lkp_pages")
    await cluster("lkp_pages")
    page = await admin.get("/")
    assert page.status_code == 200 and 'href="/topics/lkp_pages"' in page.text
    assert "Discovery through 1 nsqlookupd." in page.text
    topic = (await admin.get("/api/topics/lkp_pages")).json()
    assert (topic["message_count"], len(topic["nodes"])) == (3, 2)
    assert topic["depth"] == sum(node["depth"] for node in topic["nodes"])
    html = (await admin.get("/topics/lkp_pages")).text
    assert html.count('value="tombstone"') == 2  # one per producer, lookupd mode only
    assert "lkp_pages" in (await admin.get("/api/topics")).json()["topics"]


async def test_nodes_page_counts_lookupd_connections(admin, cluster, lookupd_cluster):
    _, nsqds, _ = lookupd_cluster
    await seed(nsqds, "lkp_nodes")
    await cluster("lkp_nodes")
    nodes = (await admin.get("/api/nodes")).json()["nodes"]
    ours = {n["http_port"]: n for n in nodes}
    for daemon in nsqds:
        node = ours[daemon.http_port]
        assert node["tcp_port"] == daemon.tcp_port and len(node["remote_addresses"]) == 1
        assert any(t["topic"] == "lkp_nodes" for t in node["topics"])
    html = (await admin.get("/nodes")).text
    assert "Lookupd conns" in html and html.count('<span class="badge ok">OK</span>') == 2


async def test_create_lookup_page_and_delete_inactive(admin, lookupd_cluster):
    lookupd, _, _ = lookupd_cluster
    made = await admin.post("/api/topics", json={"topic": "lkp_idle", "channel": "later"})
    assert made.json() == {"message": ""}
    assert "lkp_idle" in (await get(lookupd, "/topics")).json()["topics"]
    assert (await get(lookupd, "/channels", topic="lkp_idle")).json()["channels"] == ["later"]
    inactive = (await admin.get("/api/topics", params={"inactive": "true"})).json()
    assert inactive["topics"]["lkp_idle"] == ["later"] and "lkp_probe" not in inactive["topics"]
    page = (await admin.get("/lookup")).text
    assert lookupd.http_address in page and "lkp_idle" in page and "inactive" in page
    gone = await admin.post("/lookup", data={"action": "delete", "topic": "lkp_idle",
                                             "confirm": "yes"})
    assert gone.status_code == 303
    assert "lkp_idle" not in (await get(lookupd, "/topics")).json()["topics"]


async def test_settings_reach_the_producers(admin, cluster, lookupd_cluster):
    """lookupd mode: a channel created with max_attempts gets it on every nsqd that has the
    topic; a topic's TTL set from its page reaches both."""
    _, nsqds, _ = lookupd_cluster
    await seed(nsqds, "lkp_settings")
    await cluster("lkp_settings")
    made = await admin.post("/", data={"action": "create", "topic": "lkp_settings",
                                       "channel": "mail", "max_attempts": "3"})
    assert made.status_code == 303
    await admin.post("/topics/lkp_settings", data={"action": "settings", "message_ttl": "600"})
    for daemon in nsqds:
        (topic,) = (await get(daemon, "/stats", format="json", topic="lkp_settings")).json()[
            "topics"]
        channels = {c["channel_name"]: c for c in topic["channels"]}
        assert channels["mail"]["max_attempts"] == 3 and topic["message_ttl"] == 600
    page = (await admin.get("/topics/lkp_settings/mail")).text
    assert 'Max attempts: <strong data-setting="max_attempts">3</strong>' in page


async def test_tombstone_a_producer(admin, cluster, lookupd_cluster):
    lookupd, nsqds, _ = lookupd_cluster
    await seed(nsqds, "lkp_tomb")
    await cluster("lkp_tomb")
    a, b = nsqds
    node = f"127.0.0.1:{b.http_port}"
    answer = await admin.post("/topics/lkp_tomb", data={"action": "tombstone", "node": node,
                                                       "confirm": "yes"})
    assert answer.status_code == 303
    producers = (await get(lookupd, "/lookup", topic="lkp_tomb")).json()["producers"]
    assert [p["http_port"] for p in producers] == [a.http_port]
    stats = (await get(b, "/stats", format="json", topic="lkp_tomb")).json()
    assert stats["topics"] is None
    assert "Tombstoned topic lkp_tomb on " + node in (await admin.get("/topics/lkp_tomb")).text


async def test_delete_topic_everywhere(admin, cluster, lookupd_cluster):
    lookupd, nsqds, _ = lookupd_cluster
    await seed(nsqds, "lkp_delete")
    await cluster("lkp_delete")
    assert (await admin.delete("/api/topics/lkp_delete")).json() == {"message": ""}
    assert "lkp_delete" not in (await get(lookupd, "/topics")).json()["topics"]
    for daemon in nsqds:
        assert (await get(daemon, "/stats", format="json", topic="lkp_delete")).json()[
            "topics"] is None


async def test_a_dead_lookupd_is_reported(lookupd_cluster, cluster):
    lookupd, nsqds, _ = lookupd_cluster
    await seed(nsqds, "lkp_dead")
    await cluster("lkp_dead")
    dead = f"127.0.0.1:{free_port()}"
    async with AdminApp(lookupd.http_address, dead) as admin:
        page = await admin.get("/")
        assert "1 daemon did not answer" in page.text and dead in page.text
        assert 'href="/topics/lkp_dead"' in page.text
        api = (await admin.get("/api/nodes")).json()
        assert api["message"].startswith(f"WARNING: GET http://{dead}/nodes")
        lookup = (await admin.get("/lookup")).text
        assert "unreachable" in lookup and "lkp_dead" in lookup
