"""Nothing acknowledged lost across a replicated cluster, in any order of faults: random
sequences of operations drawn from a seed, run against etcd and three nsqd (a topic with three
replicas, ``--min-insync-replicas=2``) and checked against a model of what must come out
(docs/design/replication.md, "What each failure does" and "Invariants").

The operations: a PUB or MPUB to any live node (acknowledged only on ``OK``; a refusal or a
connection lost before the answer leaves the messages unknown: they may come, never must), a
consume through the topic's current leader that FINs some of what it takes, ``kill -9`` of the
leader or of a follower (alone, or while an MPUB waits for its answer), a killed node started
again (same port, same data), etcd killed and started again (same ports and data), and a wait
for a leader. The model: the bodies acknowledged (each unique), less those FINished once
received. At the end, with etcd and every node up, a leader and the three replicas in sync
and caught up, draining the channel from the leader must deliver each of them at least once
(duplicates allowed), and nothing never published; and no nsqd may log a traceback.

The modes: ``default`` (nsqd's storage flags; a ``kill -9`` loses a node's memory tail, so a
node is killed only while the three replicas are in sync and the others up: two nodes'
memory tails lost together may lose what they alone held, as the design says), and
``durable`` (``--mem-queue-size=0 --sync-every=1``: every record written and fsynced before
it counts as held, so any number of nodes may be down at once, with etcd down too).

Replay: ``NSQ_REPL_MODEL_SEED=<seed>`` (with ``NSQ_REPL_MODEL_MODE=<mode>``,
``NSQ_REPL_MODEL_LENGTH=<n>``), or ``NSQ_REPL_MODEL_OPS='<json list>'`` for a sequence as a
failure prints it; ``NSQ_REPL_MODEL_SHRINK=<seconds>`` shrinks a failing sequence first.
``-m slow`` runs ``NSQ_REPL_MODEL_SOAK=<n>`` sequences per mode (longer ones:
``NSQ_REPL_MODEL_BASE=<seed>`` the first), and the loss the soak found (``FOUND``, and
the race behind it made on purpose; docs/design/replication.md, "A follower's log cut back
brings its cursors back with it").
"""

from __future__ import annotations

import base64
import json
import os
import random
import secrets
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from nsq_common import FrameType, commands, decode_message
from nsq_testing import DEADLINE, Etcd, WireClient, free_port, start_daemon, until
from nsq_testing.daemon import Daemon
from nsq_testing.forkserver import ForkServer
from nsqd.replication.election import read_state
from nsqd.replication.etcd import EtcdClient, EtcdError

MODES: dict[str, tuple[str, ...]] = {
    "default": (),
    # (a replica restarted after a kill -9 may lead at once only with both: every record it
    # said it held is on its disk; docs/design/replication.md, "RECOVERING")
    "durable": ("--mem-queue-size=0", "--sync-every=1"),
}
TOPIC = "model"
CHANNEL = "c"
NODES = 3
#: a lease (6 s), an election, a restarted node catching up, RECOVERING (60 s) where a
#: restarted replica must wait for a leader: on a slow, busy machine
WAIT = 180.0
#: how long the final drain may take to get every owed message
DRAIN_DEADLINE = 120.0
#: (on failure) how long a consumer waits for what was not delivered: past the message
#: timeout, after which anything in flight somewhere comes again
LATE = 75.0
#: a pause in deliveries this long ends a partial consume (not a synchronisation: the model
#: accepts any number taken)
QUIET = 0.3
#: publishes are answered within 2 x --replica-lag-max, or forwarded and answered so; a
#: forward to a leader that is gone waits for the connection to fail
ANSWER = 60.0


class Failure(AssertionError):
    pass


def node_id(port: int) -> str:
    return f"127.0.0.1:{port}"


