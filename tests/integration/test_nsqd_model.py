"""Nothing lost in any order: random sequences of operations, crashes and damaged files run
against a real nsqd and checked against a model of what must come out (``_crash_model``;
docs/design/storage.md, "How storage is crash-tested").

Replay: ``NSQ_MODEL_SEED=<seed>`` (and ``NSQ_MODEL_MODE=<mode>``, ``NSQ_MODEL_LENGTH=<n>``)
runs that seed's sequence; ``NSQ_MODEL_OPS='<json list>'`` runs a sequence as printed by a
failure (shrunk). ``make soak`` runs thousands (``-m slow``; ``NSQ_MODEL_SOAK=<n>`` a mode).
"""

from __future__ import annotations

import base64
import json
import os
import random
import secrets
import shutil
import signal
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from nsq_common import FrameType, commands, decode_message
from nsq_testing import DEADLINE, WireClient, start_daemon, until
from nsq_testing.daemon import Daemon
from nsq_testing.forkserver import ForkServer

from ._crash_model import (
    MODES,
    QUEUE,
    TOPICS,
    Channel,
    Model,
    Topic,
    body,
    generate,
)

LMSTFY_TOPIC = f"lmstfy.ns.{QUEUE}"
EXPECT = ("TCP", "HTTP", "LMSTFY", "LMSTFY_ADMIN")
#: how long a final drain may take to get every owed message (a slow, busy machine)
DRAIN_DEADLINE = 90.0
#: a pause in deliveries this long ends a partial consume (not a synchronisation: the model
#: accepts any number taken)
QUIET = 0.3


class Failure(AssertionError):
    pass


