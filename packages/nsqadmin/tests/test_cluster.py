"""ClusterInfo's fan-out against fake daemons (httpx.MockTransport): unions, dedupes,
partial failures; and ClusterActions' fan-out."""

import json

import httpx
import pytest
from nsqadmin.cluster import ClusterInfo
from nsqadmin.cluster_actions import ClusterActions
from nsqadmin.upstream import ClusterError, Upstream

LOOKUPD_A, LOOKUPD_B, DOWN = "la:4161", "lb:4161", "down:4161"


def producer(host: str, http_port: int, version: str = "1.3.0", topics=(), tombstones=()):
    return {"remote_address": f"{host}:5000", "hostname": host, "broadcast_address": host,
            "tcp_port": http_port - 1, "http_port": http_port, "version": version,
            "tombstones": list(tombstones), "topics": list(topics)}


def stats_body(topics: list[dict]) -> dict:
    return {"version": "1.3.0", "health": "OK", "start_time": 0, "topics": topics,
            "producers": None}


class FakeCluster:
    """Answers like lookupds ``la``/``lb`` and nsqds ``n1``/``n2``; ``down`` refuses."""

    def __init__(self) -> None:
        self.posts: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = f"{request.url.host}:{request.url.port}"
        path, query = request.url.path, dict(request.url.params)
        assert request.headers["accept"] == "application/vnd.nsq; version=1.0"
        if request.url.host == "down":
            raise httpx.ConnectError("refused", request=request)
        if request.method == "POST":
            self.posts.append(f"{host}{path}?{request.url.query.decode()}")
            if host == "n2:4151" and path == "/channel/pause":
                return httpx.Response(404, json={"message": "CHANNEL_NOT_FOUND"})
            if host == "n1:4151" and path == "/topic/empty":
                return httpx.Response(500, json={"message": "INTERNAL_ERROR"})
            return httpx.Response(200)
        if path == "/topics":
            topics = {"la:4161": ["a", "b"], "lb:4161": ["b", "c"]}[host]
            return httpx.Response(200, json={"topics": topics})
        if path == "/nodes":
            both = [producer("n1", 4151, topics=["b", "a"], tombstones=[False, True])]
            if host == "lb:4161":
                both.append(producer("n2", 4151, version="1.2.0"))
            return httpx.Response(200, json={"producers": both})
        if path == "/lookup":
            if query["topic"] == "missing":
                return httpx.Response(404, json={"message": "TOPIC_NOT_FOUND"})
            return httpx.Response(200, json={"channels": ["c1"], "producers": [
                producer("n1", 4151), producer("n2", 4151)]})
        if path == "/stats":
            chan = {"channel_name": "c1", "depth": 2, "backend_depth": 0, "message_count": 5,
                    "clients": [], "client_count": 0}
            body = stats_body([{"topic_name": "a", "depth": 1, "backend_depth": 0,
                                "message_count": 5, "channels": [chan]}])
            return httpx.Response(200, json=body)
        return httpx.Response(404, json={"message": "NOT_FOUND"})


@pytest.fixture
async def fake():
    fake = FakeCluster()
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake),
                                 headers={"Accept": "application/vnd.nsq; version=1.0"}) as client:
        yield fake, Upstream(client)


async def test_lookupd_topics_union_and_partial_failure(fake):
    _, upstream = fake
    cluster = ClusterInfo(upstream, [LOOKUPD_A, LOOKUPD_B, DOWN])
    result = await cluster.topics()
    assert result.value == ["a", "b", "c"]
    (error,) = result.errors
    assert error.address == DOWN and "GET http://down:4161/topics" in str(error)


async def test_every_lookupd_down_is_a_cluster_error(fake):
    _, upstream = fake
    with pytest.raises(ClusterError, match=r"^failed to query any nsqlookupd: GET http://down"):
        await ClusterInfo(upstream, [DOWN]).topics()


