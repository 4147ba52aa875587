"""nsqadmin's view of replicated topics (docs/design/replication.md): per topic its replicas,
leader, epoch, in-sync set and lag, per node the replicas it holds and leads; nothing of it
for a topic that is not replicated. A real etcd and three real nsqd behind an in-process
nsqadmin (``--nsqd-http-address`` mode)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
import trio
from nsq_testing import DEADLINE, Daemon, Etcd, until
from nsqadmin import Options, create_app
from nsqadmin.history import History


@pytest.fixture
async def cluster(run_daemon: Callable[..., Daemon], etcd: Etcd
                  ) -> AsyncIterator[tuple[list[Daemon], httpx.AsyncClient]]:
    nodes = [run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                        f"--etcd-endpoints={etcd.endpoint}") for _ in range(3)]
    options = Options(nsqd_http_addresses=[n.http_address for n in nodes])
    options.validate()
    app = create_app(options, history=History(min_spacing=0.0), sampling=False)
    async with trio.open_nursery() as nursery:
        ready, done = trio.Event(), trio.Event()

        async def lifespan() -> None:
            async with app.router.lifespan_context(app):
                ready.set()
                await done.wait()

        nursery.start_soon(lifespan)
        await ready.wait()
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://admin.test") as admin:
            yield nodes, admin
        done.set()


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


#: what a lag cell shows when it is not known (an en dash)
NOT_KNOWN = "\u2013"


async def test_topic_and_node_pages_show_the_replication(
        cluster: tuple[list[Daemon], httpx.AsyncClient]) -> None:
    nodes, admin = cluster
    ids = [f"127.0.0.1:{n.tcp_port}" for n in nodes]
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        async def create() -> bool:  # once every node has joined (3 live nodes)
            answer = await http.post(f"http://{nodes[0].http_address}/topic/create",
                                     params={"topic": "rep", "replicas": 3})
            return answer.status_code == 200
        await until(create, what="topic rep placed on three nodes")
        answer = await http.post(f"http://{nodes[1].http_address}/pub",
                                 params={"topic": "plain#ephemeral"}, content=b"x")
        assert answer.text == "OK"

        for i in range(3):
            answer = await http.post(f"http://{nodes[0].http_address}/pub",
                                     params={"topic": "rep"}, content=b"r%d" % i)
            assert answer.text == "OK"

        async def everywhere() -> bool:
            marks = set()
            for node in nodes:
                doc = (await http.get(f"http://{node.http_address}/stats",
                                      params={"format": "json", "topic": "rep"})).json()
                if not doc["topics"] or "replication" not in doc["topics"][0]:
                    return False
                marks.add(doc["topics"][0]["replication"]["high_watermark"])
            return len(marks) == 1 and bool(marks.pop())  # committed on every replica
        await until(everywhere, what="rep on every node, its messages committed")
        doc = (await http.get(f"http://{nodes[0].http_address}/stats",
                              params={"format": "json", "topic": "rep"})).json()
        high_watermark = doc["topics"][0]["replication"]["high_watermark"]

    page = text_of((await admin.get("/topics/rep")).text)
    assert "Replication" in page
    assert f"Leader {ids[0]}" in page and "Epoch 1" in page
    assert "Replicas 3" in page and "In sync 3 of 3" in page
    assert f"High watermark {high_watermark:,}" in page
    for node_id in ids:
        role = "leader" if node_id == ids[0] else "follower"
        # the leader knows each follower's lag (none here: caught up); its own is not shown
        lag = NOT_KNOWN if role == "leader" else "0"
        assert f"{node_id} {role} in sync {lag}" in page
    assert "under-replicated" not in page

    plain = (await admin.get("/topics/plain%23ephemeral")).text
    assert "Replication" not in plain and "epoch" not in plain.lower()

    leader = text_of((await admin.get(f"/nodes/{nodes[0].http_address}")).text)
    assert "Replicas held 1: rep" in leader and "Replicas led 1: rep" in leader
    assert "leader, epoch 1" in leader
    follower = text_of((await admin.get(f"/nodes/{nodes[1].http_address}")).text)
    assert "Replicas held 1: rep" in follower and "Replicas led 0" in follower
    assert "follower, epoch 1" in follower and "leader, epoch" not in follower