class Runner:
    """One sequence on one nsqd (restarted as the sequence says) in a temp directory."""

    def __init__(self, mode: str, ops: list[list[Any]], forks: ForkServer | None) -> None:
        self.mode, self.ops = mode, ops
        self.forks = forks
        self.model = Model(mode)
        self.tag = secrets.token_hex(3)
        self.seq = 0
        self.root = Path(tempfile.mkdtemp(prefix="nsq-model-"))
        self.data = self.root / "data"
        self.data.mkdir()
        self.daemon: Daemon | None = None
        self.outputs: list[str] = []
        self.token = ""
        self.jobs_reset = False
        #: one HTTP client for the whole sequence (making one costs tens of ms of CPU: the
        #: sequences' own cost, not nsqd's)
        self.web = httpx.Client(timeout=DEADLINE)

    # -- the process ----------------------------------------------------------------------

    def start(self) -> None:
        args = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                "--https-address=127.0.0.1:0", "--lmstfy-http-address=127.0.0.1:0",
                "--lmstfy-admin-http-address=127.0.0.1:0", f"--data-path={self.data}",
                "--max-bytes-per-file=8192", *MODES[self.mode]]
        self.daemon = start_daemon("nsqd", args, expect=EXPECT, forks=self.forks)
        if not self.token:
            r = self.admin("POST", f"/token/{'ns'}", params={"description": "model"})
            assert r.status_code in (200, 201), r.text
            self.token = r.json()["token"]

    def stop(self, sig: int) -> None:
        assert self.daemon is not None
        status = self.daemon.stop(sig)
        self.outputs.append(self.daemon.output())
        self.daemon = None
        if sig == signal.SIGTERM and status != 0:
            raise Failure(f"nsqd exited {status} on SIGTERM: {self.outputs[-1][-3000:]}")

    def close(self) -> None:
        if self.daemon is not None:
            self.stop(signal.SIGKILL)
        self.web.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def http(self) -> str:
        assert self.daemon is not None
        return f"http://{self.daemon.http_address}"

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.web.post(f"{self.http}{path}", **kwargs)

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        assert self.daemon is not None
        url = f"http://{self.daemon.addresses['LMSTFY_ADMIN']}{path}"
        return self.web.request(method, url, **kwargs)

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        assert self.daemon is not None
        url = f"http://{self.daemon.addresses['LMSTFY']}/api/ns/{QUEUE}{path}"
        return self.web.request(method, url, headers={"X-Token": self.token}, **kwargs)

    def stats(self) -> dict[str, dict[str, Any]]:
        """topic -> {"topic": its /stats object, "channels": name -> channel object}."""
        doc = self.web.get(f"{self.http}/stats",
                           params={"format": "json", "include_offsets": "true"}).json()
        return {t["topic_name"]: {"topic": t, "channels": {c["channel_name"]: c
                                                           for c in t["channels"]}}
                for t in doc["topics"] or []}

    def new_body(self, topic: str) -> bytes:
        self.seq += 1
        data = body(self.tag, topic, self.seq)
        self.model.published.add(data)
        return data

    # -- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        self.start()
        for i, op in enumerate(self.ops):
            try:
                await getattr(self, f"op_{op[0]}")(*op[1:])
            except Failure:
                raise
            except Exception as exc:
                said = self.daemon.output()[-3000:] if self.daemon is not None else ""
                raise Failure(f"operation {i} {op!r}: {exc!r}\nnsqd's last lines:\n{said}"
                              ) from exc
            if self.model.errors:
                raise Failure(f"after operation {i} {op!r}: {self.model.errors}")
        try:
            await self.verify()
        except Failure:
            raise
        except Exception as exc:
            said = self.daemon.output()[-3000:] if self.daemon is not None else ""
            raise Failure(f"at the end: {exc!r}\nnsqd's last lines:\n{said}") from exc
        self.stop(signal.SIGTERM)
        for output in self.outputs:
            for bad in ("Traceback", "FATAL"):
                if bad in output:
                    raise Failure(f"nsqd logged {bad}: {output[-3000:]}")

    def known(self, topic: str, channel: str | None = None) -> bool:
        t = self.model.topics.get(topic)
        return t is not None and (channel is None or channel in t.channels)

    # topics and channels

    async def op_topic(self, topic: str, retention: str) -> None:
        params = {"topic": topic} | ({"retention": retention} if retention else {})
        r = self.post("/topic/create", params=params)
        assert r.status_code == 200, r.text
        if topic not in self.model.topics:
            self.model.topics[topic] = Topic(retained=retention == "24h")
        elif retention == "24h" and self.model.topics[topic].retained:
            pass
        elif retention:
            self.model.topics[topic].retained = False

    async def op_channel(self, topic: str, channel: str) -> None:
        if topic not in self.model.topics:
            await self.op_topic(topic, "")
        r = self.post("/channel/create", params={"topic": topic, "channel": channel})
        assert r.status_code == 200, r.text
        self.model.make_channel(topic, channel)

    async def op_delete_topic(self, topic: str) -> None:
        if not self.known(topic):
            return
        r = self.post("/topic/delete", params={"topic": topic})
        assert r.status_code == 200, r.text
        del self.model.topics[topic]

    async def op_delete_channel(self, topic: str, channel: str) -> None:
        if not self.known(topic, channel):
            return
        r = self.post("/channel/delete", params={"topic": topic, "channel": channel})
        assert r.status_code == 200, r.text
        del self.model.topics[topic].channels[channel]

    async def op_empty_channel(self, topic: str, channel: str) -> None:
        if not self.known(topic, channel):
            return
        r = self.post("/channel/empty", params={"topic": topic, "channel": channel})
        assert r.status_code == 200, r.text
        self.model.topics[topic].channels[channel].owed.clear()

    async def op_empty_topic(self, topic: str) -> None:
        if not self.known(topic):
            return
        r = self.post("/topic/empty", params={"topic": topic})
        assert r.status_code == 200, r.text
        t = self.model.topics[topic]
        t.held.clear()
        for c in t.channels.values():
            c.owed -= t.paused_held
        t.paused_held.clear()

    async def op_pause(self, topic: str, channel: str, verb: str) -> None:
        if not self.known(topic, channel or None):
            return
        params = {"topic": topic} | ({"channel": channel} if channel else {})
        r = self.post(f"/{'channel' if channel else 'topic'}/{verb}", params=params)
        assert r.status_code == 200, r.text
        t = self.model.topics[topic]
        if channel:
            t.channels[channel].paused = verb == "pause"
        else:
            t.paused = verb == "pause"
            if not t.paused:
                t.paused_held.clear()

    async def op_retention(self, topic: str, retention: str) -> None:
        if not self.known(topic):
            return
        r = self.post("/topic/create", params={"topic": topic, "retention": retention})
        assert r.status_code == 200, r.text
        if retention == "0s":
            self.model.topics[topic].retained = False

    async def op_rewind(self, topic: str, channel: str) -> None:
        if not self.known(topic, channel):
            return
        # to the earliest: a time before everything (an offset read from /stats first could
        # be gone by the time the rewind comes, and is then refused)
        r = self.post("/channel/rewind",
                      params={"topic": topic, "channel": channel, "timestamp": "0"})
        assert r.status_code == 200, r.text
        t = self.model.topics[topic]
        c = t.channels[channel]
        if t.retained:  # everything it stored comes again
            c.owed |= t.stored
            c.finished -= t.stored
        else:
            c.reset = True

    async def op_rewind_past_end(self, topic: str, channel: str, offset: int) -> None:
        if not self.known(topic, channel):
            return
        r = self.post("/channel/rewind",
                      params={"topic": topic, "channel": channel, "offset": offset})
        if r.status_code != 400:
            self.model.errors.append(f"/channel/rewind offset={offset} past the end answered "
                                     f"{r.status_code} {r.text}, not 400")

    # publishing

    async def _tcp_publish(self, topic: str, command: bytes, bodies: list[bytes]) -> None:
        assert self.daemon is not None
        async with await WireClient.connect(self.daemon.tcp_address) as client:
            await client.send(command)
            assert await client.response() == b"OK"
        for data in bodies:
            self.model.acknowledged(topic, data)

    async def op_pub(self, topic: str) -> None:
        data = self.new_body(topic)
        await self._tcp_publish(topic, commands.pub(topic, data), [data])

    async def op_mpub(self, topic: str, n: int) -> None:
        bodies = [self.new_body(topic) for _ in range(n)]
        await self._tcp_publish(topic, commands.mpub(topic, bodies), bodies)

    async def op_dpub(self, topic: str, delay_ms: int) -> None:
        data = self.new_body(topic)
        await self._tcp_publish(topic, commands.dpub(topic, delay_ms, data), [data])

    async def op_hpub(self, topic: str) -> None:
        data = self.new_body(topic)
        r = self.post("/pub", params={"topic": topic}, content=data)
        assert r.status_code == 200, r.text
        self.model.acknowledged(topic, data)

    async def op_hmpub(self, topic: str, n: int) -> None:
        bodies = [self.new_body(topic) for _ in range(n)]
        r = self.post("/mpub", params={"topic": topic}, content=b"\n".join(bodies))
        assert r.status_code == 200, r.text
        for data in bodies:
            self.model.acknowledged(topic, data)

    # consuming

    async def _subscribe(self, topic: str, channel: str, rdy: int, **identify: Any
                         ) -> WireClient:
        assert self.daemon is not None
        client = await WireClient.connect(self.daemon.tcp_address)
        await client.identify(**identify)
        await client.subscribe(topic, channel, rdy)
        return client

    async def _take(self, client: WireClient, topic: str, channel: str, timeout: float
                    ) -> Any:
        """The next message (checked by the model), or None after ``timeout`` without one."""
        try:
            frame_type, data = await client.read_frame(timeout)
        except trio.TooSlowError:
            return None
        if frame_type != FrameType.MESSAGE:
            raise Failure(f"{topic}/{channel}: expected a message, got {frame_type} {data!r}")
        msg = decode_message(data)
        self.model.delivered(topic, channel, msg.body)
        return msg

    async def _barrier(self, client: WireClient) -> None:
        """Every command sent before on this connection handled (its FINs done)."""
        await client.send(commands.pub("model-barrier", b"x"))
        while True:  # (messages still on their way are passed over: not taken, not owed)
            frame_type, data = await client.read_frame()
            if frame_type == FrameType.RESPONSE:
                assert data == b"OK", data
                return
            if frame_type == FrameType.ERROR:
                raise Failure(f"barrier: {data!r}")

    async def op_consume(self, topic: str, channel: str, n: int, actions: str) -> None:
        if not self.known(topic, channel):
            return
        client = await self._subscribe(topic, channel, n)
        finished: list[bytes] = []
        try:
            for i in range(n):
                msg = await self._take(client, topic, channel, QUIET)
                if msg is None:
                    break
                if actions[i] == "f":
                    await client.send(commands.fin(msg.id))
                    finished.append(msg.body)
                elif actions[i] == "r":
                    await client.send(commands.req(msg.id, random.choice([0, 100])))
                elif actions[i] == "h":
                    await client.send(commands.touch(msg.id))
                    await client.send(commands.fin(msg.id))
                    finished.append(msg.body)
            await client.send(commands.rdy(0))
            await self._barrier(client)
        finally:
            await client.aclose()
        for data in finished:
            self.model.finished(topic, channel, data)

    async def op_timeout(self, topic: str, channel: str) -> None:
        """A message taken and never answered: it times out and comes again."""
        if not self.known(topic, channel):
            return
        before = self.stats()[topic]["channels"][channel]["timeout_count"]
        client = await self._subscribe(topic, channel, 1, msg_timeout=1000)
        try:
            if await self._take(client, topic, channel, QUIET) is not None:
                await until(lambda: self.stats()[topic]["channels"][channel]["timeout_count"]
                            > before, what="the message's timeout")
        finally:
            await client.aclose()

    # lmstfy

    async def op_lm_pub(self, n: int) -> None:
        for _ in range(n):
            data = self.new_body(LMSTFY_TOPIC)
            r = self.api("PUT", "", content=data, params={"tries": 3})
            assert r.status_code == 201, r.text
            self.model.jobs_owed.add(data)
            self.model.unstable.add(data)

    def _job_delivered(self, data: bytes) -> None:
        m = self.model
        if data not in m.published:
            m.errors.append(f"lmstfy: got {data!r}, never published")
        elif data in m.jobs_acked and not self.jobs_reset and (
                data not in m.jobs_acked_before_kill or self.mode == "sync-every=1"):
            m.errors.append(f"lmstfy: {data!r} acknowledged (204), delivered again")

    async def _lm_ack(self, job: dict[str, Any], data: bytes) -> None:
        r = self.api("DELETE", f"/job/{job['job_id']}")
        assert r.status_code == 204, r.text
        self.model.jobs_owed.discard(data)
        self.model.jobs_acked.add(data)
        self.model.unstable.add(data)

    async def op_lm_consume(self, n: int, then: str) -> None:
        for _ in range(n):
            r = self.api("GET", "", params={"ttr": 1, "timeout": 0})
            if r.status_code == 404:
                return
            assert r.status_code == 200, r.text
            job = r.json()
            data = base64.b64decode(job["data"])
            self._job_delivered(data)
            if then == "ack":
                await self._lm_ack(job, data)

    async def op_lm_respawn(self) -> None:
        r = self.api("PUT", "/deadletter", params={"limit": 1000})
        assert r.status_code == 200, r.text

    # restarts, crashes, damage

    async def op_restart(self) -> None:
        self.stop(signal.SIGTERM)
        self.model.clean_restart()
        self.start()
        self.reconcile()

    async def op_kill(self) -> None:
        self.stop(signal.SIGKILL)
        self.model.killed()
        self.start()
        self.reconcile()

    async def op_kill_writing(self, topic: str, n: int, k: int) -> None:
        """n PUBs pipelined; kill -9 once the first k are answered (the rest under way)."""
        assert self.daemon is not None
        bodies = [self.new_body(topic) for _ in range(n)]
        async with await WireClient.connect(self.daemon.tcp_address) as client:
            await client.send(b"".join(commands.pub(topic, data) for data in bodies))
            for data in bodies[:k]:
                assert await client.response() == b"OK"
                self.model.acknowledged(topic, data)
            self.stop(signal.SIGKILL)
        self.model.killed()
        self.start()
        self.reconcile()

    async def op_damage(self, kind: str, seed: int) -> None:
        """A clean stop, one damaged file, a start."""
        self.stop(signal.SIGTERM)
        self.model.clean_restart()
        rng = random.Random(seed)
        topics = self.data / "topics"
        if kind.startswith("seg"):
            files = sorted(p for p in topics.glob("*/*.log") if "~" not in str(p))
            if files:
                self.model.lost(damage_segment(rng.choice(files), kind, rng,
                                               self.model.published))
        else:
            files = sorted(p for p in topics.glob("*/*.cursor") if "~" not in str(p))
            if files:
                path = rng.choice(files)
                if kind == "journal_delete":
                    path.unlink()
                else:
                    raw = bytearray(path.read_bytes())
                    if raw:
                        raw[rng.randrange(len(raw))] ^= 0x5A
                        path.write_bytes(bytes(raw))
                self.cursor_reset(path.parent.name, path.name.removesuffix(".cursor"))
        self.start()
        self.reconcile()

    def cursor_reset(self, topic: str, channel: str) -> None:
        """A channel whose journal is gone or damaged may start again at the earliest."""
        if topic == LMSTFY_TOPIC:
            self.jobs_reset = True
        elif self.known(topic, channel):
            self.model.topics[topic].channels[channel].reset = True

    def reconcile(self) -> None:
        """After a start: what a lossy crash undid (topics, channels made since the last clean
        shutdown) leaves the model; what nsqd has and the model not (a deletion undone) joins
        it with anything allowed. With --sync-every=1 a channel made must still be there."""
        found = self.stats()
        durable = self.mode == "sync-every=1"
        for name in list(self.model.topics):
            t = self.model.topics[name]
            if name not in found:
                owed = t.held.union(*(c.owed for c in t.channels.values()))
                if durable and owed:
                    self.model.errors.append(f"topic {name} gone after a restart, owed "
                                             f"{sorted(owed)[:5]}")
                del self.model.topics[name]
                continue
            for cname in list(t.channels):
                if cname not in found[name]["channels"]:
                    if durable:
                        self.model.errors.append(f"channel {name}/{cname} gone after a restart")
                    del t.channels[cname]
        for name, info in found.items():
            if name not in TOPICS:
                continue
            t = self.model.topics.setdefault(name, Topic())
            # paused or not as nsqd.dat said (a deletion undone brings back the topic as it
            # was, paused perhaps)
            t.paused = info["topic"]["paused"]
            for cname, cinfo in info["channels"].items():
                if cname not in t.channels:
                    t.channels[cname] = Channel(reset=True)
                    t.held.clear()
                t.channels[cname].paused = cinfo["paused"]

    # -- the end: everything owed comes ------------------------------------------------------

    async def verify(self) -> None:
        for name, t in self.model.topics.items():
            if t.paused:
                await self.op_pause(name, "", "unpause")
            for cname, c in t.channels.items():
                if c.paused:
                    await self.op_pause(name, cname, "unpause")
        for name, t in self.model.topics.items():
            for cname in list(t.channels):
                await self.drain(name, cname)
        await self.drain_jobs()
        if self.model.errors:
            raise Failure(f"at the end: {self.model.errors}")

    def channel_empty(self, topic: str, channel: str) -> bool:
        c = self.stats()[topic]["channels"][channel]
        return bool(c["depth"] == c["in_flight_count"] == c["deferred_count"] == 0)

    async def drain(self, topic: str, channel: str) -> None:
        c = self.model.topics[topic].channels[channel]
        client = await self._subscribe(topic, channel, 50)
        deadline = time.monotonic() + DRAIN_DEADLINE
        try:
            while time.monotonic() < deadline:
                msg = await self._take(client, topic, channel, QUIET)
                if msg is not None:
                    await client.send(commands.fin(msg.id))
                    c.owed.discard(msg.body)
                    c.finished.add(msg.body)
                elif not c.owed and self.channel_empty(topic, channel):
                    return
                elif c.owed and self.channel_empty(topic, channel):
                    break  # nothing more will come
        finally:
            await client.aclose()
        self.model.errors.append(f"{topic}/{channel}: {len(c.owed)} acknowledged messages "
                                 f"never delivered, e.g. {sorted(c.owed)[:5]}")

    async def drain_jobs(self) -> None:
        m = self.model
        deadline = time.monotonic() + DRAIN_DEADLINE
        while time.monotonic() < deadline:
            r = self.api("GET", "", params={"ttr": 30, "timeout": 1})
            if r.status_code == 200:
                job = r.json()
                data = base64.b64decode(job["data"])
                self._job_delivered(data)
                await self._lm_ack(job, data)
                continue
            assert r.status_code == 404, r.text
            if not m.jobs_owed:
                return
            # owed jobs whose tries ran out are dead letters; none, and none in flight or
            # waiting: nothing more will come
            r = self.api("PUT", "/deadletter", params={"limit": 1000})
            assert r.status_code == 200, r.text
            # (a job whose time to run passed with no try left is a dead letter, counted by
            # /deadletter/size from that moment, before it is stored and can be respawned)
            dead = self.api("GET", "/deadletter/size").json()["size"]
            found = self.stats().get(LMSTFY_TOPIC, {"channels": {}})
            if r.json()["count"] == 0 and dead == 0 and all(
                    c["in_flight_count"] == c["deferred_count"] == c["depth"] == 0
                    for c in found["channels"].values()):
                break
        found = self.stats().get(LMSTFY_TOPIC, {"channels": {}})
        m.errors.append(f"lmstfy: {len(m.jobs_owed)} jobs published (201) never delivered, "
                        f"e.g. {sorted(m.jobs_owed)[:5]}; its channels: {found['channels']}")


