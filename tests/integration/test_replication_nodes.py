"""nsqd processes with ``--etcd-endpoints`` against a real etcd: membership, a topic placed on
them with its leader at epoch 1, the leader's ``kill -9`` electing one other replica at
epoch 2, and etcd killed and restarted leaving leadership as it was
(docs/design/replication.md)."""

from __future__ import annotations

from collections.abc import Callable

from nsq_testing import Daemon, Etcd, until
from nsqd.replication.election import read_state
from nsqd.replication.etcd import EtcdClient
from nsqd.replication.keys import NodeInfo, TopicState, leader_key, node_key
from nsqd.replication.placement import place

#: the lease TTL (6 s) and a loaded machine: what a failover may take here
FAILOVER = 60.0


def start_node(run_daemon: Callable[..., Daemon], etcd: Etcd) -> tuple[Daemon, str]:
    daemon = run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                        f"--etcd-endpoints={etcd.endpoint}")
    return daemon, f"127.0.0.1:{daemon.tcp_port}"


def logged(daemon: Daemon, text: str) -> bool:
    return text in daemon.output()


async def joined(client: EtcdClient, node: str) -> int:
    """The node's lease, once its node key is in etcd."""
    async def lease() -> int:
        kv = await client.get(node_key(node))
        return kv.lease if kv is not None else 0
    return await until(lease, what=f"{node} joined")


async def test_nodes_join_with_their_addresses_and_a_clean_stop_leaves(
        run_daemon: Callable[..., Daemon], etcd: Etcd) -> None:
    client = EtcdClient([etcd.endpoint])
    try:
        nodes = [start_node(run_daemon, etcd) for _ in range(2)]
        for daemon, node in nodes:
            await joined(client, node)
            kv = await client.get(node_key(node))
            assert kv is not None
            info = NodeInfo.decode(kv.value)
            assert (info.node, info.broadcast_address, info.tcp_port, info.http_port) == (
                node, "127.0.0.1", daemon.tcp_port, daemon.http_port)
        daemon, node = nodes[0]
        assert daemon.stop() == 0
        assert await client.get(node_key(node)) is None  # its lease revoked on the way out
        assert await client.get(node_key(nodes[1][1])) is not None
    finally:
        await client.aclose()


async def test_the_leaders_kill_elects_one_other_replica_at_the_next_epoch(
        run_daemon: Callable[..., Daemon], etcd: Etcd) -> None:
    client = EtcdClient([etcd.endpoint])
    try:
        nodes = dict(reversed(start_node(run_daemon, etcd)) for _ in range(3))
        leases = {node: await joined(client, node) for node in nodes}
        first = sorted(nodes)[1]
        placement, state = await place(client, "clicks", 3, prefer=first)
        assert state == TopicState(first, 1, placement.nodes)
        assert sorted(placement.nodes) == sorted(nodes)
        await until(lambda: logged(nodes[first], "leading topic clicks at epoch 1"))
        others = [n for n in nodes if n != first]
        for node in others:
            await until(lambda node=node: logged(
                nodes[node], f"following topic clicks (leader {first}, epoch 1)"))

        nodes[first].kill()
        async def elected() -> TopicState | None:
            read = await read_state(client, "clicks")
            return read[0] if read is not None and read[0].epoch > 1 else None
        state = await until(elected, timeout=FAILOVER, what="a new leader")
        assert state.epoch == 2 and state.leader in others
        assert sorted(state.isr) == sorted(others)
        mark = await client.get(leader_key("clicks"))
        assert mark is not None and mark.lease == leases[state.leader]
        follower = next(n for n in others if n != state.leader)
        await until(lambda: logged(nodes[state.leader], "leading topic clicks at epoch 2"))
        await until(lambda: logged(
            nodes[follower], f"following topic clicks (leader {state.leader}, epoch 2)"))
        elections = [n for n in others
                     if logged(nodes[n], "elected leader of topic clicks at epoch 2")]
        assert elections == [state.leader]
        read = await read_state(client, "clicks")
        assert read is not None and read[0] == state  # one election, one epoch more
    finally:
        await client.aclose()


async def test_etcd_killed_and_restarted_leaves_leadership_as_it_was(
        run_daemon: Callable[..., Daemon], etcd: Etcd) -> None:
    client = EtcdClient([etcd.endpoint])
    try:
        nodes = dict(reversed(start_node(run_daemon, etcd)) for _ in range(2))
        leases = {node: await joined(client, node) for node in nodes}
        leader = sorted(nodes)[0]
        _, state = await place(client, "orders", 2, prefer=leader)
        for daemon in nodes.values():
            await until(lambda daemon=daemon: logged(daemon, "topic orders (leader")
                        or logged(daemon, "leading topic orders at epoch 1"))

        etcd.kill()
        # down for longer than a lease's TTL, as every node saw
        for daemon in nodes.values():
            await until(lambda daemon=daemon: logged(daemon, "outlived its TTL without renewal"),
                        timeout=FAILOVER)
        etcd.start()
        for daemon in nodes.values():
            await until(lambda daemon=daemon: logged(daemon, "etcd reachable again"),
                        timeout=FAILOVER)
        for node, lease in leases.items():
            kv = await client.get(node_key(node))
            assert kv is not None and kv.lease == lease, node
        read = await read_state(client, "orders")
        assert read is not None and read[0] == state
        mark = await client.get(leader_key("orders"))
        assert mark is not None and mark.lease == leases[leader]
        for daemon in nodes.values():
            assert "lost (expired in etcd)" not in daemon.output()
            assert "elected leader" not in daemon.output()
    finally:
        await client.aclose()


async def test_a_lost_lease_is_noticed_and_the_node_joins_and_leads_again(
        run_daemon: Callable[..., Daemon], etcd: Etcd) -> None:
    client = EtcdClient([etcd.endpoint])
    try:
        daemon, node = start_node(run_daemon, etcd)
        lease = await joined(client, node)
        _, state = await place(client, "alone", 1)
        assert state == TopicState(node, 1, (node,))
        await until(lambda: logged(daemon, "leading topic alone at epoch 1"))

        assert await client.revoke(lease)  # as if it had expired: its keys go with it
        await until(lambda: logged(daemon, f"lease {lease:x} lost (expired in etcd)"))
        new_lease = await joined(client, node)
        assert new_lease != lease
        async def led_again() -> TopicState | None:
            read = await read_state(client, "alone")
            return read[0] if read is not None and read[0].epoch == 2 else None
        assert await until(led_again) == TopicState(node, 2, (node,))
        mark = await client.get(leader_key("alone"))
        assert mark is not None and mark.lease == new_lease
        await until(lambda: logged(daemon, "leading topic alone at epoch 2"))
    finally:
        await client.aclose()
