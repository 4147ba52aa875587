"""nsqd's etcd client and the replication transactions against a real etcd (one member on
loopback, the ``etcd`` fixture): keys, txns, leases, the watch; placement at epoch 1; an
election racing two candidates (one wins, the epoch goes up by one); ISR changes refusing a
stale epoch (docs/design/replication.md, "The transactions")."""

from __future__ import annotations

import socket
from pathlib import Path

import trio
from nsq_testing import Etcd
from nsqd.replication.election import StaleEpoch, campaign, change_isr, read_state
from nsqd.replication.etcd import Compare, EtcdClient, EtcdUnavailable, Op
from nsqd.replication.keys import NodeInfo, TopicState, leader_key, node_key, state_key
from nsqd.replication.placement import PlacementError, choose, place


async def test_keys_txn_leases_and_watch(etcd: Etcd) -> None:
    client = EtcdClient([etcd.endpoint])
    try:
        assert await client.get(b"/a") is None
        await client.put(b"/a", b"1")
        await client.put(b"/p/x", b"\x00\xff")
        await client.put(b"/p/y", b"y")
        kv = await client.get(b"/a")
        assert kv is not None and (kv.value, kv.version) == (b"1", 1)
        kvs, _ = await client.range(b"/p/", prefix=True)
        assert [(k.key, k.value) for k in kvs] == [(b"/p/x", b"\x00\xff"), (b"/p/y", b"y")]

        # a txn: every compare holds, or the failure branch runs
        won = await client.txn([Compare.version(b"/b", 0)], [Op.put(b"/b", b"first")])
        lost = await client.txn([Compare.version(b"/b", 0)], [Op.put(b"/b", b"second")],
                                [Op.get(b"/b")])
        assert won.succeeded and not lost.succeeded
        assert [k.value for k in lost.ranges[0]] == [b"first"]
        assert (await client.get(b"/b")).value == b"first"  # type: ignore[union-attr]

        # a lease: keys under it go with it; a keep-alive of a lease gone answers 0
        lease, ttl = await client.grant(5)
        assert ttl == 5
        await client.put(b"/leased", b"v", lease=lease)
        assert (await client.get(b"/leased")).lease == lease  # type: ignore[union-attr]
        assert await client.keepalive(lease) == 5
        assert await client.revoke(lease)
        assert await client.get(b"/leased") is None
        assert await client.keepalive(lease) == 0
        assert not await client.revoke(lease)

        # the watch sees puts and deletes after the revision it starts from
        _, revision = await client.range(b"/w/", prefix=True)
        seen: list[tuple[bool, bytes, bytes]] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                async def watch() -> None:
                    async for _, events in client.watch(b"/w/", prefix=True,
                                                        start_revision=revision + 1):
                        seen.extend((e.deleted, e.kv.key, e.kv.value) for e in events)
                        if len(seen) == 3:
                            nursery.cancel_scope.cancel()
                nursery.start_soon(watch)
                await client.put(b"/w/1", b"a")
                await client.put(b"/other", b"not watched")
                await client.put(b"/w/1", b"b")
                assert await client.delete(b"/w/", prefix=True) == 1
        assert seen == [(False, b"/w/1", b"a"), (False, b"/w/1", b"b"), (True, b"/w/1", b"")]
    finally:
        await client.aclose()


async def test_an_unreachable_etcd_is_named(etcd: Etcd) -> None:
    etcd.kill()
    client = EtcdClient([etcd.endpoint])
    try:
        try:
            await client.get(b"/a")
        except EtcdUnavailable as exc:
            assert etcd.endpoint in str(exc)
        else:
            raise AssertionError("a killed etcd answered")
    finally:
        await client.aclose()


async def _node(client: EtcdClient, name: str) -> int:
    lease, _ = await client.grant(30)
    info = NodeInfo(name, "127.0.0.1", int(name.rsplit(":", 1)[1]), 1)
    await client.put(node_key(name), info.encode(), lease=lease)
    return lease


