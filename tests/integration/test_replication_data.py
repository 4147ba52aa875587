"""The data path of replicated topics with real processes: etcd and two nsqd on loopback
(docs/design/replication.md). A topic placed on both is made on each; the follower fetches
the leader's log over ``  R1`` at the leader's offsets (with the epochs file), and forwards
the publishes it gets to the leader; a publish is
acknowledged only once the in-sync set holds it and the minimum is in sync; channels and
``/topic/read`` see only what is committed; a follower that falls behind leaves the in-sync
set and joins it again when caught up; an old leader back after a failover cuts out of its
log the records it never committed (KIP-101) and fetches the new leader's."""

from __future__ import annotations

import base64
import socket
import struct
from collections.abc import Callable
from pathlib import Path

import httpx
import trio
from nsq_common import commands
from nsq_testing import Daemon, Etcd, WireClient, free_port, until
from nsqd import cursorfile
from nsqd.replication import wire
from nsqd.replication.election import read_state
from nsqd.replication.etcd import EtcdClient
from nsqd.replication.keys import node_key
from nsqd.replication.placement import place

#: the lease TTL (6 s) and a loaded machine: what a node's loss may take to be seen
FAILOVER = 60.0


def start_node(run_daemon: Callable[..., Daemon], etcd: Etcd, *args: str) -> Daemon:
    return run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                      f"--etcd-endpoints={etcd.endpoint}", *args)


def clean(*daemons: Daemon) -> None:
    """No bug logged (a traceback) by any of them."""
    for daemon in daemons:
        assert "Traceback" not in daemon.output(), daemon.output()


def node_of(daemon: Daemon) -> str:
    """Its id: its broadcast address and port (its TCP port, unless given another)."""
    for arg in daemon.process.args:  # type: ignore[union-attr]
        if str(arg).startswith("--broadcast-tcp-port="):
            return f"127.0.0.1:{str(arg).split('=', 1)[1]}"
    return f"127.0.0.1:{daemon.tcp_port}"


async def joined(etcd_client: EtcdClient, *daemons: Daemon) -> None:
    for daemon in daemons:
        await until(lambda d=daemon: etcd_client.get(node_key(node_of(d))), what="joined")


async def placed(etcd_client: EtcdClient, topic: str, leader: Daemon, follower: Daemon) -> None:
    """``topic`` placed on both, ``leader`` leading, and the follower fetching from it."""
    await joined(etcd_client, leader, follower)
    _, state = await place(etcd_client, topic, 2, prefer=node_of(leader))
    assert state.leader == node_of(leader)
    await until(lambda: f"leading topic {topic} at epoch 1" in leader.output())
    await until(lambda: f"following topic {topic} (leader {node_of(leader)}" in
                follower.output())
    await until(lambda: f"fetching from leader {node_of(leader)}" in follower.output())


async def read(daemon: Daemon, topic: str, offset: int = 0) -> dict[str, object]:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"http://{daemon.http_address}/topic/read",
                           params={"topic": topic, "offset": offset, "n": 100})
        r.raise_for_status()
        return r.json()  # type: ignore[no-any-return]


async def bodies(daemon: Daemon, topic: str, offset: int = 0) -> list[tuple[int, str]]:
    doc = await read(daemon, topic, offset)
    return [(m["offset"], base64.b64decode(m["body"]).decode())
            for m in doc["messages"]]  # type: ignore[attr-defined]


async def isr_shrinks(daemon: Daemon, topic: str) -> int:
    """How many times ``daemon``, leading ``topic``, shrank its ISR (its ``/metrics``)."""
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://{daemon.http_address}/metrics")).text
    for line in text.splitlines():
        if line.startswith("nsq_topic_isr_shrinks_total{") and f'topic="{topic}"' in line:
            return int(float(line.rpartition(" ")[2]))
    return 0


async def isr(etcd_client: EtcdClient, topic: str) -> tuple[str, ...]:
    read_ = await read_state(etcd_client, topic)
    assert read_ is not None
    return read_[0].isr