def damage_segment(path: Path, kind: str, rng: random.Random, known: set[bytes]) -> set[bytes]:
    """Cut the last batch of a segment short, or flip a byte in one batch's records; the
    bodies of that batch (what may be lost)."""
    raw = path.read_bytes()
    batches = []
    pos = 8  # the magic
    while pos + 28 <= len(raw):
        (length,) = struct.unpack_from(">I", raw, pos)
        end = pos + 4 + length
        if end > len(raw):
            break
        batches.append((pos, end))
        pos = end
    if not batches:
        return set()
    if kind == "seg_truncate":
        start, end = batches[-1]
        cut = rng.randrange(start + 1, end)
        os.truncate(path, cut)
    else:
        start, end = rng.choice(batches)
        if end <= start + 28:
            return set()
        where = rng.randrange(start + 28, end)
        data = bytearray(raw)
        data[where] ^= 0x5A
        path.write_bytes(bytes(data))
    chunk = raw[start:end]
    return {b for b in known if b in chunk}


# -- the sequences ---------------------------------------------------------------------------


async def run_sequence(mode: str, ops: list[list[Any]], forks: ForkServer | None = None
                       ) -> str | None:
    """The failure's description, or None when the sequence passes. With ``forks``, each
    start of nsqd is a fork of that server (see ``forks``), else a new process."""
    runner = Runner(mode, ops, forks)
    try:
        await runner.run()
    except (Failure, TimeoutError, trio.TooSlowError, RuntimeError, EOFError) as exc:
        return str(exc)[:4000]
    finally:
        runner.close()
    return None


