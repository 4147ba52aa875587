"""Replicated topics under the faults docs/design/replication.md names, with real processes
(etcd, three nsqd): a slow follower (stopped with SIGSTOP) and a follower whose disk is full
(its data path an 8 MiB tmpfs) leave the in-sync set, publishes go on while the minimum holds
and fail with ``E_PUB_FAILED`` when it does not, and both rejoin once able; a leader
partitioned from etcd and from its followers acknowledges nothing once it is cut off, a
follower leads at the next epoch, and the old leader, healed, cuts back what it never
committed and follows."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import trio
from nsq_common import FrameType, commands
from nsq_testing import Daemon, Etcd, WireClient, until
from nsqd.replication.election import read_state
from nsqd.replication.etcd import EtcdClient
from nsqd.replication.placement import place

from .test_replication_data import (
    FAILOVER,
    Gate,
    _is,
    _sorted,
    bodies,
    clean,
    isr,
    joined,
    node_of,
    start_node,
)

#: a follower's fetch waits this long at the leader's tail; short, so that a stopped one is
#: seen behind soon (the leader's --replica-lag-max is what counts)
LAG = "--replica-lag-max=1s"


async def publish(daemon: Daemon, topic: str, body: bytes) -> bytes:
    """One PUB on a fresh connection: the answer, OK or the error frame's text."""
    async with await WireClient.connect(daemon.tcp_address) as producer:
        await producer.send(commands.pub(topic, body))
        frame_type, data = await producer.read_frame(FAILOVER)
    assert frame_type in (FrameType.RESPONSE, FrameType.ERROR), (frame_type, data)
    return bytes(data)


async def everywhere(nodes: list[Daemon], topic: str, acked: list[str]) -> None:
    """Every node holds every acknowledged body, each at the same offset on all of them."""
    async def holds(daemon: Daemon) -> bool:
        got = dict((body, offset) for offset, body in await _all_bodies(daemon, topic))
        return all(body in got for body in acked)
    for daemon in nodes:
        await until(lambda d=daemon: holds(d), timeout=FAILOVER,
                    what=f"every acknowledged message on {node_of(daemon)}")
    views = [await _all_bodies(d, topic) for d in nodes]
    first = dict((body, offset) for offset, body in views[0])
    for view in views[1:]:
        assert {body: first[body] for _, body in view if body in acked} == \
            {body: offset for offset, body in view if body in acked}


async def _all_bodies(daemon: Daemon, topic: str) -> list[tuple[int, str]]:
    """Everything ``/topic/read`` gives, page by page (100 a page)."""
    out: list[tuple[int, str]] = []
    while True:
        page = await bodies(daemon, topic, out[-1][0] + 1 if out else 0)
        out += page
        if len(page) < 100:
            return out


def remount(where: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True,
                   capture_output=True)