def test_choose_prefers_the_node_asked_then_the_least_loaded() -> None:
    live = {"a:1": 1, "b:1": 2, "c:1": 3, "d:1": 4}
    assert choose(live, {"a:1": 3, "b:1": 1, "c:1": 0, "d:1": 1}, 3, prefer="a:1") == [
        "a:1", "c:1", "b:1"]
    assert choose(live, {}, 2, prefer="gone:1") == ["a:1", "b:1"]
    for bad in (0, 5):
        try:
            choose(live, {}, bad)
        except PlacementError:
            continue
        raise AssertionError(f"{bad} replicas chosen")


async def test_placement_election_race_and_stale_epochs(etcd: Etcd) -> None:
    client = EtcdClient([etcd.endpoint])
    try:
        leases = {name: await _node(client, name) for name in ("n:1", "n:2", "n:3")}
        placement, state = await place(client, "t", 3, prefer="n:2")
        assert placement.nodes[0] == "n:2" and sorted(placement.nodes) == ["n:1", "n:2", "n:3"]
        assert state == TopicState("n:2", 1, placement.nodes)
        mark = await client.get(leader_key("t"))
        assert mark is not None and mark.lease == leases["n:2"]
        # placing again changes nothing
        assert await place(client, "t", 1, prefer="n:1") == (placement, state)

        # with a leader, nobody can be elected
        assert await campaign(client, "t", node="n:1", lease=leases["n:1"]) is None

        # the leader's lease lapses: its leader key goes with it; two candidates race
        await client.revoke(leases["n:2"])
        assert await client.get(leader_key("t")) is None
        results: dict[str, TopicState | None] = {}

        async def run(name: str) -> None:
            results[name] = await campaign(client, "t", node=name, lease=leases[name])

        async with trio.open_nursery() as nursery:
            for name in ("n:1", "n:3"):
                nursery.start_soon(run, name)
        winners = [name for name, won in results.items() if won is not None]
        assert len(winners) == 1, results
        winner = winners[0]
        read = await read_state(client, "t")
        assert read is not None
        assert read[0] == TopicState(winner, 2, tuple(n for n in placement.nodes if n != "n:2"))
        mark = await client.get(leader_key("t"))
        assert mark is not None and mark.lease == leases[winner]
        loser = "n:3" if winner == "n:1" else "n:1"

        # the ISR changes only by the leader at its epoch
        before = await client.get(state_key("t"))
        for who, epoch in ((winner, 1), (loser, 2), ("n:2", 1)):
            try:
                await change_isr(client, "t", leader=who, lease=leases[who], epoch=epoch,
                                 remove=[loser])
            except StaleEpoch as exc:
                assert exc.state is not None and exc.state.epoch == 2
            else:
                raise AssertionError(f"{who} at epoch {epoch} changed the ISR")
        assert await client.get(state_key("t")) == before
        shrunk = await change_isr(client, "t", leader=winner, lease=leases[winner], epoch=2,
                                  remove=[loser, winner])
        assert shrunk == TopicState(winner, 2, (winner,))
        grown = await change_isr(client, "t", leader=winner, lease=leases[winner], epoch=2,
                                 add=[loser])
        assert grown == TopicState(winner, 2, (winner, loser))
        # a candidate outside the ISR is never elected
        await client.revoke(leases[winner])
        assert await campaign(client, "t", node="n:2", lease=await _node(client, "n:2")) is None
        won = await campaign(client, "t", node=loser, lease=leases[loser])
        assert won == TopicState(loser, 3, (loser,))
    finally:
        await client.aclose()


def test_an_etcd_whose_port_was_taken_meanwhile_starts_on_other_ports(tmp_path: Path) -> None:
    """The free port chosen for etcd is taken by another process before etcd binds it (as
    another test's daemon can): the first start moves to new ports rather than failing."""
    server = Etcd(tmp_path / "etcd")
    taken = server.client_port
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            server.start()
            assert server.client_port != taken and server.healthy()
            assert "address already in use" in server.output()
        finally:
            server.stop()
    # a restart keeps the ports it was started on
    ports = (server.client_port, server.peer_port)
    try:
        server.start()
        assert (server.client_port, server.peer_port) == ports and server.healthy()
    finally:
        server.stop()