async def test_the_follower_holds_the_leaders_records_at_its_offsets_before_the_ok(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient,
        tmp_path: Path) -> None:
    leader = start_node(run_daemon, etcd)
    follower = start_node(run_daemon, etcd)
    await placed(etcd_client, "clicks", leader, follower)

    async with await WireClient.connect(leader.tcp_address) as producer:
        for i in range(3):
            await producer.pub("clicks", f"m{i}".encode())
        await producer.send(commands.mpub("clicks", [b"m3", b"m4"]))
        assert await producer.response() == b"OK"
    expected = [(i, f"m{i}") for i in range(5)]
    # acknowledged: on the leader's readers at once, on the follower within one fetch
    assert await bodies(leader, "clicks") == expected
    await until(lambda: _is(bodies(follower, "clicks"), expected), what="the follower's copy")

    # publishes to the follower are forwarded to the leader and answered as it answers:
    # appended there, at the leader's next offsets, then fetched back
    async with await WireClient.connect(follower.tcp_address) as producer:
        await producer.pub("clicks", b"m5")
        await producer.send(commands.mpub("clicks", [b"m6", b"m7"]))
        assert await producer.response() == b"OK"
        await producer.send(commands.dpub("clicks", 1, b"m8"))
        assert await producer.response() == b"OK"
    async with httpx.AsyncClient() as http:
        r = await http.post(f"http://{follower.http_address}/pub?topic=clicks", content=b"m9")
        assert r.text == "OK"
    expected += [(i, f"m{i}") for i in range(5, 10)]
    assert await bodies(leader, "clicks") == expected
    await until(lambda: _is(bodies(follower, "clicks"), expected), what="fetched back")
    assert "forwarding" not in follower.output()  # (one connection, never lost)

    # the leader's answers to what no follower of its should ask: an old epoch, a newer one,
    # an offset past its end; and where its epoch 1 ends
    answers = await ask_raw(leader, [
        wire.Fetch(100, 1000, (wire.FetchTopic("clicks", 0, 0, 0),
                               wire.FetchTopic("clicks", 2, 0, 0),
                               wire.FetchTopic("clicks", 1, 999, 0))),
        wire.EpochEnd("clicks", 1)])
    data, epoch = answers
    assert isinstance(data, wire.Data)
    assert [(d.error, d.epoch, d.next_offset) for d in data.topics] == [
        (wire.FENCED, 1, 0), (wire.UNKNOWN_EPOCH, 1, 0), (wire.OUT_OF_RANGE, 1, 10)]
    assert epoch == wire.Epoch("clicks", wire.NONE, 1, 10)

    # the epochs file: epoch 1 from offset 0, on both (nsqd-0 the leader, nsqd-1 the follower)
    for data in ("nsqd-0", "nsqd-1"):
        assert (tmp_path / data / "topics" / "clicks" / "epochs").read_text() == "1 0\n"
    clean(leader, follower)


async def _is(got: object, expected: object) -> bool:
    return await got == expected  # type: ignore[misc, no-any-return]


