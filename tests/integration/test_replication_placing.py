"""Replicated topics made and removed by what NSQ clients already do, with real processes: etcd
and nsqd on loopback (docs/design/replication.md, "Placement and re-placement"). With
``--etcd-endpoints`` the first PUB, MPUB, DPUB or HTTP ``/pub`` ``/mpub`` to a topic places it
(``--default-replicas``) as ``/topic/create`` does, then publishes by the replicated rules;
an ephemeral topic is never placed. ``/topic/delete`` of a placed topic, sent to any node,
deletes it on its leader, then its keys, and so on every replica."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from nsq_common import commands
from nsq_testing import DEADLINE, Daemon, Etcd, WireClient, until
from nsqd.replication.etcd import EtcdClient
from nsqd.replication.keys import Placement, placement_key, topic_prefix

from .test_replication_data import bodies, clean, joined, node_of, start_node


async def placement(etcd_client: EtcdClient, topic: str) -> Placement | None:
    kv = await etcd_client.get(placement_key(topic))
    return Placement.decode(kv.value) if kv is not None else None


async def post(daemon: Daemon, path: str, body: bytes, **params: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        return await http.post(f"http://{daemon.http_address}{path}", params=params,
                               content=body)


async def test_the_first_publish_places_the_topic_and_is_acknowledged_once_copied(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    a = start_node(run_daemon, etcd, "--default-replicas=2")
    b = start_node(run_daemon, etcd, "--default-replicas=2")
    await joined(etcd_client, a, b)

    # PUB, MPUB and DPUB over TCP, each to a topic nobody made: placed on both, led by the
    # node published to, and the follower holds the records (the OK waited for it)
    async with await WireClient.connect(a.tcp_address) as producer:
        await producer.pub("t_pub", b"p0")
        await producer.send(commands.mpub("t_mpub", [b"m0", b"m1"]))
        assert await producer.response() == b"OK"
        await producer.send(commands.dpub("t_dpub", 1, b"d0"))
        assert await producer.response() == b"OK"
    for topic, expected in (("t_pub", [(0, "p0")]), ("t_mpub", [(0, "m0"), (1, "m1")]),
                            ("t_dpub", [(0, "d0")])):
        placed = await placement(etcd_client, topic)
        assert placed is not None and placed.nodes[0] == node_of(a), a.output()
        assert set(placed.nodes) == {node_of(a), node_of(b)}
        assert f"leading topic {topic} at epoch 1" in a.output()
        assert await bodies(a, topic) == expected
        # acknowledged means copied: the follower has them by the time of the OK (its HW
        # may come one fetch later, so its log is read up to it)
        await until(lambda t=topic, e=expected: _same(bodies(b, t), e), what=f"{topic} on b")

    # HTTP /pub and /mpub to b: placed with b leading
    r = await post(b, "/pub", b"h0", topic="h_pub")
    assert r.status_code == 200 and r.text == "OK", r.text
    r = await post(b, "/mpub", b"h1\nh2", topic="h_mpub")
    assert r.status_code == 200 and r.text == "OK", r.text
    for topic in ("h_pub", "h_mpub"):
        placed = await placement(etcd_client, topic)
        assert placed is not None and placed.nodes[0] == node_of(b), topic
    assert await bodies(b, "h_mpub") == [(0, "h1"), (1, "h2")]
    await until(lambda: _same(bodies(a, "h_mpub"), [(0, "h1"), (1, "h2")]), what="h_mpub on a")

    # an ephemeral topic is never placed: made here, as by any nsqd
    async with await WireClient.connect(a.tcp_address) as producer:
        await producer.pub("t_eph#ephemeral", b"e")
    kvs, _ = await etcd_client.range(topic_prefix("t_eph#ephemeral"), prefix=True)
    assert kvs == []
    clean(a, b)


async def test_a_first_publish_to_a_topic_placed_elsewhere_goes_to_its_leader(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    a = start_node(run_daemon, etcd)
    b = start_node(run_daemon, etcd)
    await joined(etcd_client, a, b)
    async with await WireClient.connect(a.tcp_address) as producer:
        await producer.pub("solo", b"s0")  # one replica (--default-replicas 1): on a only
    placed = await placement(etcd_client, "solo")
    assert placed is not None and placed.nodes == (node_of(a),)
    # b holds no replica: its publish goes to a, and b makes no topic of that name
    async with await WireClient.connect(b.tcp_address) as producer:
        await producer.pub("solo", b"s1")
    assert await bodies(a, "solo") == [(0, "s0"), (1, "s1")]
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        doc = (await http.get(f"http://{b.http_address}/stats",
                              params={"format": "json", "topic": "solo"})).json()
    assert not doc["topics"]
    clean(a, b)


async def topic_names(daemon: Daemon) -> list[str]:
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        doc = (await http.get(f"http://{daemon.http_address}/stats",
                              params={"format": "json"})).json()
    return [t["topic_name"] for t in doc["topics"] or []]


async def test_deleting_a_placed_topic_deletes_it_on_every_replica_and_in_etcd(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    a = start_node(run_daemon, etcd, "--default-replicas=2")
    b = start_node(run_daemon, etcd, "--default-replicas=2")
    await joined(etcd_client, a, b)
    for topic in ("gone_a", "gone_b"):
        async with await WireClient.connect(a.tcp_address) as producer:
            await producer.pub(topic, b"x")  # placed on both, led by a
        await until(lambda t=topic: _same(bodies(b, t), [(0, "x")]), what=f"{topic} on b")

    # sent to the leader, and sent to the follower (forwarded to the leader)
    for topic, to in (("gone_a", a), ("gone_b", b)):
        r = await post(to, "/topic/delete", b"", topic=topic)
        assert r.status_code == 200, r.text
        kvs, _ = await etcd_client.range(topic_prefix(topic), prefix=True)
        assert kvs == [], topic  # no key left once answered
        assert topic not in await topic_names(a)  # the leader deleted its copy first
        await until(lambda t=topic: _absent(b, t), what=f"{topic} deleted on b")
    assert "deleted from the cluster" in a.output()

    # the name is free: a publish places it again, from offset 0
    async with await WireClient.connect(b.tcp_address) as producer:
        await producer.pub("gone_a", b"again")
    assert await bodies(b, "gone_a") == [(0, "again")]
    # a topic nobody placed is still unknown, as in NSQ
    r = await post(b, "/topic/delete", b"", topic="never")
    assert r.status_code == 404 and r.json()["message"] == "TOPIC_NOT_FOUND"
    clean(a, b)


async def _absent(daemon: Daemon, topic: str) -> bool:
    return topic not in await topic_names(daemon)


async def _same(got: object, expected: list[tuple[int, str]]) -> bool:
    try:
        return await got == expected  # type: ignore[misc]
    except httpx.HTTPStatusError:
        return False  # (not made there yet)


async def channel_doc(daemon: Daemon, topic: str) -> dict[str, dict[str, object]]:
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        doc = (await http.get(f"http://{daemon.http_address}/stats",
                              params={"format": "json", "topic": topic})).json()
    topics = doc["topics"] or []
    return {c["channel_name"]: c for c in topics[0]["channels"]} if topics else {}


async def test_channels_and_settings_made_on_the_leader_are_so_on_every_replica(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    a = start_node(run_daemon, etcd, "--default-replicas=2")
    b = start_node(run_daemon, etcd, "--default-replicas=2")
    await joined(etcd_client, a, b)
    async with await WireClient.connect(a.tcp_address) as producer:
        await producer.pub("settled", b"x")  # placed on both, led by a
    for path, params in (("/channel/create", {"channel": "kept"}),
                         ("/channel/create", {"channel": "paused"}),
                         ("/channel/create", {"channel": "dropped"}),
                         ("/channel/create", {"channel": "e#ephemeral"}),
                         ("/channel/pause", {"channel": "paused"}),
                         ("/topic/pause", {})):
        r = await post(a, path, b"", topic="settled", **params)
        assert r.status_code == 200, (path, r.text)

    async def follows(want: set[str], paused: set[str], topic_paused: bool) -> bool:
        channels = await channel_doc(b, "settled")
        async with httpx.AsyncClient(timeout=DEADLINE) as http:
            doc = (await http.get(f"http://{b.http_address}/stats",
                                  params={"format": "json", "topic": "settled"})).json()
        return (set(channels) == want and doc["topics"][0]["paused"] is topic_paused
                and {n for n, c in channels.items() if c["paused"]} == paused)

    # an ephemeral channel is the leader's own: not replicated
    await until(lambda: follows({"kept", "paused", "dropped"}, {"paused"}, True),
                what="the channels and settings on b")
    r = await post(a, "/channel/delete", b"", topic="settled", channel="dropped")
    assert r.status_code == 200
    r = await post(a, "/topic/unpause", b"", topic="settled")
    assert r.status_code == 200
    await until(lambda: follows({"kept", "paused"}, {"paused"}, False),
                what="a channel deleted and the topic unpaused on b")
    clean(a, b)