async def test_lookupd_nodes_dedupe_and_versions(fake):
    _, upstream = fake
    nodes = (await ClusterInfo(upstream, [LOOKUPD_A, LOOKUPD_B]).nodes()).value
    assert [n.http_address for n in nodes] == ["n1:4151", "n2:4151"]
    n1, n2 = nodes
    assert n1.remote_addresses == ("la:4161/n1:5000", "lb:4161/n1:5000")
    assert [(t.topic, t.tombstoned) for t in n1.topics] == [("a", True), ("b", False)]
    assert (n1.out_of_date, n2.out_of_date) == (False, True)
    assert n2.to_json()["topics"] is None


async def test_topic_not_found_on_lookupd_is_no_error(fake):
    _, upstream = fake
    result = await ClusterInfo(upstream, [LOOKUPD_A]).topic_producers("missing")
    assert result.value == [] and result.errors == ()


async def test_stats_keys_channels_by_topic_when_no_topic_given(fake):
    _, upstream = fake
    cluster = ClusterInfo(upstream, [LOOKUPD_A])
    producers = (await cluster.topic_producers("a")).value
    everything = (await cluster.stats(producers)).value
    assert list(everything.channels) == ["a:c1"]
    assert everything.channels["a:c1"].depth == 4
    assert everything.health == {"n1:4151": "OK", "n2:4151": "OK"}
    one = (await cluster.stats(producers, topic="a")).value
    assert list(one.channels) == ["c1"]


async def test_delete_topic_goes_to_lookupds_then_producers(fake):
    recorder, upstream = fake
    actions = ClusterActions(ClusterInfo(upstream, [LOOKUPD_A, LOOKUPD_B]))
    result = await actions.delete_topic("a")
    assert result.ok and result.action == "delete_topic"
    assert sorted(recorder.posts) == ["la:4161/topic/delete?topic=a",
                                      "lb:4161/topic/delete?topic=a",
                                      "n1:4151/topic/delete?topic=a",
                                      "n2:4151/topic/delete?topic=a"]


async def test_channel_action_skips_nodes_without_the_channel(fake):
    recorder, upstream = fake
    actions = ClusterActions(ClusterInfo(upstream, [LOOKUPD_A]))
    result = await actions.topic_action("pause", "a", "c1")
    assert result.action == "pause_channel"
    assert result.done == ("n1:4151",) and result.errors == ()
    assert len(recorder.posts) == 2


async def test_action_reports_each_failing_node(fake):
    _, upstream = fake
    actions = ClusterActions(ClusterInfo(upstream, [LOOKUPD_A]))
    result = await actions.topic_action("empty", "a")
    assert result.done == ("n2:4151",)
    (error,) = result.errors
    assert error.address == "n1:4151" and error.status == 500 and error.reply == "INTERNAL_ERROR"
    assert "got response 500 Internal Server Error: INTERNAL_ERROR" in error.message


async def test_create_channel_in_lookupd_mode(fake):
    recorder, upstream = fake
    actions = ClusterActions(ClusterInfo(upstream, [LOOKUPD_A]))
    result = await actions.create_topic_channel("a", "new")
    assert result.ok
    assert sorted(recorder.posts) == [
        "la:4161/channel/create?topic=a&channel=new", "la:4161/topic/create?topic=a",
        "n1:4151/channel/create?topic=a&channel=new",
        "n2:4151/channel/create?topic=a&channel=new"]


async def test_tombstone(fake):
    recorder, upstream = fake
    actions = ClusterActions(ClusterInfo(upstream, [LOOKUPD_A]))
    result = await actions.tombstone_topic_producer("a", "n1:4151")
    assert result.ok
    assert recorder.posts == ["la:4161/topic/tombstone?topic=a&node=n1%3A4151",
                              "n1:4151/topic/delete?topic=a"]


async def test_tls_required_answer_is_retried_over_https():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.scheme == "http":
            return httpx.Response(403, content=json.dumps(
                {"message": "TLS_REQUIRED", "https_port": 4152}))
        return httpx.Response(200, json={"version": "1.3.0"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        assert await Upstream(client).get_json("n1:4151", "/info") == {"version": "1.3.0"}
    assert seen == ["http://n1:4151/info", "https://n1:4152/info"]