async def test_below_the_minimum_in_sync_a_publish_fails_at_once(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    leader = start_node(run_daemon, etcd, "--min-insync-replicas=2")
    follower = start_node(run_daemon, etcd)
    await placed(etcd_client, "orders", leader, follower)
    async with await WireClient.connect(leader.tcp_address) as producer:
        await producer.pub("orders", b"kept")
    follower.kill()
    await until(lambda: _is(isr(etcd_client, "orders"), (node_of(leader),)), timeout=FAILOVER,
                what="the killed follower shrunk out")
    # the leader counts the shrink once etcd answered its write, as it takes the new ISR
    # (etcd shows it a moment before: a publish then is appended, and refused after)
    await until(lambda: isr_shrinks(leader, "orders"), timeout=FAILOVER,
                what="the leader's own ISR shrunk")
    async with await WireClient.connect(leader.tcp_address) as producer:
        await producer.send(commands.pub("orders", b"refused"))
        error = await producer.error()
    assert error.startswith(b"E_PUB_FAILED") and b"in-sync" in error
    assert await bodies(leader, "orders") == [(0, "kept")]  # nothing appended
    clean(leader)


class Gate:
    """A TCP proxy (in the test) in front of a leader's port, registered as its address in
    etcd (``--broadcast-tcp-port``): ``close`` holds every byte between its followers and
    it, as a partition between them would, while both still reach etcd."""

    def __init__(self) -> None:
        self.target = 0
        self._open = trio.Event()
        self._open.set()

    def close(self) -> None:
        self._open = trio.Event()

    def reopen(self) -> None:
        self._open.set()

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async def handle(stream: trio.SocketStream) -> None:
            upstream = await trio.open_tcp_stream("127.0.0.1", self.target)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, stream, upstream)
                nursery.start_soon(self._pump, upstream, stream)

        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(handle, listeners)  # type: ignore[arg-type]

    async def _pump(self, source: trio.abc.Stream, sink: trio.abc.Stream) -> None:
        try:
            while data := await source.receive_some(65536):
                await self._open.wait()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(sink)


async def gated_leader(nursery: trio.Nursery, run_daemon: Callable[..., Daemon], etcd: Etcd,
                       *args: str) -> tuple[Daemon, Gate]:
    gate = Gate()
    port = await nursery.start(gate.run)
    leader = start_node(run_daemon, etcd, f"--broadcast-tcp-port={port}", *args)
    gate.target = leader.tcp_port
    return leader, gate


async def test_only_committed_records_are_acknowledged_and_delivered(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    async with trio.open_nursery() as nursery:
        leader, gate = await gated_leader(nursery, run_daemon, etcd, "--replica-lag-max=60s")
        follower = start_node(run_daemon, etcd)
        await placed(etcd_client, "events", leader, follower)
        async with (await WireClient.connect(leader.tcp_address) as consumer,
                    await WireClient.connect(leader.tcp_address) as producer,
                    await WireClient.connect(follower.tcp_address) as idle):
            await consumer.subscribe("events", "ch", rdy=10)
            await idle.subscribe("events", "ch", rdy=10)  # a follower takes SUB and RDY
            await producer.pub("events", b"first")
            assert (await consumer.message()).body == b"first"

            gate.close()  # the follower cut off from the leader (not from etcd)
            await producer.send(commands.pub("events", b"second"))
            # appended on the leader, not copied: neither acknowledged nor delivered
            await until(lambda: _latest(leader, 1), what="appended on the leader")
            await consumer.nothing_for(0.5)
            await producer.nothing_for(0.1)
            assert await bodies(leader, "events") == [(0, "first")]  # /topic/read: the HW
            gate.reopen()
            assert await producer.response() == b"OK"
            assert (await consumer.message()).body == b"second"
            await idle.nothing_for(0.5)  # the follower delivered nothing
        nursery.cancel_scope.cancel()
    clean(leader, follower)


async def _latest(daemon: Daemon, offset: int) -> bool:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"http://{daemon.http_address}/stats",
                           params={"format": "json", "topic": "events"})
        topics = r.json()["topics"]
    return bool(topics) and topics[0]["message_count"] > offset


