"""Requests only a replicated topic's leader answers, taken by any node, with real processes:
etcd and three nsqd serving lmstfy (docs/design/replication.md, "Forwarding"). An lmstfy
client given one node works whether that node leads its queue or not, and across the
leader's kill; NSQ's dead-letter routes sent to a follower act on the leader (these two in
the default storage mode and with ``--sync-every=1``)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import trio
from nsq_common import LMSTFY_CHANNEL, commands
from nsq_testing import Daemon, Etcd, WireClient, until
from nsqd import cursorfile
from nsqd.replicas import FORWARDED
from nsqd.replication.etcd import EtcdClient
from nsqd.replication.keys import NodeInfo, node_key
from nsqd.replication.placement import place

from .test_replication_data import FAILOVER, clean, data_path, joined, node_of, start_node
from .test_replication_private import (
    CHANNEL,
    QUEUE_TOPIC,
    SYNC,
    TOPIC,
    Node,
    holds,
    new_leader,
    post,
)


async def sent(node: Node, method: str, path: str, *, body: bytes | None = None,
               expect: int, **params: object) -> httpx.Response:
    """The request, sent again while the cluster answers 503 (no leader yet, or one that
    cannot be reached: a failover under way), as a client retries; its answer."""
    async def answered() -> httpx.Response | None:
        async with httpx.AsyncClient(headers={"X-Token": "replicated-namespace-token"},
                                     timeout=60) as http:
            r = await http.request(method, f"{node.url}{path}", params=params, content=body)
        return None if r.status_code == 503 else r
    r = await until(answered, timeout=FAILOVER, what=f"{method} {path} answered")
    assert r.status_code == expect, r.text
    return r


async def consumed(node: Node, count: int) -> list[dict[str, Any]]:
    """``count`` jobs taken from ``node`` (as many consumes as it takes), acknowledged."""
    got: list[dict[str, Any]] = []

    async def more() -> bool:
        got.extend(await _consume(node, count - len(got)))
        return len(got) >= count
    await until(more, timeout=FAILOVER, what=f"{count} jobs consumed")
    for job in got:
        await sent(node, "DELETE", f"/q/job/{job['job_id']}", expect=204)
    return got


async def _consume(node: Node, count: int) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(headers={"X-Token": "replicated-namespace-token"},
                                 timeout=60) as http:
        r = await http.get(f"{node.url}/q", params={"count": count, "ttr": 60, "timeout": 1})
    if r.status_code in (404, 503):
        return []
    assert r.status_code == 200, r.text
    jobs = r.json()
    return jobs if isinstance(jobs, list) else [jobs]  # type: ignore[no-any-return]


def data(job: dict[str, Any]) -> str:
    return base64.b64decode(job["data"]).decode()


def acknowledged_below(daemon: Daemon) -> int:
    """Where the lmstfy queue's cursor on ``daemon`` has every job before acknowledged."""
    journal = data_path(daemon) / "topics" / QUEUE_TOPIC / f"{LMSTFY_CHANNEL}.cursor"
    state = cursorfile.load(journal) if journal.exists() else None
    return state.mark_delete if state is not None else 0