async def test_a_slow_follower_and_one_on_a_full_disk_leave_the_isr_and_rejoin(
        small_tmpfs: Path, run_daemon: Callable[..., Daemon], etcd: Etcd,
        etcd_client: EtcdClient) -> None:
    leader = start_node(run_daemon, etcd, LAG)  # --min-insync-replicas: 2, the default
    slow = start_node(run_daemon, etcd, LAG)
    # (every record to disk at once: in the default mode up to --mem-queue-size records wait
    # in memory, as Go's nsqd keeps them, and 8 MiB would take a long time to fill)
    full = start_node(run_daemon, etcd, LAG, f"--data-path={small_tmpfs}",
                      "--max-bytes-per-file=1048576", "--mem-queue-size=0")
    nodes = [leader, slow, full]
    await joined(etcd_client, *nodes)
    await place(etcd_client, "sensors", 3, prefer=node_of(leader))
    for daemon in (slow, full):
        await until(lambda d=daemon: f"fetching from leader {node_of(leader)}" in d.output(),
                    timeout=FAILOVER)
    everyone = sorted(node_of(d) for d in nodes)
    acked: list[str] = []
    assert await publish(leader, "sensors", b"s0") == b"OK"
    acked.append("s0")
    await until(lambda: _is(_sorted(isr(etcd_client, "sensors")), everyone), timeout=FAILOVER)

    os.kill(slow.pid, signal.SIGSTOP)
    try:
        # the stopped follower holds the publish back until it is shrunk out; then the
        # leader and the other follower are the minimum, 2
        assert await publish(leader, "sensors", b"s1") == b"OK"
        acked.append("s1")
        assert sorted(await isr(etcd_client, "sensors")) == sorted(
            (node_of(leader), node_of(full)))

        # the other follower's disk fills: it falls behind and leaves too, and the leader
        # alone is below the minimum: publishes fail, and say why
        big = b"x" * (32 << 10)
        refused = b""
        for i in range(1000):  # (8 MiB fill in well under 300 of these)
            answer = await publish(leader, "sensors", b"big%d-" % i + big)
            if answer != b"OK":
                refused = answer
                break
            acked.append(f"big{i}-" + big.decode())
        assert refused.startswith(b"E_PUB_FAILED") and b"in-sync" in refused, refused
        assert await isr(etcd_client, "sensors") == (node_of(leader),)
        assert "No space left on device" in full.output()
    finally:
        os.kill(slow.pid, signal.SIGCONT)

    # the slow one wakes, catches up and rejoins: publishes go on
    await until(lambda: _is(_sorted(isr(etcd_client, "sensors")),
                            sorted((node_of(leader), node_of(slow)))), timeout=FAILOVER,
                what="the slow follower back in sync")
    assert await publish(leader, "sensors", b"s2") == b"OK"
    acked.append("s2")
    # space again on the full one: it catches up and rejoins
    remount(small_tmpfs, "256m")
    await until(lambda: _is(_sorted(isr(etcd_client, "sensors")), everyone), timeout=FAILOVER,
                what="the follower on the full disk back in sync")
    assert await publish(leader, "sensors", b"s3") == b"OK"
    acked.append("s3")
    await everywhere(nodes, "sensors", acked)
    clean(leader, slow, full)


async def test_a_partitioned_leader_acknowledges_nothing_then_cuts_back_and_follows(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    async with trio.open_nursery() as nursery:
        to_etcd = Gate()  # the leader's way to etcd
        to_etcd.target = int(etcd.endpoint.rsplit(":", 1)[1])
        etcd_port = await nursery.start(to_etcd.run)
        from_followers = Gate()  # its followers' way to it
        leader_port = await nursery.start(from_followers.run)
        leader = run_daemon("nsqd", "--broadcast-address=127.0.0.1", LAG,
                            f"--etcd-endpoints=http://127.0.0.1:{etcd_port}",
                            f"--broadcast-tcp-port={leader_port}")
        from_followers.target = leader.tcp_port
        followers = [start_node(run_daemon, etcd, LAG) for _ in range(2)]
        await joined(etcd_client, leader, *followers)
        await place(etcd_client, "trades", 3, prefer=node_of(leader))
        for daemon in followers:
            await until(lambda d=daemon: f"fetching from leader {node_of(leader)}"
                        in d.output(), timeout=FAILOVER)
        acked = []
        for i in range(5):
            assert await publish(leader, "trades", f"before{i}".encode()) == b"OK"
            acked.append(f"before{i}")

        to_etcd.close()
        from_followers.close()
        # cut off from both: what it is sent now is never acknowledged
        answer = await publish(leader, "trades", b"during")
        assert answer.startswith(b"E_PUB_FAILED"), answer

        async def elected() -> str | None:
            state = await read_state(etcd_client, "trades")
            return state[0].leader if state is not None and state[0].epoch == 2 else None
        new = await until(elected, timeout=FAILOVER, what="a follower elected at epoch 2")
        new_leader = next(d for d in followers if node_of(d) == new)
        await until(lambda: "leading topic trades at epoch 2" in new_leader.output(),
                    timeout=FAILOVER)
        for i in range(5):
            assert await publish(new_leader, "trades", f"after{i}".encode()) == b"OK"
            acked.append(f"after{i}")

        to_etcd.reopen()
        from_followers.reopen()
        # healed: the old leader cuts what it never committed and fetches the new leader's
        await until(lambda: f"fetching from leader {new}" in leader.output(),
                    timeout=FAILOVER, what="the old leader following")
        await everywhere([leader, *followers], "trades", acked)
        for daemon in (leader, *followers):
            assert "during" not in [b for _, b in await _all_bodies(daemon, "trades")]
        nursery.cancel_scope.cancel()
    clean(leader, *followers)