async def shrink(mode: str, ops: list[list[Any]], budget: float, forks: ForkServer | None
                 ) -> list[list[Any]]:
    """A shorter sequence that still fails (chunks removed while it fails, within
    ``budget`` seconds)."""
    deadline = time.monotonic() + budget
    n = 2
    while len(ops) >= 2 and time.monotonic() < deadline:
        size = max(1, len(ops) // n)
        for i in range(0, len(ops), size):
            candidate = ops[:i] + ops[i + size:]
            if time.monotonic() > deadline:
                break
            if await run_sequence(mode, candidate, forks) is not None:
                ops, n = candidate, max(n - 1, 2)
                break
        else:
            if size == 1:
                break
            n = min(len(ops), n * 2)
    return ops


async def check(mode: str, seed: int | None, ops: list[list[Any]], forks: ForkServer | None
                ) -> None:
    failure = await run_sequence(mode, ops, forks)
    if failure is None:
        return
    budget = float(os.environ.get("NSQ_MODEL_SHRINK", "300"))
    shrunk = await shrink(mode, ops, budget, forks) if budget > 0 else ops
    again = await run_sequence(mode, shrunk, forks) if shrunk is not ops else failure
    pytest.fail(f"mode {mode}, seed {seed}: {failure}\n"
                f"replay: NSQ_MODEL_MODE={mode} NSQ_MODEL_SEED={seed} or\n"
                f"NSQ_MODEL_MODE={mode} NSQ_MODEL_OPS='{json.dumps(shrunk)}'\n"
                f"(shrunk from {len(ops)} to {len(shrunk)} operations: {again})",
                pytrace=False)


LENGTH = int(os.environ.get("NSQ_MODEL_LENGTH", "30"))
#: the default suite's seeds for each mode (NSQ_MODEL_SEED replaces them)
DEFAULT_SEEDS = (1, 2)


def _seeds() -> list[int]:
    if "NSQ_MODEL_SEED" in os.environ:
        return [int(os.environ["NSQ_MODEL_SEED"])]
    return list(DEFAULT_SEEDS)


def _modes() -> list[str]:
    return [os.environ["NSQ_MODEL_MODE"]] if "NSQ_MODEL_MODE" in os.environ else list(MODES)


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer | None]:
    """The random sequences start nsqd hundreds of times: each start a fork of one process
    that imported nsqd already (``nsq_testing.forkserver``: the same ``main`` in a process of
    its own; only the interpreter's start and the imports, most of a sequence's CPU, are
    spared). NSQ_MODEL_FORK=0: a new process each time, as the regressions below do."""
    if os.environ.get("NSQ_MODEL_FORK") == "0":
        yield None
        return
    server = ForkServer("nsqd")
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("seed", _seeds())
async def test_random_sequences_lose_nothing(mode: str, seed: int, forks: ForkServer | None
                                             ) -> None:
    if "NSQ_MODEL_OPS" in os.environ:
        await check(mode, None, json.loads(os.environ["NSQ_MODEL_OPS"]), forks)
    else:
        await check(mode, seed, generate(seed, LENGTH), forks)


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
async def test_soak_thousands_of_sequences(mode: str, forks: ForkServer | None) -> None:
    count = int(os.environ.get("NSQ_MODEL_SOAK", "1000"))
    base = int(os.environ.get("NSQ_MODEL_BASE", str(random.randrange(1 << 30))))
    print(f"soak: mode {mode}, seeds {base}..{base + count - 1}", flush=True)
    failed: list[str] = []
    for seed in range(base, base + count):
        verdict = "ok"
        try:
            await check(mode, seed, generate(seed, LENGTH), forks)
        except pytest.fail.Exception as exc:
            failed.append(str(exc))
            verdict = f"FAILED\n{exc}"
        print(f"soak: mode {mode}, seed {seed}: {verdict}", flush=True)
    assert not failed, "\n\n".join(failed)