@SYNC
async def test_an_lmstfy_client_of_a_follower_works_and_goes_on_across_the_leaders_kill(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient,
        sync: list[str]) -> None:
    nodes = [Node(run_daemon, etcd, *sync) for _ in range(3)]
    await joined(etcd_client, *(n.nsqd for n in nodes))
    leader, followers = nodes[0], nodes[1:]
    await leader.publish(b"first")  # places the queue's topic, led by the node asked
    for n in followers:
        await until(lambda d=n.nsqd: f"fetching from leader {node_of(leader.nsqd)}"
                    in d.output(), timeout=FAILOVER)
    client = followers[0]  # an unchanged lmstfy client, given this node only
    published = [(await sent(client, "PUT", "/q", body=b"job%d" % i, expect=201,
                             tries=2)).json()["job_id"] for i in range(5)]
    size = (await sent(client, "GET", "/q/size", expect=200)).json()
    assert size == {"namespace": "ns", "queue": "q", "size": 6}
    peeked = (await sent(client, "GET", "/q/peek", expect=200)).json()
    assert data(peeked) == "first"
    taken = await consumed(client, 4)  # "first" and job0-job2, acknowledged
    assert [data(j) for j in taken] == ["first", "job0", "job1", "job2"]
    assert [j["remain_tries"] for j in taken[1:]] == [1, 1, 1]  # its tries went along
    assert [j["job_id"] for j in taken[1:]] == published[:3]
    # a long poll through the follower (with a queue no node has: left out), answered when
    # a job comes due on the leader (delayed: it waits, whenever the poll arrived)
    waited: list[dict[str, Any]] = []

    async def wait_for_job() -> None:
        r = await sent(client, "GET", "/q,nowhere", expect=200, ttr=60, timeout=60, count=1)
        waited.append(r.json())

    async with trio.open_nursery() as nursery:
        await sent(client, "GET", "/q", expect=200, ttr=60, count=2)  # job3, job4 in flight
        nursery.start_soon(wait_for_job)
        await sent(followers[1], "PUT", "/q", body=b"late", expect=201, delay=3)
    assert [data(j) for j in waited] == ["late"]
    # a request forwarded once is not forwarded again
    async with httpx.AsyncClient(headers={"X-Token": "replicated-namespace-token",
                                          FORWARDED: "elsewhere"}) as http:
        r = await http.get(f"{client.url}/q/size")
    assert (r.status_code, r.json()) == (503, {"error": "LEADER_UNAVAILABLE"})
    # job3 and job4 back (their TTR of a minute left to run out: sent back now), "late" done
    for job_id in published[3:]:
        await sent(client, "PUT", f"/q/job/{job_id}", body=b"again-" + job_id.encode(),
                   expect=201)
    await sent(client, "DELETE", f"/q/job/{waited[0]['job_id']}", expect=204)
    # a queue's first job on the follower: placed, led by it; a consume of both queues
    # looks at the one led here only (two jobs wait in the other)
    other = (await sent(client, "PUT", "/other", body=b"other", expect=201)).json()["job_id"]
    r = await sent(client, "GET", "/q,other", expect=200, ttr=60, count=5)
    assert [j["job_id"] for j in r.json()] == [other]
    await sent(client, "DELETE", f"/other/job/{other}", expect=204)
    # the followers hold what the leader holds: every job before the two sent again done
    # with (offsets: "first" 0, job0-job4 1-5, "late" 6, sent again 7 and 8)
    for n in followers:
        await until(lambda d=n.nsqd: acknowledged_below(d) >= 7, timeout=FAILOVER,
                    what="the acknowledgements on the followers")

    leader.nsqd.kill()
    # the same client, the same node (leading now or not): on it goes, nothing lost, the
    # acknowledged jobs not back
    await sent(client, "PUT", "/q", body=b"after", expect=201)
    await new_leader(etcd_client, QUEUE_TOPIC, [f.nsqd for f in followers])
    rest = await consumed(client, 3)
    assert sorted(data(j) for j in rest) == sorted(
        ["after", *("again-" + job_id for job_id in published[3:])])
    assert await _consume(client, 1) == []
    clean(*(f.nsqd for f in followers))


@SYNC
async def test_a_dead_letter_respawn_sent_to_a_follower_is_done_by_the_leader(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient,
        sync: list[str]) -> None:
    nodes = [Node(run_daemon, etcd, *sync).nsqd for _ in range(3)]
    leader, followers = nodes[0], nodes[1:]
    await joined(etcd_client, *nodes)
    await place(etcd_client, TOPIC, 3, prefer=node_of(leader))
    for daemon in followers:
        await until(lambda d=daemon: f"fetching from leader {node_of(leader)}" in d.output(),
                    timeout=FAILOVER)
    await post(leader, "/channel/create", topic=TOPIC, channel=CHANNEL, max_attempts=1)
    async with (await WireClient.connect(leader.tcp_address) as producer,
                await WireClient.connect(leader.tcp_address) as consumer):
        for i in range(3):
            await producer.pub(TOPIC, f"d{i}".encode())
        await consumer.subscribe(TOPIC, CHANNEL, rdy=10)
        for msg in await consumer.messages(3):  # back, and out of attempts: dead letters
            await consumer.send(commands.req(msg.id, 0))
        for daemon in nodes:
            await until(lambda d=daemon: holds(d, 3, 0), timeout=FAILOVER,
                        what="three dead letters on every replica")
        # sent to a follower, done by the leader: two delivered again from it
        assert await post(followers[0], "/channel/deadletter/respawn", topic=TOPIC,
                          channel=CHANNEL, n=2) == {"count": 2}
        again = await consumer.messages(2)
        assert sorted(m.body.decode() for m in again) == ["d0", "d1"]
        for msg in again:
            await consumer.send(commands.fin(msg.id))
        await until(lambda: holds(leader, 1, 0), what="one dead letter left on the leader")
        # emptied through the other follower
        assert await post(followers[1], "/channel/deadletter/empty", topic=TOPIC,
                          channel=CHANNEL) == {"count": 1}
        await until(lambda: holds(leader, 0, 0), what="no dead letter on the leader")
        for daemon in followers:
            await until(lambda d=daemon: holds(d, 0, 0), timeout=FAILOVER,
                        what="no dead letter on the followers")
    clean(*nodes)


async def test_the_node_key_says_where_lmstfy_is(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    with_lmstfy = Node(run_daemon, etcd).nsqd
    without = start_node(run_daemon, etcd)
    await joined(etcd_client, with_lmstfy, without)
    infos = []
    for daemon in (with_lmstfy, without):
        kv = await etcd_client.get(node_key(node_of(daemon)))
        assert kv is not None
        infos.append(NodeInfo.decode(kv.value))
        if daemon is without:
            assert b"lmstfy_port" not in kv.value  # (as nodes before it wrote it)
    port = int(with_lmstfy.addresses["LMSTFY"].rpartition(":")[2])
    assert [info.lmstfy_port for info in infos] == [port, 0]
    clean(with_lmstfy, without)