class Runner:
    """One sequence on a cluster of its own (etcd, three nsqd) in a temp directory."""

    def __init__(self, mode: str, ops: list[list[Any]], forks: ForkServer | None) -> None:
        self.mode, self.ops, self.forks = mode, ops, forks
        self.root = Path(tempfile.mkdtemp(prefix="nsq-repl-model-"))
        self.etcd = Etcd(self.root / "etcd")
        self.etcd_up = False
        self.client: EtcdClient | None = None
        self.ports = [free_port() for _ in range(NODES)]
        self.nodes: list[Daemon | None] = [None] * NODES
        self.every: list[Daemon] = []
        self.tag = secrets.token_hex(3)
        self.seq = 0
        self.published: set[bytes] = set()
        self.acked: dict[bytes, str] = {}  # body -> the node that answered OK
        self.finished: set[bytes] = set()
        self.delivered: set[bytes] = set()
        self.refused = self.unknown = 0
        #: what each operation did, as resolved at run time (the node it hit), for a failure
        self.story: list[str] = []
        self.web = httpx.Client(timeout=DEADLINE)

    # -- the processes ---------------------------------------------------------------------

    def start(self, slot: int) -> None:
        data = self.root / f"node-{slot}"
        data.mkdir(exist_ok=True)
        args = ["--broadcast-address=127.0.0.1", f"--etcd-endpoints={self.etcd.endpoint}",
                f"--tcp-address=127.0.0.1:{self.ports[slot]}", "--http-address=127.0.0.1:0",
                "--https-address=127.0.0.1:0", f"--data-path={data}", "--default-replicas=3",
                "--min-insync-replicas=2", "--replica-lag-max=2s", *MODES[self.mode]]
        daemon = start_daemon("nsqd", args, forks=self.forks)
        self.nodes[slot] = daemon
        self.every.append(daemon)

    def kill(self, slot: int) -> None:
        daemon = self.nodes[slot]
        assert daemon is not None
        daemon.kill()
        self.nodes[slot] = None

    def live(self) -> list[int]:
        return [slot for slot, d in enumerate(self.nodes) if d is not None]

    def down(self) -> list[int]:
        return [slot for slot, d in enumerate(self.nodes) if d is None]

    async def close(self) -> None:
        for slot in self.live():
            self.kill(slot)
        if self.client is not None:
            await self.client.aclose()
        self.etcd.stop(signal.SIGKILL)
        self.web.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def http(self, slot: int) -> str:
        daemon = self.nodes[slot]
        assert daemon is not None
        return f"http://{daemon.http_address}"

    def replication(self, slot: int) -> dict[str, Any] | None:
        """The topic's ``replication`` object in node ``slot``'s /stats (None: not there,
        or the node not answering)."""
        try:
            doc = self.web.get(f"{self.http(slot)}/stats",
                               params={"format": "json", "topic": TOPIC}).json()
        except (httpx.HTTPError, ValueError):
            return None
        for topic in doc.get("topics") or []:
            if topic["topic_name"] == TOPIC:
                return topic.get("replication")  # type: ignore[no-any-return]
        return None

    def channel(self, slot: int) -> dict[str, Any] | None:
        doc = self.web.get(f"{self.http(slot)}/stats",
                           params={"format": "json", "topic": TOPIC,
                                   "include_offsets": "true"}).json()
        for topic in doc.get("topics") or []:
            for channel in topic["channels"]:
                if channel["channel_name"] == CHANNEL:
                    return channel  # type: ignore[no-any-return]
        return None

    def leading(self) -> tuple[int, dict[str, Any]] | None:
        """A live node that says it leads the topic, with its view of it."""
        for slot in self.live():
            view = self.replication(slot)
            if view is not None and view.get("leader") == node_id(self.ports[slot]):
                return slot, view
        return None

    def settled(self, *, caught_up: bool) -> int | None:
        """The leader, once a live node leads with the three replicas in sync (and, with
        ``caught_up``, every follower at its log end and every node up)."""
        found = self.leading()
        if found is None:
            return None
        slot, view = found
        if len(view["isr"]) != NODES:
            return None
        if caught_up and (self.down() or any(view["lag"].values())
                          or len(view["lag"]) != NODES - 1):
            return None
        return slot

    async def wait_settled(self, *, caught_up: bool) -> int:
        def found() -> list[int] | None:
            slot = self.settled(caught_up=caught_up)
            return None if slot is None else [slot]
        what = "a leader, three replicas in sync" + (", caught up" if caught_up else "")
        return (await until(found, timeout=WAIT, what=what))[0]

    async def leader_possible(self) -> bool:
        """Whether a leader can be elected now: etcd up and a live node in its ISR."""
        if not self.etcd_up:
            return False
        assert self.client is not None
        try:
            read = await read_state(self.client, TOPIC)
        except EtcdError:
            return False
        if read is None:
            return False
        live = {node_id(self.ports[slot]) for slot in self.live()}
        return bool(live & set(read[0].isr))

    # -- running ---------------------------------------------------------------------------

    async def setup(self) -> None:
        self.etcd.start()
        self.etcd_up = True
        self.client = EtcdClient([self.etcd.endpoint])
        for slot in range(NODES):
            self.start(slot)

        def created() -> bool:
            r = self.web.post(f"{self.http(0)}/topic/create",
                              params={"topic": TOPIC, "replicas": NODES})
            return r.status_code == 200  # (until every node has joined: INVALID_REPLICAS)
        await until(created, timeout=WAIT, what="the topic placed on three nodes")
        leader = await self.wait_settled(caught_up=True)
        # the channel before any publish (one made later starts at the topic's end), made on
        # the leader and shipped to every follower
        r = self.web.post(f"{self.http(leader)}/channel/create",
                          params={"topic": TOPIC, "channel": CHANNEL})
        assert r.status_code == 200, r.text
        for slot in range(NODES):
            def made(slot: int = slot) -> bool:
                return self.channel(slot) is not None
            await until(made, timeout=WAIT, what=f"the channel on node {slot}")

    async def run(self) -> None:
        await self.setup()
        for i, op in enumerate(self.ops):
            try:
                said = await getattr(self, f"op_{op[0]}")(*op[1:])
            except Failure:
                raise
            except Exception as exc:
                raise Failure(f"operation {i} {op!r}: {exc!r}\n{self.situation()}") from exc
            self.story.append(f"{i} {json.dumps(op)}: {said}")
        try:
            await self.verify()
        except Failure:
            raise
        except Exception as exc:
            raise Failure(f"at the end: {exc!r}\n{self.situation()}") from exc
        for daemon in self.every:
            if "Traceback" in daemon.output():
                raise Failure(f"nsqd {daemon.pid} logged a traceback: "
                              f"{daemon.output()[-4000:]}\n{self.situation()}")

    def situation(self) -> str:
        def notable(daemon: Daemon) -> str:
            lines = [line for line in daemon.output().splitlines()
                     if "replication" in line or "ERROR" in line or "WARN" in line]
            return "\n".join(lines[-25:])
        logs = "\n".join(f"--- nsqd {d.pid} ({d.tcp_address})\n{notable(d)}" for d in self.every)
        return (f"{len(self.acked)} acknowledged, {self.refused} refused, {self.unknown} "
                f"unknown, {len(self.finished)} finished; what each operation did:\n"
                + "\n".join(self.story) + f"\n{logs}")

    def new_bodies(self, n: int) -> list[bytes]:
        out = []
        for _ in range(n):
            self.seq += 1
            out.append(b"%s-%06d" % (self.tag.encode(), self.seq))
        self.published.update(out)
        return out

    # publishing

    async def _publish(self, pick: int, command: bytes, bodies: list[bytes]) -> str:
        live = self.live()
        if not live:
            return "skipped: no node up"
        slot = live[pick % len(live)]
        daemon = self.nodes[slot]
        assert daemon is not None
        try:
            async with await WireClient.connect(daemon.tcp_address) as link:
                await link.send(command)
                kind, data = await link.read_frame(timeout=ANSWER)
        except (OSError, EOFError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            self.unknown += len(bodies)
            return f"node {slot}: unknown ({exc!r})"
        return f"node {slot}: " + self._answered(slot, kind, data, bodies)

    def _answered(self, slot: int, kind: int, data: bytes, bodies: list[bytes]) -> str:
        if kind == FrameType.RESPONSE and data == b"OK":
            for body in bodies:
                self.acked[body] = f"node {slot}"
            return f"OK {bodies[0]!r}..{bodies[-1]!r}"
        if kind != FrameType.ERROR or not data.startswith((b"E_PUB_FAILED", b"E_MPUB_FAILED")):
            raise Failure(f"a publish to node {slot} answered {kind} {data!r}")
        self.refused += len(bodies)
        return data.decode(errors="replace")

    async def op_pub(self, pick: int) -> str:
        bodies = self.new_bodies(1)
        return await self._publish(pick, commands.pub(TOPIC, bodies[0]), bodies)

    async def op_mpub(self, pick: int, n: int) -> str:
        bodies = self.new_bodies(n)
        return await self._publish(pick, commands.mpub(TOPIC, bodies), bodies)

    # consuming

    async def _take(self, client: WireClient, timeout: float) -> Any:
        try:
            kind, data = await client.read_frame(timeout)
        except trio.TooSlowError:
            return None
        if kind != FrameType.MESSAGE:
            raise Failure(f"expected a message, got {kind} {data!r}")
        msg = decode_message(data)
        if msg.body not in self.published:
            raise Failure(f"delivered a body never published: {msg.body!r}")
        self.delivered.add(msg.body)
        return msg

    async def op_consume(self, n: int, pattern: str) -> str:
        found = self.leading()
        if found is None:
            return "skipped: no leader"
        slot = found[0]
        daemon = self.nodes[slot]
        assert daemon is not None
        taken, fins = 0, 0
        try:
            async with await WireClient.connect(daemon.tcp_address) as client:
                await client.subscribe(TOPIC, CHANNEL, n)
                for what in pattern:
                    msg = await self._take(client, QUIET)
                    if msg is None:
                        break
                    taken += 1
                    if what == "f":  # (taken as done once sent: it may come again or not)
                        await client.send(commands.fin(msg.id))
                        self.finished.add(msg.body)
                        fins += 1
        except (OSError, EOFError, trio.BrokenResourceError) as exc:
            return f"node {slot}: took {taken}, FIN {fins}, then {exc!r}"
        return f"node {slot}: took {taken}, FIN {fins}"

    # faults

    async def _victim(self, role: str, pick: int) -> tuple[int, str] | None:
        """The node a kill of ``role`` hits (``pick`` chooses among the candidates), and
        what it is. In the default mode, only once the three replicas are in sync (and so
        every node up): see the module's docstring."""
        if self.mode == "default":
            assert not self.down() and self.etcd_up, "the generator keeps to the default rule"
            await self.wait_settled(caught_up=False)
        found = self.leading()
        if role == "leader" and found is not None:
            candidates = [found[0]]
        else:
            candidates = [s for s in self.live() if found is None or s != found[0]]
        if not candidates:
            return None
        slot = candidates[pick % len(candidates)]
        return slot, "the leader" if found is not None and found[0] == slot else "not leading"

    async def op_kill(self, role: str, pick: int) -> str:
        """``kill -9`` of the leader or of a follower."""
        victim = await self._victim(role, pick)
        if victim is None:
            return "skipped: no such node up"
        self.kill(victim[0])
        return f"killed node {victim[0]} ({victim[1]})"

    async def op_pub_kill(self, pick: int, n: int, role: str, kill_pick: int) -> str:
        """An MPUB sent, then ``kill -9`` of the leader or of a follower before its answer is
        read: acknowledged only if it still answers OK."""
        victim = await self._victim(role, kill_pick)
        live = self.live()
        if victim is None or not live:
            return "skipped: no such node up"
        slot = live[pick % len(live)]
        daemon = self.nodes[slot]
        assert daemon is not None
        bodies = self.new_bodies(n)
        killed = f"killed node {victim[0]} ({victim[1]})"
        try:
            async with await WireClient.connect(daemon.tcp_address) as link:
                await link.send(commands.mpub(TOPIC, bodies))
                self.kill(victim[0])
                kind, data = await link.read_frame(timeout=ANSWER)
        except (OSError, EOFError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            if self.nodes[victim[0]] is not None:
                self.kill(victim[0])
            self.unknown += len(bodies)
            return f"MPUB to node {slot}, {killed}: unknown ({exc!r})"
        return f"MPUB to node {slot}, {killed}: " + self._answered(slot, kind, data, bodies)

    async def op_restart(self, pick: int) -> str:
        down = self.down()
        if not down:
            return "skipped: none down"
        slot = down[pick % len(down)]
        self.start(slot)
        return f"started node {slot}"

    async def op_kill_etcd(self) -> str:
        if not self.etcd_up:
            return "skipped: down"
        self.etcd.kill()
        self.etcd_up = False
        return "killed etcd"

    async def op_restart_etcd(self) -> str:
        if self.etcd_up:
            return "skipped: up"
        await trio.to_thread.run_sync(self.etcd.start)
        self.etcd_up = True
        return "started etcd"

    async def op_wait_leader(self) -> str:
        if self.leading() is None and not await self.leader_possible():
            return "skipped: no leader possible now"
        slot, _ = await until(self.leading, timeout=WAIT, what="a leader")
        return f"node {slot} leads"

    # -- the end: every acknowledged message not finished comes ------------------------------

    async def verify(self) -> None:
        if not self.etcd_up:
            await self.op_restart_etcd()
        for slot in self.down():
            self.start(slot)
        owed = set(self.acked) - self.finished
        deadline = time.monotonic() + DRAIN_DEADLINE
        while owed and time.monotonic() < deadline:
            leader = await self.wait_settled(caught_up=True)
            if await self._drain(leader, owed, deadline):
                break  # the channel is empty: nothing more will come
        if owed:
            where = self.where(owed)
            late = await self.late(set(owed))
            raise Failure(f"{len(owed)} acknowledged, unfinished messages never delivered: "
                          f"{sorted(owed)[:20]}\n{where}\n{late}\n{self.situation()}")

    async def late(self, owed: set[bytes]) -> str:
        """(On failure) whether the messages not delivered come later, past the message
        timeout (60 s): a fresh consumer on the leader waits that long for them."""
        found = self.leading()
        if found is None:
            return "no leader to look for late deliveries on"
        daemon = self.nodes[found[0]]
        assert daemon is not None
        came: set[bytes] = set()
        with trio.move_on_after(LATE):
            async with await WireClient.connect(daemon.tcp_address) as client:
                await client.subscribe(TOPIC, CHANNEL, 100)
                while not owed <= came:
                    msg = await self._take(client, LATE)
                    if msg is not None:
                        came.add(msg.body)
                        await client.send(commands.fin(msg.id))
        return (f"within {LATE} s more on node {found[0]}: {len(owed & came)} of them came "
                f"late ({sorted(owed & came)[:20]}), {len(owed - came)} never")

    async def _drain(self, slot: int, owed: set[bytes], deadline: float) -> bool:
        """Take (and FIN) what the leader delivers until nothing is owed, or its channel is
        empty, or the deadline passed (True: done), or it stopped leading or answering
        (False: look for the leader again)."""
        daemon = self.nodes[slot]
        assert daemon is not None
        try:
            async with await WireClient.connect(daemon.tcp_address) as client:
                await client.subscribe(TOPIC, CHANNEL, 100)
                while owed and time.monotonic() < deadline:
                    msg = await self._take(client, QUIET)
                    if msg is not None:
                        await client.send(commands.fin(msg.id))
                        owed.discard(msg.body)
                        continue
                    settled = self.settled(caught_up=True)
                    c = self.channel(slot)
                    if settled == slot and c is not None and c["depth"] == \
                            c["in_flight_count"] == c["deferred_count"] == 0:
                        return True  # nothing more will come
                    if settled is not None and settled != slot:
                        return False
        except (OSError, EOFError, trio.BrokenResourceError, httpx.HTTPError):
            return False
        return True

    def where(self, lost: set[bytes]) -> str:
        """Each lost body: the node that acknowledged it, and where each live node's log
        holds it (``/topic/read`` from its start)."""
        found: dict[bytes, list[str]] = {b: [] for b in lost}
        ends = []
        for slot in self.live():
            offset, seen = 0, 0
            try:
                while seen < 100_000:
                    doc = self.web.get(f"{self.http(slot)}/topic/read",
                                       params={"topic": TOPIC, "offset": offset,
                                               "n": 1000}).json()
                    messages = doc.get("messages", [])
                    for m in messages:
                        data = base64.b64decode(m["body"])
                        if data in found:
                            found[data].append(f"node {slot}@{m['offset']}")
                    seen += len(messages)
                    if not messages:
                        break
                    offset = messages[-1]["offset"] + 1
                ends.append(f"node {slot}: read {seen}, "
                            f"{ {k: v for k, v in doc.items() if k != 'messages'} }; "
                            f"its channel: {self.channel(slot)}; its view: "
                            f"{self.replication(slot)}")
            except (httpx.HTTPError, ValueError) as exc:
                ends.append(f"node {slot}: {exc!r}")
        lines = [f"{b!r}: acknowledged by {self.acked.get(b)}, in the logs at "
                 f"{found[b] or 'none'}" for b in sorted(lost)[:20]]
        return "\n".join([*lines, *ends])


# -- the sequences ---------------------------------------------------------------------------


def generate(seed: int, length: int, mode: str) -> list[list[Any]]:
    """``length`` operations from ``seed``, kept to what the mode allows (which nodes may be
    down together); the nodes they hit are chosen at run time by their ``pick``."""
    rng = random.Random(seed)
    down = 0
    etcd_down = False
    ops: list[list[Any]] = []
    while len(ops) < length:
        choices: list[tuple[str, float]] = [("pub", 3), ("mpub", 2), ("consume", 2),
                                            ("wait_leader", 0.7)]
        # (default: only with every node and etcd up; see the module's docstring)
        if (down == 0 and not etcd_down) if mode == "default" else down < NODES:
            choices += [("kill", 1.0), ("pub_kill", 1.0)]
        if down:
            choices.append(("restart", 2.5))
        choices.append(("restart_etcd", 2.0) if etcd_down else ("kill_etcd", 0.5))
        name = rng.choices([c[0] for c in choices], [c[1] for c in choices])[0]
        pick = rng.randrange(1000)
        if name == "pub":
            ops.append(["pub", pick])
        elif name == "mpub":
            ops.append(["mpub", pick, rng.randint(2, 20)])
        elif name == "consume":
            n = rng.randint(1, 10)
            ops.append(["consume", n, "".join(rng.choice("ffl") for _ in range(n))])
        elif name in ("kill", "pub_kill"):
            role = rng.choice(["leader", "follower"])
            if name == "kill":
                ops.append(["kill", role, pick])
            else:
                ops.append(["pub_kill", pick, rng.randint(1, 20), role, rng.randrange(1000)])
            down += 1
            if rng.random() < 0.5:
                ops.append(["wait_leader"])
        elif name == "restart":
            ops.append(["restart", pick])
            down -= 1
        elif name == "kill_etcd":
            ops.append(["kill_etcd"])
            etcd_down = True
        elif name == "restart_etcd":
            ops.append(["restart_etcd"])
            etcd_down = False
        else:
            ops.append([name])
    return ops


async def run_sequence(mode: str, ops: list[list[Any]], forks: ForkServer | None = None
                       ) -> str | None:
    """The failure's description, or None when the sequence passes."""
    runner = Runner(mode, ops, forks)
    try:
        await runner.run()
    except (Failure, TimeoutError, trio.TooSlowError, RuntimeError, EOFError) as exc:
        if isinstance(exc, Failure):
            return str(exc)[:12000]
        return f"{exc!r}\n{runner.situation()}"[:12000]
    finally:
        await runner.close()
    print(f"mode {mode}: {len(runner.acked)} acknowledged, {runner.refused} refused, "
          f"{runner.unknown} unknown, {len(runner.finished)} finished, "
          f"{len(runner.delivered)} delivered; what each operation did:\n"
          + "\n".join(runner.story))
    return None


async def shrink(mode: str, ops: list[list[Any]], budget: float, forks: ForkServer | None
                 ) -> list[list[Any]]:
    """A shorter sequence that still fails (chunks removed while it fails, within ``budget``
    seconds). A sequence cut so is still valid in either mode: each operation checks what
    it can do when it runs (the default mode's kill asserts its rule: a failure of the
    candidate, which the shrinker then does not keep only by luck of the assert)."""
    deadline = time.monotonic() + budget
    n = 2
    while len(ops) >= 2 and time.monotonic() < deadline:
        size = max(1, len(ops) // n)
        for i in range(0, len(ops), size):
            candidate = ops[:i] + ops[i + size:]
            if time.monotonic() > deadline:
                break
            if not valid(mode, candidate):
                continue
            if await run_sequence(mode, candidate, forks) is not None:
                ops, n = candidate, max(n - 1, 2)
                break
        else:
            if size == 1:
                break
            n = min(len(ops), n * 2)
    return ops


def valid(mode: str, ops: list[list[Any]]) -> bool:
    """Whether ``ops`` keeps to the mode's rule (the default mode: a kill only with every
    node and etcd up)."""
    down, etcd_down = 0, False
    for op in ops:
        if op[0] in ("kill", "pub_kill"):
            if mode == "default" and (down or etcd_down):
                return False
            down += 1
        elif op[0] == "restart":
            down = max(0, down - 1)
        elif op[0] == "kill_etcd":
            etcd_down = True
        elif op[0] == "restart_etcd":
            etcd_down = False
    return True


async def check(mode: str, seed: int | None, ops: list[list[Any]], forks: ForkServer | None
                ) -> None:
    failure = await run_sequence(mode, ops, forks)
    if failure is None:
        return
    budget = float(os.environ.get("NSQ_REPL_MODEL_SHRINK", "0"))
    shrunk = await shrink(mode, ops, budget, forks) if budget > 0 else ops
    again = await run_sequence(mode, shrunk, forks) if shrunk is not ops else "(not shrunk)"
    pytest.fail(f"mode {mode}, seed {seed}: {failure}\n"
                f"replay: NSQ_REPL_MODEL_MODE={mode} NSQ_REPL_MODEL_SEED={seed} "
                f"NSQ_REPL_MODEL_LENGTH={len(ops)} or\n"
                f"NSQ_REPL_MODEL_MODE={mode} NSQ_REPL_MODEL_OPS='{json.dumps(shrunk)}'\n"
                f"(shrunk from {len(ops)} to {len(shrunk)} operations: {again})",
                pytrace=False)


#: the default suite's sequences are short; the soak's longer
LENGTH = int(os.environ.get("NSQ_REPL_MODEL_LENGTH", "10"))
SOAK_LENGTH = int(os.environ.get("NSQ_REPL_MODEL_LENGTH", "25"))
#: the default suite's seeds for each mode (NSQ_REPL_MODEL_SEED replaces them)
DEFAULT_SEEDS = (6, 13)


def _seeds() -> list[int]:
    if "NSQ_REPL_MODEL_SEED" in os.environ:
        return [int(os.environ["NSQ_REPL_MODEL_SEED"])]
    return list(DEFAULT_SEEDS)


def _modes() -> list[str]:
    if "NSQ_REPL_MODEL_MODE" in os.environ:
        return [os.environ["NSQ_REPL_MODEL_MODE"]]
    return list(MODES)


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer | None]:
    """Each start of nsqd a fork of one process that imported nsqd already
    (``nsq_testing.forkserver``), sparing the interpreter's start and the imports;
    NSQ_REPL_MODEL_FORK=0: a new process each time."""
    if os.environ.get("NSQ_REPL_MODEL_FORK") == "0":
        yield None
        return
    server = ForkServer("nsqd")
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("seed", _seeds())
async def test_random_sequences_lose_nothing_acknowledged(mode: str, seed: int,
                                                          forks: ForkServer | None) -> None:
    if "NSQ_REPL_MODEL_OPS" in os.environ:
        await check(mode, None, json.loads(os.environ["NSQ_REPL_MODEL_OPS"]), forks)
    else:
        await check(mode, seed, generate(seed, LENGTH, mode), forks)


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
async def test_soak_many_sequences(mode: str, forks: ForkServer | None) -> None:
    count = int(os.environ.get("NSQ_REPL_MODEL_SOAK", "50"))
    base = int(os.environ.get("NSQ_REPL_MODEL_BASE", str(random.randrange(1 << 30))))
    print(f"soak: mode {mode}, seeds {base}..{base + count - 1}", flush=True)
    failed: list[str] = []
    for seed in range(base, base + count):
        verdict = "ok"
        started = time.monotonic()
        try:
            await check(mode, seed, generate(seed, SOAK_LENGTH, mode), forks)
        except pytest.fail.Exception as exc:
            failed.append(str(exc))
            verdict = f"FAILED\n{exc}"
        print(f"soak: mode {mode}, seed {seed} ({time.monotonic() - started:.0f} s): "
              f"{verdict}", flush=True)
    assert not failed, "\n\n".join(failed)


#: Sequences that found a loss, as printed by the soak; each may need particular timings to
#: fail again (a replay of the same operations differs in what each node has done when the
#: next operation comes), so they run under ``-m slow``, as regressions once fixed.
FOUND: dict[str, tuple[str, str, list[list[Any]]]] = {
    # (soak seed 1005, default mode; failed once, then passed 12 replays of the same list)
    # node 0 led epoch 1, was killed (its memory tail lost), restarted as a follower of node
    # 2 (epoch 2), joined the in-sync set, and node 2 was killed within about 50 ms of its
    # catching up: node 0 led epoch 3 and its channel delivered none of the 5 acknowledged,
    # unfinished messages, though all three logs held them at the same offsets. A replica
    # restarted after a kill -9 skips its log's hole in its channels' cursors
    # (restart.open_cursor: the cursor at the reservation's end, 1048596 in a run of this
    # file's kind); only the leader's cursor, shipped later, brings it back. Cursors go at
    # most every CURSOR_SHIP_INTERVAL (100 ms) per connection and topic, and a connection's
    # first DATA spends that on the settings records (kinds 0 and 1), so a follower that
    # catches up within 100 ms joins the in-sync set, and may lead, with no cursor from the
    # leader yet: leading then, it takes the records fetched into its hole's offsets as done.
    # Fixed: a follower's log cut back brings its channels' cursors back to the log's end
    # (replication.cursors.cut_back).
    "restarted-replica-leads-before-its-cursor": (
        "default",
        "a replica restarted after kill -9 led before the leader's cursor reached it: its "
        "channel took the offsets of its log's hole as done (restart.open_cursor) and never "
        "delivered the records fetched into them",
        [["mpub", 923, 14], ["consume", 10, "lffllffflf"], ["mpub", 212, 3], ["consume", 1, "f"],
         ["kill", "follower", 348], ["wait_leader"], ["pub", 302], ["consume", 8, "flffllff"],
         ["restart", 692], ["consume", 5, "flfff"], ["mpub", 832, 11], ["consume", 1, "f"],
         ["consume", 9, "flflfllll"], ["pub_kill", 35, 15, "leader", 28], ["wait_leader"],
         ["pub", 67], ["pub", 475], ["consume", 6, "fffflf"], ["consume", 8, "llffflff"],
         ["restart", 366], ["mpub", 969, 18], ["pub", 613], ["pub", 592],
         ["pub_kill", 398, 12, "leader", 674], ["wait_leader"]]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(FOUND))
async def test_sequences_that_found_a_loss(case: str, forks: ForkServer | None) -> None:
    mode, reason, ops = FOUND[case]
    failure = await run_sequence(mode, ops, forks)
    assert failure is None, f"{reason}: {failure}"


#: attempts of the race below (each hits it one time in a few on a busy 2-core machine)
ATTEMPTS = 20


@pytest.mark.slow
async def test_a_restarted_replica_leading_at_once_delivers_every_message_owed() -> None:
    """FOUND's loss made on purpose: the leader A killed (its memory tail lost), B leads; A
    restarted, and B and C killed the moment etcd has A back in the in-sync set, so that A
    leads, within 100 ms of its fetch connection's start (the cursor's first chance). Every
    acknowledged message not FINished must still come from A; tried ``ATTEMPTS`` times (a
    race: the test stops at the first loss)."""
    for attempt in range(ATTEMPTS):
        lost = await _restart_and_lead_at_once()
        assert not lost, f"attempt {attempt + 1}: A led and never delivered {lost}"


async def _restart_and_lead_at_once() -> list[bytes]:
    runner = Runner("default", [], None)
    try:
        await runner.setup()
        assert runner.client is not None
        found = runner.leading()
        assert found is not None
        a = found[0]
        bodies = runner.new_bodies(20)
        await runner._publish(a, commands.mpub(TOPIC, bodies), bodies)
        assert set(bodies) <= set(runner.acked)
        await runner.op_consume(5, "fffff")  # (a cursor of A's, shipped: B goes on from it)
        runner.kill(a)
        b, _ = await until(runner.leading, timeout=WAIT, what="B leads")
        await runner.op_consume(3, "fff")
        c = next(s for s in runner.live() if s != b)

        def shipped() -> bool:
            return all((runner.channel(s) or {}).get("mark_delete_offset") ==
                       (runner.channel(b) or {}).get("mark_delete_offset") for s in (b, c))
        await until(shipped, timeout=WAIT, what="C holds B's cursor")
        runner.start(a)
        me = node_id(runner.ports[a])
        with trio.fail_after(WAIT):
            while True:  # (as fast as etcd answers: the race is within 100 ms)
                read = await read_state(runner.client, TOPIC)
                if read is not None and me in read[0].isr:
                    break
        runner.kill(b)
        runner.kill(c)
        leader, _ = await until(runner.leading, timeout=WAIT, what="A leads")
        assert leader == a
        owed = set(runner.acked) - runner.finished
        got: set[bytes] = set()
        async with await WireClient.connect(runner.nodes[a].tcp_address) as client:  # type: ignore[union-attr]
            await client.subscribe(TOPIC, CHANNEL, 50)
            deadline = time.monotonic() + DRAIN_DEADLINE
            while not owed <= got and time.monotonic() < deadline:
                msg = await runner._take(client, QUIET)
                if msg is None:
                    ch = runner.channel(a)
                    if ch is not None and ch["depth"] == ch["in_flight_count"] == \
                            ch["deferred_count"] == 0:
                        break
                    continue
                got.add(msg.body)
                await client.send(commands.fin(msg.id))
        return sorted(owed - got)
    finally:
        await runner.close()