async def test_a_follower_behind_for_the_lag_max_leaves_the_isr_and_rejoins_caught_up(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    async with trio.open_nursery() as nursery:
        leader, gate = await gated_leader(nursery, run_daemon, etcd, "--replica-lag-max=1s",
                                          "--min-insync-replicas=1")
        follower = start_node(run_daemon, etcd, "--replica-lag-max=1s")
        await placed(etcd_client, "jobs", leader, follower)
        both = sorted((node_of(leader), node_of(follower)))
        assert sorted(await isr(etcd_client, "jobs")) == both
        gate.close()
        async with await WireClient.connect(leader.tcp_address) as producer:
            # waits for the follower until it is shrunk out (it is alive: its lease is
            # there), then OK with the leader alone in sync (the minimum, 1)
            await producer.pub("jobs", b"while-cut-off")
        assert await isr(etcd_client, "jobs") == (node_of(leader),)
        assert f"{node_of(follower)} not caught up for over 1s" in leader.output()
        assert await etcd_client.get(node_key(node_of(follower))) is not None
        # a publish to the follower, forwarded to a leader it cannot reach: refused once it
        # waited as long as the leader may (2 x its --replica-lag-max, and 5 s)
        async with await WireClient.connect(follower.tcp_address) as producer:
            await producer.send(commands.pub("jobs", b"unknown"))
            error = await producer.error(timeout=FAILOVER)
        assert error == b"E_PUB_FAILED PUB failed no answer from the leader " + \
            node_of(leader).encode()
        gate.reopen()
        await until(lambda: _is(_sorted(isr(etcd_client, "jobs")), both), timeout=FAILOVER,
                    what="the follower back in sync")
        assert f"{node_of(follower)} caught up: into the in-sync set" in leader.output()
        # (the forward held by the cut reached the leader after all: a message the
        # producer counts as unknown, published)
        await until(lambda: _is(bodies(follower, "jobs"),
                                [(0, "while-cut-off"), (1, "unknown")]))
        nursery.cancel_scope.cancel()
    clean(leader, follower)


async def _sorted(got: object) -> list[str]:
    return sorted(await got)  # type: ignore[misc]


async def ask_raw(daemon: Daemon, frames: list[wire.Frame]) -> list[wire.Frame]:
    """``frames`` sent on an ``  R1`` connection as a follower ``127.0.0.1:1``; the answers."""
    stream = await trio.open_tcp_stream("127.0.0.1", daemon.tcp_port)
    try:
        reader = wire.FrameReader()
        await stream.send_all(wire.MAGIC + wire.encode(wire.Hello("127.0.0.1:1"))
                              + b"".join(map(wire.encode, frames)))
        answers: list[wire.Frame] = []
        with trio.fail_after(30):
            while len(answers) < len(frames):
                reader.receive_data(await stream.receive_some(65536))
                while (frame := reader.next_frame()) is not None:
                    answers.append(frame)
        return answers
    finally:
        await stream.aclose()


async def test_the_magic_r1_is_served_only_with_etcd_endpoints(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    plain = run_daemon("nsqd")
    async with await WireClient.connect(plain.tcp_address, magic=wire.MAGIC) as peer:
        assert await peer.error() == b"E_BAD_PROTOCOL"

    node = start_node(run_daemon, etcd)
    await joined(etcd_client, node)
    stream = await trio.open_tcp_stream("127.0.0.1", node.tcp_port)
    try:
        reader = wire.FrameReader()
        await stream.send_all(wire.MAGIC + wire.encode(wire.Hello("127.0.0.1:1"))
                              + wire.encode(wire.Fetch(100, 1000, (
                                  wire.FetchTopic("nowhere", 1, 0, 0),)))
                              + wire.encode(wire.EpochEnd("nowhere", 1)))
        answers: list[wire.Frame] = []
        with trio.fail_after(30):
            while len(answers) < 2:
                reader.receive_data(await stream.receive_some(65536))
                while (frame := reader.next_frame()) is not None:
                    answers.append(frame)
        assert answers == [wire.Data((wire.TopicData("nowhere", wire.NOT_LEADER, 0, 0, 0, 0),)),
                           wire.Epoch("nowhere", wire.NOT_LEADER, 0, 0)]
        await stream.send_all(b"\x00\x00\x00\x01\x63")  # a frame of an unknown type: closed
        with trio.fail_after(30):
            assert await stream.receive_some(65536) == b""
    finally:
        await stream.aclose()
    clean(node)


async def test_a_followers_connection_reset_is_logged_as_lost_not_as_a_bug(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    """A follower killed with ``kill -9`` may reset its connection (unread data in its
    socket): the leader's read fails with ECONNRESET, which is no bug (it logged a traceback,
    "unexpected error", found by test_replication_model.py)."""
    node = start_node(run_daemon, etcd)
    await joined(etcd_client, node)
    stream = await trio.open_tcp_stream("127.0.0.1", node.tcp_port)
    await stream.send_all(wire.MAGIC + wire.encode(wire.Hello("127.0.0.1:1")))
    await until(lambda: "127.0.0.1:1 connected from" in node.output())
    # closed with a zero linger: a reset, not a FIN
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()
    await until(lambda: "follower 127.0.0.1:1: connection lost" in node.output()
                or "unexpected error" in node.output(), what="the reset seen")
    clean(node)


async def test_after_the_leaders_kill_the_new_leader_delivers_every_acknowledged_record(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    nodes = [start_node(run_daemon, etcd) for _ in range(3)]
    leader, others = nodes[0], nodes[1:]
    await joined(etcd_client, *nodes)
    await place(etcd_client, "pay", 3, prefer=node_of(leader))
    for daemon in others:
        await until(lambda d=daemon: f"fetching from leader {node_of(leader)}" in d.output())
    async with await WireClient.connect(leader.tcp_address) as producer:
        for i in range(20):
            await producer.pub("pay", f"p{i}".encode())  # each OK: held by all three

    leader.kill()
    async def elected() -> str | None:
        read_ = await read_state(etcd_client, "pay")
        return read_[0].leader if read_ is not None and read_[0].epoch == 2 else None
    new = await until(elected, timeout=FAILOVER, what="a new leader at epoch 2")
    new_leader = next(d for d in others if node_of(d) == new)
    other = next(d for d in others if d is not new_leader)
    # the other follower asks where epoch 1 ends, cuts nothing, and fetches on from it
    await until(lambda: f"fetching from leader {new}" in other.output(), timeout=FAILOVER)
    async with await WireClient.connect(new_leader.tcp_address) as producer:
        await producer.pub("pay", b"after")  # committed at epoch 2, by both
    async with await WireClient.connect(new_leader.tcp_address) as consumer:
        await consumer.subscribe("pay", "audit", rdy=100)
        got = [m.body.decode() for m in await consumer.messages(21)]
    assert got == [f"p{i}" for i in range(20)] + ["after"]
    expected = [(i, f"p{i}") for i in range(20)] + [(20, "after")]
    await until(lambda: _is(bodies(other, "pay"), expected), what="the follower's copy")
    assert "log cut back" not in other.output()
    for daemon in others:
        await until(lambda d=daemon: _epochs(d, "pay") == "1 0\n2 20\n")
    clean(*others)


def _epochs(daemon: Daemon, topic: str) -> str:
    data = next(a.split("=", 1)[1] for a in daemon.process.args  # type: ignore[union-attr]
                if str(a).startswith("--data-path="))
    path = Path(data) / "topics" / topic / "epochs"
    return path.read_text() if path.exists() else ""


async def test_a_follower_killed_and_restarted_fetches_what_it_lost_and_rejoins(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient,
        tmp_path: Path) -> None:
    leader = start_node(run_daemon, etcd, "--min-insync-replicas=1")
    follower = start_node(run_daemon, etcd, "--mem-queue-size=10000")  # all in memory
    await placed(etcd_client, "logs", leader, follower)
    async with await WireClient.connect(leader.tcp_address) as producer:
        for i in range(5):
            await producer.pub("logs", f"a{i}".encode())
    both = sorted((node_of(leader), node_of(follower)))
    port = follower.tcp_port
    follower.kill()  # its memory tail lost: it restarts at its reservation, a hole
    await until(lambda: _is(isr(etcd_client, "logs"), (node_of(leader),)), timeout=FAILOVER)
    async with await WireClient.connect(leader.tcp_address) as producer:
        await producer.pub("logs", b"a5")  # (ISR of one, the minimum 1)
    again = run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                       f"--etcd-endpoints={etcd.endpoint}", f"--tcp-address=127.0.0.1:{port}",
                       f"--data-path={tmp_path / 'nsqd-1'}", "--mem-queue-size=10000")
    await until(lambda: _is(_sorted(isr(etcd_client, "logs")), both), timeout=FAILOVER,
                what="the restarted follower back in sync")
    expected = [(i, f"a{i}") for i in range(6)]
    await until(lambda: _is(bodies(again, "logs"), expected), what="what it lost, fetched")
    clean(leader, again)


async def test_a_channels_cursor_is_shipped_and_the_new_leader_goes_on_from_it(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient,
        tmp_path: Path) -> None:
    leader = start_node(run_daemon, etcd)
    follower = start_node(run_daemon, etcd)
    await placed(etcd_client, "mail", leader, follower)
    async with (await WireClient.connect(leader.tcp_address) as producer,
                await WireClient.connect(leader.tcp_address) as consumer):
        await consumer.subscribe("mail", "send", rdy=10)
        for i in range(10):
            await producer.pub("mail", f"e{i}".encode())
        got = await consumer.messages(10)
        for msg in got[:6]:  # done with 0-5; 6-9 in flight
            await consumer.send(commands.fin(msg.id))
        journal = tmp_path / "nsqd-1" / "topics" / "mail" / "send.cursor"
        await until(lambda: journal.exists() and _mark_delete(journal) == 6,
                    what="the follower's journal at the leader's mark-delete")

    leader.kill()
    await until(lambda: "leading topic mail at epoch 2" in follower.output(),
                timeout=FAILOVER)
    async with await WireClient.connect(follower.tcp_address) as consumer:
        await consumer.subscribe("mail", "send", rdy=10)
        again = [m.body.decode() for m in await consumer.messages(4)]
        assert again == [f"e{i}" for i in range(6, 10)]  # what was in flight, nothing done
        await consumer.nothing_for(0.5)
    clean(follower)


def _mark_delete(journal: Path) -> int | None:
    state = cursorfile.load(journal)
    return state.mark_delete if state is not None else None


def data_path(daemon: Daemon) -> Path:
    return Path(next(str(a).split("=", 1)[1] for a in daemon.process.args  # type: ignore[union-attr]
                     if str(a).startswith("--data-path=")))


async def test_an_old_leader_back_cuts_its_uncommitted_records_and_follows(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    # every record of the old leader written (and fsynced) at once: they are stored records
    # on disk when it is killed, not a memory tail a kill -9 loses anyway
    durable = ("--mem-queue-size=0", "--sync-every=1")
    async with trio.open_nursery() as nursery:
        old, gate = await gated_leader(nursery, run_daemon, etcd, "--replica-lag-max=60s",
                                       "--min-insync-replicas=1", *durable)
        follower = start_node(run_daemon, etcd, "--min-insync-replicas=1")
        await placed(etcd_client, "events", old, follower)
        async with await WireClient.connect(old.tcp_address) as producer:
            for i in range(3):
                await producer.pub("events", f"c{i}".encode())  # committed: on both
            gate.close()  # the follower cut off from the old leader (still in its ISR)
            await producer.send(commands.mpub("events", [f"u{i}".encode() for i in range(3)]))
            await until(lambda: _latest(old, 5), what="appended on the old leader alone")
            args, port = old.process.args, old.tcp_port  # type: ignore[union-attr]
            old.kill()  # unanswered: never acknowledged
        nursery.cancel_scope.cancel()

    async def elected() -> bool:
        read_ = await read_state(etcd_client, "events")
        return read_ is not None and read_[0].epoch == 2
    await until(elected, timeout=FAILOVER, what="the follower elected at epoch 2")
    await until(lambda: "leading topic events at epoch 2" in follower.output(),
                timeout=FAILOVER)
    async with await WireClient.connect(follower.tcp_address) as producer:
        await producer.pub("events", b"n0")  # acknowledged by the new leader, at offset 3
    segments = data_path(old) / "topics" / "events"
    assert sum(p.stat().st_size for p in segments.glob("*.log")) > 0

    again = run_daemon("nsqd", *[a for a in args[1:] if not str(a).startswith(  # type: ignore[index]
        "--tcp-address=")], f"--tcp-address=127.0.0.1:{port}")
    await until(lambda: "log cut back to 3 (epoch 1)" in again.output(), timeout=FAILOVER,
                what="the old leader's uncommitted records cut")
    expected = [(0, "c0"), (1, "c1"), (2, "c2"), (3, "n0")]
    await until(lambda: _is(bodies(again, "events"), expected), timeout=FAILOVER,
                what="the new leader's record fetched at the offset the cut gave back")
    assert (segments / "epochs").read_text() == "1 0\n2 3\n"
    async with await WireClient.connect(follower.tcp_address) as consumer:
        await consumer.subscribe("events", "ch", rdy=10)
        got = [m.body.decode() for m in await consumer.messages(4)]
        assert got == ["c0", "c1", "c2", "n0"]
        await consumer.nothing_for(0.5)
    clean(follower, again)


async def test_a_replica_restarted_before_it_hears_from_etcd_takes_no_publish_and_delivers_nothing(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    # A restarted node serves clients before etcd has told it what its topics are. A topic
    # it held as a replica must not act as an unreplicated one meanwhile: a publish
    # acknowledged on its own write would be cut back when it truncates to its leader (an
    # acknowledged message lost), and its consumers would get its uncommitted tail. Here
    # etcd is unreachable for it, so that moment lasts.
    durable = ("--mem-queue-size=0", "--sync-every=1", "--min-insync-replicas=1")
    old = start_node(run_daemon, etcd, *durable)
    follower = start_node(run_daemon, etcd, *durable)
    await placed(etcd_client, "events", old, follower)
    async with await WireClient.connect(old.tcp_address) as producer:
        for i in range(3):
            await producer.pub("events", f"c{i}".encode())
    args, port = old.process.args, old.tcp_port  # type: ignore[union-attr]
    old.kill()
    await until(lambda: "leading topic events at epoch 2" in follower.output(),
                timeout=FAILOVER)

    nowhere = f"--etcd-endpoints=http://127.0.0.1:{free_port()}"
    again = run_daemon("nsqd", *[a for a in args[1:] if not str(a).startswith(  # type: ignore[index]
        ("--tcp-address=", "--etcd-endpoints="))], f"--tcp-address=127.0.0.1:{port}", nowhere)
    async with (await WireClient.connect(again.tcp_address) as producer,
                await WireClient.connect(again.tcp_address) as consumer):
        await producer.send(commands.pub("events", b"x"))
        assert (await producer.error()).startswith(b"E_PUB_FAILED")
        await consumer.subscribe("events", "ch", rdy=10)
        await consumer.nothing_for(1.0)
    assert await bodies(again, "events") == []  # (nothing below its HW: it has none yet)
    again.kill()

    back = run_daemon("nsqd", *[a for a in args[1:] if not str(a).startswith(  # type: ignore[index]
        "--tcp-address=")], f"--tcp-address=127.0.0.1:{port}")
    async with await WireClient.connect(follower.tcp_address) as producer:
        await producer.pub("events", b"n0")
    await until(lambda: _is(_sorted(isr(etcd_client, "events")),
                            sorted((node_of(follower), node_of(back)))),
                timeout=FAILOVER, what="the restarted replica back in sync")
    async with await WireClient.connect(follower.tcp_address) as consumer:
        await consumer.subscribe("events", "ch", rdy=10)
        got = [m.body.decode() for m in await consumer.messages(4)]
        assert got == ["c0", "c1", "c2", "n0"]  # (the refused one nowhere)
        await consumer.nothing_for(0.5)
    clean(follower, again, back)


async def test_a_restarted_replica_that_lost_its_memory_tail_may_not_lead_until_caught_up(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    # the leader fsyncs every record before answering; the follower keeps them in memory
    # (acknowledged once there, as its --sync-every allows): a kill -9 loses them
    leader = start_node(run_daemon, etcd, "--mem-queue-size=0", "--sync-every=1")
    follower = start_node(run_daemon, etcd, "--mem-queue-size=10000")
    await placed(etcd_client, "orders", leader, follower)
    async with await WireClient.connect(leader.tcp_address) as producer:
        for i in range(5):
            await producer.pub("orders", f"o{i}".encode())  # each OK: held by both
    leader_args, leader_port = leader.process.args, leader.tcp_port  # type: ignore[union-attr]
    follower_args, follower_port = follower.process.args, follower.tcp_port  # type: ignore[union-attr]
    follower.kill()
    leader.kill()  # both gone at once: the ISR in etcd still names both

    def restart(args: object, port: int) -> Daemon:
        return run_daemon("nsqd", *[a for a in args[1:]  # type: ignore[index]
                                    if not str(a).startswith("--tcp-address=")],
                          f"--tcp-address=127.0.0.1:{port}")

    back = restart(follower_args, follower_port)

    async def epoch() -> int:
        read_ = await read_state(etcd_client, "orders")
        assert read_ is not None
        return read_[0].epoch
    # the old leader's lease lapses; the follower, in the ISR, would be elected at once but
    # for what it lost: it waits instead
    await until(lambda: "may not lead before it has caught up" in back.output()
                or "leading topic orders at epoch 2" in back.output(), timeout=FAILOVER,
                what="the restarted follower asked to campaign")
    assert await epoch() == 1
    assert "leading topic orders" not in back.output()
    again = restart(leader_args, leader_port)  # its records on disk: it may lead at once
    await until(lambda: "leading topic orders at epoch 2" in again.output(), timeout=FAILOVER)
    expected = [(i, f"o{i}") for i in range(5)]
    await until(lambda: _is(bodies(back, "orders"), expected), timeout=FAILOVER,
                what="the follower caught up from the leader's disk")
    await until(lambda: "caught up with the leader's HW" in back.output())
    async with await WireClient.connect(again.tcp_address) as consumer:
        await consumer.subscribe("orders", "ch", rdy=10)
        assert [m.body.decode() for m in await consumer.messages(5)] == [
            f"o{i}" for i in range(5)]
    clean(back, again)


async def test_a_leader_cut_off_from_etcd_stops_acknowledging_and_delivering_at_its_fence(
        run_daemon: Callable[..., Daemon], etcd: Etcd, etcd_client: EtcdClient) -> None:
    async with trio.open_nursery() as nursery:
        to_etcd = Gate()  # the leader's way to etcd, and only its
        to_etcd.target = int(etcd.endpoint.rsplit(":", 1)[1])
        port = await nursery.start(to_etcd.run)
        leader = run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                            f"--etcd-endpoints=http://127.0.0.1:{port}")
        follower = start_node(run_daemon, etcd)
        await placed(etcd_client, "fenced", leader, follower)
        async with (await WireClient.connect(leader.tcp_address) as producer,
                    await WireClient.connect(leader.tcp_address) as consumer):
            await consumer.subscribe("fenced", "ch", rdy=10)
            await producer.pub("fenced", b"before")
            assert (await consumer.message()).body == b"before"
            to_etcd.close()  # its follower still fetches from it, and reaches etcd
            # (or its lease's own warning, which comes later: the keep-alive times out)
            await until(lambda: "topic fenced: fenced" in leader.output()
                        or "may expire within" in leader.output(), timeout=FAILOVER,
                        what="the leader at its fence")
            await producer.send(commands.pub("fenced", b"after-the-fence"))
            error = await producer.error(timeout=FAILOVER)
            assert error.startswith(b"E_PUB_FAILED") and b"is fenced" in error, error
            await consumer.nothing_for(0.5)
        # its lease lapses in etcd: the follower leads at the next epoch
        await until(lambda: "leading topic fenced at epoch 2" in follower.output(),
                    timeout=FAILOVER)
        async with await WireClient.connect(follower.tcp_address) as consumer:
            await consumer.subscribe("fenced", "ch", rdy=10)
            assert (await consumer.message()).body == b"before"
            await consumer.nothing_for(0.5)
        nursery.cancel_scope.cancel()
    clean(follower)
