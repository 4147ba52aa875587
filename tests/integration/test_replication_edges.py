"""The edges of replicated topics on real nsqd processes and a real etcd
(docs/design/replication.md, "Placement and re-placement"): ``/topic/create`` placing a topic
and every replica making it, ``/topic/replicas`` answered by the leader (forwarded to it from
any node), a lost replica placed elsewhere after ``--replica-down-timeout``, and what
``/stats`` and ``/metrics`` show of them; without ``--etcd-endpoints`` none of it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from nsq_testing import DEADLINE, Daemon, Etcd, until
from nsqd.replication.etcd import EtcdClient
from nsqd.replication.keys import Placement, placement_key

from .test_metrics import documented_metrics, exposed_names, problems

#: Go's nsqd 1.3 keys of a topic in /stats (nsqd/stats.go's TopicStats)
GO_TOPIC_KEYS = {"topic_name", "channels", "depth", "backend_depth", "message_count",
                 "message_bytes", "paused", "e2e_processing_latency"}
#: the lease TTL (6 s) and a loaded machine: what noticing a lost node may take here
LOST = 60.0


def start_node(run_daemon: Callable[..., Daemon], etcd: Etcd, *args: str) -> Daemon:
    return run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                      f"--etcd-endpoints={etcd.endpoint}", *args)


def node_id(daemon: Daemon) -> str:
    return f"127.0.0.1:{daemon.tcp_port}"


async def post(daemon: Daemon, path: str, **params: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        return await http.post(f"http://{daemon.http_address}{path}", params=params)


async def topic_doc(daemon: Daemon, topic: str) -> dict[str, Any] | None:
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        doc = (await http.get(f"http://{daemon.http_address}/stats",
                              params={"format": "json", "topic": topic})).json()
    topics = doc["topics"] or []
    return topics[0] if topics else None


async def metrics(daemon: Daemon) -> str:
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        return (await http.get(f"http://{daemon.http_address}/metrics")).text


async def joined(client: EtcdClient, *daemons: Daemon) -> None:
    from nsqd.replication.keys import node_key
    for daemon in daemons:
        async def present(daemon: Daemon = daemon) -> bool:
            return await client.get(node_key(node_id(daemon))) is not None
        await until(present, what=f"{node_id(daemon)} joined")


async def placement(client: EtcdClient, topic: str) -> Placement | None:
    kv = await client.get(placement_key(topic))
    return Placement.decode(kv.value) if kv is not None else None


def error(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["message"]


async def test_a_created_topic_is_placed_and_made_on_every_replica_with_one_replication_object(
        run_daemon: Callable[..., Daemon], etcd: Etcd) -> None:
    nodes = [start_node(run_daemon, etcd, "--default-replicas=2") for _ in range(3)]
    client = EtcdClient([etcd.endpoint])
    try:
        await joined(client, *nodes)
        asked = nodes[1]
        assert (await post(asked, "/topic/create", topic="clicks", replicas=3)).status_code == 200
        where = await placement(client, "clicks")
        assert where is not None and where.replicas == 3
        assert where.nodes[0] == node_id(asked)  # the node asked leads
        assert sorted(where.nodes) == sorted(node_id(n) for n in nodes)
        expected = {"leader": node_id(asked), "epoch": 1, "replicas": list(where.nodes),
                    "isr": list(where.nodes)}
        for node in nodes:  # each made it through its watch, and shows the same object
            async def shown(node: Daemon = node) -> dict[str, Any] | None:
                doc = await topic_doc(node, "clicks")
                return doc if doc is not None and "replication" in doc else None
            doc = await until(shown, what=f"clicks on {node_id(node)}")
            assert {k: doc["replication"][k] for k in expected} == expected
            assert set(doc["replication"]) == {*expected, "high_watermark", "lag"}
            assert set(doc) == GO_TOPIC_KEYS | {"replication"}
        # the high watermark, once published to: the same on every replica (the followers
        # learn it with their next fetch); the leader knows each follower's lag
        async with httpx.AsyncClient(timeout=DEADLINE) as web:
            for i in range(5):
                answer = await web.post(f"http://{asked.http_address}/pub",
                                        params={"topic": "clicks"}, content=b"m%d" % i)
                assert answer.status_code == 200, answer.text

        async def watermarks() -> list[Any] | None:
            docs = [await topic_doc(n, "clicks") for n in nodes]
            marks = [d["replication"]["high_watermark"] if d else None for d in docs]
            return marks if len(set(marks)) == 1 and marks[0] else None
        await until(watermarks, what="one high watermark on every replica")
        doc = await topic_doc(asked, "clicks")
        assert doc is not None
        assert doc["replication"]["lag"] == {n: 0 for n in where.nodes if n != node_id(asked)}
        # created again: placed already, where it is (NSQ's create is idempotent)
        assert (await post(nodes[2], "/topic/create", topic="clicks", replicas=1)).status_code \
            == 200
        assert await placement(client, "clicks") == where

        # without replicas=N: --default-replicas
        assert (await post(asked, "/topic/create", topic="views")).status_code == 200
        where = await placement(client, "views")
        assert where is not None and where.replicas == 2 and len(where.nodes) == 2

        # more than the live nodes, and bad counts, are refused: nothing placed or made
        for bad in ("4", "0", "-1", "two", ""):
            answer = await post(asked, "/topic/create", topic="bad", replicas=bad)
            assert error(answer) == (400, "INVALID_REPLICAS"), bad
        assert await placement(client, "bad") is None
        assert await topic_doc(asked, "bad") is None

        text = await metrics(asked)
        assert 'nsq_topic_replicas{topic="clicks"} 3.0' in text
        assert 'nsq_topic_in_sync_replicas{topic="clicks"} 3.0' in text
        assert 'nsq_topic_under_replicated{topic="clicks"} 0.0' in text
        assert 'nsq_topic_leader{topic="clicks"} 1.0' in text
        assert 'nsq_topic_leader_epoch{topic="clicks"} 1.0' in text
        assert "nsq_under_replicated_topics 0.0" in text
        assert problems(text) == []
        # docs/operations.md lists exactly what an nsqd serves only with --etcd-endpoints
        assert exposed_names(text) - documented_metrics() == documented_metrics(replicated=True)
        follower = next(n for n in nodes if n is not asked)
        assert 'nsq_topic_leader{topic="clicks"} 0.0' in await metrics(follower)
    finally:
        await client.aclose()


async def test_a_topic_not_placed_keeps_gos_keys_and_no_replication_metrics(
        run_daemon: Callable[..., Daemon], etcd: Etcd) -> None:
    node = start_node(run_daemon, etcd)
    client = EtcdClient([etcd.endpoint])
    try:
        await joined(client, node)
        # an ephemeral topic is never placed: a publish makes it here only (any other topic's
        # first publish places it: test_replication_placing)
        async with httpx.AsyncClient(timeout=DEADLINE) as http:
            answer = await http.post(f"http://{node.http_address}/pub",
                                     params={"topic": "local#ephemeral"}, content=b"hello")
        assert answer.text == "OK"
        doc = await topic_doc(node, "local#ephemeral")
        assert doc is not None and set(doc) == GO_TOPIC_KEYS
        text = await metrics(node)
        assert 'topic="local#ephemeral"' in text and "nsq_topic_replicas{" not in text
        assert "nsq_under_replicated_topics 0.0" in text
    finally:
        await client.aclose()


async def test_without_etcd_replicas_is_ignored_and_nothing_is_added(
        run_daemon: Callable[..., Daemon]) -> None:
    node = run_daemon("nsqd")
    # as Go's nsqd: a parameter it does not know is ignored, whatever its value
    assert (await post(node, "/topic/create", topic="t", replicas="two")).status_code == 200
    doc = await topic_doc(node, "t")
    assert doc is not None and set(doc) == GO_TOPIC_KEYS
    assert error(await post(node, "/topic/replicas", topic="t", replicas=2)) == (
        404, "NOT_FOUND")
    text = await metrics(node)
    assert "nsq_topic_replicas" not in text and "nsq_under_replicated_topics" not in text


async def test_replicas_changed_through_any_node_by_the_leader(
        run_daemon: Callable[..., Daemon], etcd: Etcd) -> None:
    nodes = [start_node(run_daemon, etcd) for _ in range(3)]
    by_id = {node_id(n): n for n in nodes}
    client = EtcdClient([etcd.endpoint])
    try:
        await joined(client, *nodes)
        leader = nodes[0]
        assert (await post(leader, "/topic/create", topic="orders", replicas=1)).status_code \
            == 200
        await until(lambda: topic_doc(leader, "orders"))
        outside = nodes[1]  # holds no replica: forwards to the leader
        assert await topic_doc(outside, "orders") is None

        assert (await post(outside, "/topic/replicas", topic="orders", replicas=3)).status_code \
            == 200
        where = await placement(client, "orders")
        assert where is not None and where.replicas == 3 and where.nodes[0] == node_id(leader)
        assert sorted(where.nodes) == sorted(by_id)
        for node in nodes:
            await until(lambda node=node: topic_doc(node, "orders"))
            async def replicated(node: Daemon = node) -> dict[str, Any] | None:
                doc = await topic_doc(node, "orders")
                rep = doc.get("replication") if doc is not None else None
                return rep if rep is not None and len(rep["replicas"]) == 3 else None
            rep = await until(replicated)
            assert rep["leader"] == node_id(leader)

        # the new ones fetch first, and join the in-sync set once caught up (the leader adds
        # them: counted as expansions)
        async def in_sync() -> dict[str, Any] | None:
            doc = await topic_doc(leader, "orders")
            rep = doc.get("replication") if doc is not None else None
            return rep if rep is not None and sorted(rep["isr"]) == sorted(by_id) else None
        await until(in_sync, what="the new replicas in sync")
        text = await metrics(leader)
        assert 'nsq_topic_under_replicated{topic="orders"} 0.0' in text
        assert 'nsq_topic_isr_expansions_total{topic="orders"} 2.0' in text

        # fewer: the latest added goes first (out-of-sync ones would go before), its copy
        # deleted
        latest = by_id[where.nodes[2]]
        assert (await post(latest, "/topic/replicas", topic="orders", replicas=2)).status_code \
            == 200
        shrunk = await placement(client, "orders")
        assert shrunk == Placement(2, where.nodes[:2])
        await until(lambda: _gone(latest, "orders"), what="the removed replica's copy deleted")
        assert "topic orders is not placed on this node: deleting its local copy" in \
            latest.output()
        # never the leader: down to one keeps it
        assert (await post(by_id[where.nodes[1]], "/topic/replicas", topic="orders",
                           replicas=1)).status_code == 200
        assert await placement(client, "orders") == Placement(1, (node_id(leader),))

        for params, refused in (
                ({"topic": "orders", "replicas": 4}, (400, "INVALID_REPLICAS")),
                ({"topic": "orders", "replicas": 0}, (400, "INVALID_REPLICAS")),
                ({"topic": "orders"}, (400, "MISSING_ARG_REPLICAS")),
                ({"replicas": 2}, (400, "MISSING_ARG_TOPIC")),
                ({"topic": "nowhere", "replicas": 2}, (404, "TOPIC_NOT_FOUND"))):
            for node in (leader, outside):  # on the leader, and forwarded to it
                assert error(await post(node, "/topic/replicas", **params)) == refused, params
        assert await placement(client, "orders") == Placement(1, (node_id(leader),))
    finally:
        await client.aclose()


async def _gone(daemon: Daemon, topic: str) -> bool:
    return await topic_doc(daemon, topic) is None


async def test_a_lost_replica_is_placed_elsewhere_and_its_node_back_deletes_its_copy(
        run_daemon: Callable[..., Daemon], etcd: Etcd, tmp_path: Path) -> None:
    down = "--replica-down-timeout=2s"
    data = [tmp_path / f"node-{i}" for i in range(3)]
    for directory in data:
        directory.mkdir()
    nodes = [start_node(run_daemon, etcd, down, f"--data-path={d}") for d in data]
    by_id = {node_id(n): n for n in nodes}
    client = EtcdClient([etcd.endpoint])
    try:
        await joined(client, *nodes)
        leader = nodes[0]
        assert (await post(leader, "/topic/create", topic="jobs", replicas=2)).status_code == 200
        where = await placement(client, "jobs")
        assert where is not None
        lost_id = where.nodes[1]
        lost = by_id[lost_id]
        spare = next(n for n in nodes if node_id(n) not in where.nodes)
        await until(lambda: topic_doc(lost, "jobs"))
        async with httpx.AsyncClient(timeout=DEADLINE) as web:  # a copy with messages
            answer = await web.post(f"http://{leader.http_address}/pub",
                                    params={"topic": "jobs"}, content=b"job")
            assert answer.status_code == 200, answer.text
        assert lost.stop() == 0  # its lease revoked: its node key goes at once

        async def replaced() -> Placement | None:
            now = await placement(client, "jobs")
            return now if now is not None and lost_id not in now.nodes else None
        now = await until(replaced, timeout=LOST, what="the lost replica placed elsewhere")
        assert now == Placement(2, (node_id(leader), node_id(spare)))
        await until(lambda: topic_doc(spare, "jobs"), what="the new replica made")
        doc = await topic_doc(leader, "jobs")
        assert doc is not None
        isr = doc["replication"]["isr"]  # shrunk out when it went (the new one may be in)
        assert lost_id not in isr and node_id(leader) in isr
        text = await metrics(leader)
        assert 'nsq_topic_isr_shrinks_total{topic="jobs"} 1.0' in text
        # (the new replica joins the in-sync set once caught up: an expansion, or none yet)
        assert re.search(r'nsq_topic_isr_expansions_total\{topic="jobs"\} [01]\.0', text)

        # back on its address and data: outside the placement, it deletes its copy
        back = run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                          f"--etcd-endpoints={etcd.endpoint}", down,
                          f"--data-path={data[nodes.index(lost)]}",
                          f"--tcp-address={lost_id}")
        await joined(client, back)
        await until(lambda: _gone(back, "jobs"), what="the returning node's copy deleted")
        assert await placement(client, "jobs") == now
    finally:
        await client.aclose()