#: Sequences that found the defects of the storage's first version (docs/design/storage.md),
#: shrunk: each must pass from now on.
REGRESSIONS: dict[str, tuple[str, list[list[Any]]]] = {
    # a topic with no channel yet: its hold came back as the offset reservation after a kill
    "topic-without-channel-kill": ("sync-every=1", [
        ["topic", "t0", ""], ["mpub", "t0", 5], ["kill"], ["channel", "t0", "c0"]]),
    # /channel/create answered before the channel was on disk (seed 3, --sync-every=1)
    "channel-create-kill": ("sync-every=1", [
        ["pub", "t0"], ["channel", "t0", "c1"], ["kill"], ["mpub", "t0", 5]]),
    # a missing or damaged cursor journal: the channel started at the end (seed 1, in every
    # mode: the lmstfy queue's journal deleted)
    "journal-deleted": ("default", [
        ["channel", "t0", "c0"], ["mpub", "t0", 5], ["damage", "journal_delete", 0]]),
    "journal-damaged": ("default", [
        ["channel", "t0", "c0"], ["mpub", "t0", 5], ["damage", "journal_flip", 0]]),
    "lmstfy-journal-deleted": ("sync-every=1", [
        ["lm_pub", 3], ["restart"], ["damage", "journal_delete", 0], ["lm_pub", 2]]),
    # a rewind past the end was accepted, and what came after never reached the channel
    "rewind-past-end": ("mem-queue-size=0", [
        ["channel", "t0", "c0"], ["rewind_past_end", "t0", "c0", 2**63 - 1],
        ["mpub", "t0", 5], ["restart"], ["pub", "t0"]]),
    # a channel of a paused topic whose log had a crash's gap before the pause point: the
    # first SUB made the channel read past the pause point and nsqd exit (FATAL: an
    # IndexError in the channel's read; found by the soak, seen as "connection closed")
    "paused-topic-gap-sub": ("mem-queue-size=0", [
        ["empty_topic", "t1"], ["hpub", "t1"], ["pause", "t1", "", "pause"], ["lm_pub", 5],
        ["pause", "t1", "", "pause"], ["kill"], ["pub", "t1"], ["pause", "t0", "", "unpause"],
        ["pub", "t1"], ["channel", "t1", "c1"], ["lm_pub", 5], ["pub", "t1"], ["pub", "t0"],
        ["kill"], ["consume", "t1", "c1", 8, "lfflfhfl"], ["channel", "t1", "c1"]]),
    # a paused topic deleted, then a kill -9 that undid the deletion: the topic came back
    # paused, and the model, which took it for a new one, never unpaused it (a fault of the
    # model's, found by the soak)
    "deletion-undone-paused": ("mem-queue-size=0", [
        ["hmpub", "t1", 26], ["pause", "t1", "", "pause"], ["channel", "t1", "c1"],
        ["delete_topic", "t1"], ["kill"], ["mpub", "t1", 28]]),
    # a message finished ahead of one left waiting, a clean restart, then FINs of one at a
    # time: the finished one came again (a FIN moved the mark-delete position past the
    # ranges restored ahead of the read position, not the read position; found by the soak)
    "finished-ahead-restart": ("default", [
        ["channel", "t1", "c1"], ["hpub", "t1"], ["hpub", "t1"],
        ["consume", "t1", "c1", 2, "lf"], ["restart"], ["consume", "t1", "c1", 1, "f"]]),
}


@pytest.mark.parametrize("case", list(REGRESSIONS))
async def test_sequences_that_found_defects(case: str) -> None:
    mode, ops = REGRESSIONS[case]
    failure = await run_sequence(mode, ops)
    assert failure is None, f"{case} ({mode}): {failure}\nops: {json.dumps(ops)}"
