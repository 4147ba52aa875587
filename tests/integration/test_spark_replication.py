"""The nsq source reading a replicated topic by offset (docs/spark.md, docs/design/replication.md)
with real processes: etcd, nsqlookupd and three nsqd, the topic on all three.

- The planning alone, without Spark: the topic is one partition, ``*``, read from its leader
  first and then its in-sync replicas; with the leader killed (``kill -9``) a range is read
  from a follower, the same messages at the same offsets.
- A real local Spark streaming query: the topic is read once (not once per replica); and a
  query running while the leader is killed mid-stream holds every acknowledged message
  exactly once (a message the cluster did not acknowledge at most once), its offsets in
  Spark's checkpoint going on on the new leader.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import httpx
import nsq_spark
import pytest
from nsq_spark.options import parse
from nsq_testing import DEADLINE, Daemon, Etcd, wait_until

from .test_spark_stream import started, wait_progressing

pytestmark = pytest.mark.spark

#: a replicated topic's partition in the offsets and the ``nsqd`` column (docs/spark.md)
REPLICATED = "*"
#: the lease TTL (6 s) and a loaded machine: what a node's loss may take to be seen
FAILOVER = 60.0


@pytest.fixture(scope="module")
def spark():
    session = nsq_spark.local_session("nsq-spark-replication-tests")
    yield session
    session.stop()


@attrs.define
class Cluster:
    lookupd: Daemon
    nodes: list[Daemon]

    def node_id(self, daemon: Daemon) -> str:
        return f"127.0.0.1:{daemon.tcp_port}"

    def by_id(self, node: str) -> Daemon:
        (found,) = [d for d in self.nodes if self.node_id(d) == node]
        return found

    def replication(self, topic: str) -> dict | None:
        """The topic's ``replication`` object of /stats, from the first live node that has it."""
        for daemon in self.live():
            try:
                r = httpx.get(f"http://{daemon.http_address}/stats", timeout=DEADLINE,
                              params={"format": "json", "topic": topic})
            except httpx.TransportError:
                continue
            for entry in r.json().get("topics") or []:
                if entry["topic_name"] == topic and entry.get("replication"):
                    return entry["replication"]
        return None

    def live(self) -> list[Daemon]:
        return [d for d in self.nodes if d.process.poll() is None]

    def leader(self, topic: str) -> Daemon:
        state = self.replication(topic)
        assert state is not None and state["leader"] is not None, state
        return self.by_id(state["leader"])


def start_cluster(run_daemon: Callable[..., Daemon], etcd: Etcd, topic: str) -> Cluster:
    """etcd's cluster of three nsqd registered with one nsqlookupd, ``topic`` on all three,
    all in sync and all registered with nsqlookupd for it."""
    lookupd = run_daemon("nsqlookupd")
    nodes = [run_daemon("nsqd", "--broadcast-address=127.0.0.1",
                        f"--etcd-endpoints={etcd.endpoint}",
                        f"--lookupd-tcp-address={lookupd.tcp_address}", "--default-replicas=3",
                        "--min-insync-replicas=2", "--replica-lag-max=2s")
             for _ in range(3)]
    cluster = Cluster(lookupd, nodes)

    def created() -> bool:  # (until every node has joined: INVALID_REPLICAS)
        return httpx.post(f"http://{nodes[0].http_address}/topic/create", timeout=DEADLINE,
                          params={"topic": topic, "replicas": 3}).status_code == 200

    wait_until(created, timeout=FAILOVER, interval=0.2, what="the topic placed on three nodes")

    def in_sync() -> bool:
        state = cluster.replication(topic)
        return state is not None and state["leader"] is not None and len(state["isr"]) == 3

    wait_until(in_sync, timeout=FAILOVER, interval=0.2, what="three replicas in sync")

    def registered() -> bool:
        r = httpx.get(f"http://{lookupd.http_address}/lookup", params={"topic": topic},
                      timeout=DEADLINE)
        return r.status_code == 200 and len(r.json()["producers"]) == 3

    wait_until(registered, timeout=FAILOVER, interval=0.2, what="three producers in lookupd")
    return cluster


def clean(cluster: Cluster) -> None:
    """No bug logged (a traceback) by any node."""
    for daemon in cluster.nodes:
        assert "Traceback" not in daemon.output(), daemon.output()[-6000:]


@attrs.define
class Producer:
    """``count`` messages ``<topic>-<i>``, in MPUBs of ``per`` to the live nodes in turn, each
    body sent once: an ``OK`` makes its bodies acknowledged; a refusal or a connection lost
    before the answer leaves them unknown (they may be in the log, so at most once in the
    sink). A node that refuses the connection got nothing: the next one is asked."""

    cluster: Cluster
    topic: str
    count: int
    per: int = 10
    acked: list[bytes] = attrs.field(factory=list)
    unknown: list[bytes] = attrs.field(factory=list)
    sent: int = 0
    #: publishing pauses once this many were sent (until raised: the test's pace)
    limit: int = 0
    moved: threading.Condition = attrs.field(factory=threading.Condition)
    stopped: bool = False

    def hold_at(self, limit: int) -> None:
        with self.moved:
            self.limit = limit
            self.moved.notify_all()

    def stop(self) -> None:
        with self.moved:
            self.stopped = True
            self.moved.notify_all()

    def run(self) -> None:
        turn = 0
        with httpx.Client(timeout=DEADLINE) as http:
            while self.sent < self.count:
                with self.moved:
                    self.moved.wait_for(lambda: self.sent < self.limit or self.stopped)
                    if self.stopped:
                        return
                bodies = [f"{self.topic}-{i}".encode()
                          for i in range(self.sent, min(self.sent + self.per, self.count))]
                while True:
                    live = self.cluster.live()
                    daemon = live[turn % len(live)]
                    turn += 1
                    try:
                        r = http.post(f"http://{daemon.http_address}/mpub",
                                      params={"topic": self.topic}, content=b"\n".join(bodies))
                    except httpx.ConnectError:
                        continue  # nothing sent: another node
                    except httpx.TransportError:
                        self.unknown.extend(bodies)
                        break
                    (self.acked if r.status_code == 200 else self.unknown).extend(bodies)
                    break
                self.sent += len(bodies)


def collected(spark, topic: str, checkpoint: Path, sink: dict[int, list], **options: str):
    """A streaming query reading ``topic`` by offset through nsqlookupd into ``sink``,
    idempotent by batch id (a batch run again replaces its rows), as a file sink is."""
    def write(batch, batch_id: int) -> None:
        sink[batch_id] = batch.select("body", "nsqd", "offset", "topic").collect()

    def start(checkpoint: Path):
        reader = (spark.readStream.format("nsq").option("topic", topic)
                  .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300"))
        for key, value in options.items():
            reader = reader.option(key, value)
        return (reader.load().writeStream.foreachBatch(write)
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="200 milliseconds").start())

    return started(start, checkpoint)


def rows_of(sink: dict[int, list]) -> list:
    return [row for batch in list(sink.values()) for row in batch]


def caught_up(query) -> bool:
    """Whether the query's last batch, committed, ended at the latest offsets it had seen, on
    every partition (whatever its partitions are)."""
    progress = query.lastProgress or {}
    for source in progress.get("sources") or []:
        end = json.loads(source.get("endOffset") or "{}")
        latest = json.loads(source.get("latestOffset") or "{}")
        partitions = {(t, k): n for t, per in latest.items() if isinstance(per, dict)
                      for k, n in per.items()}
        if not partitions or any((end.get(t) or {}).get(k) != n
                                 for (t, k), n in partitions.items()):
            return False
    return bool(progress)


def test_a_replicated_topic_is_one_partition_read_from_any_in_sync_replica(run_daemon, etcd):
    from nsq_spark import logread, replicas

    topic = "planned"
    cluster = start_cluster(run_daemon, etcd, topic)
    bodies = [f"{topic}-{i}".encode() for i in range(500)]
    r = httpx.post(f"http://{cluster.nodes[1].http_address}/mpub", params={"topic": topic},
                   content=b"\n".join(bodies), timeout=DEADLINE)
    assert r.status_code == 200, r.text
    options = parse({"lookupd": cluster.lookupd.http_address, "topic": topic, "timeout": "120s"})
    leader = cluster.leader(topic)
    found = replicas.partitions(options)
    assert list(found) == [(topic, REPLICATED)]
    readers = found[(topic, REPLICATED)]
    assert readers[0] == leader.http_address
    assert sorted(readers) == sorted(d.http_address for d in cluster.nodes)
    wait_until(lambda: logread.bounds(options, readers, topic) == logread.Bounds(0, 500, readers),
               what="every record below the HW")
    # named by their HTTP addresses rather than through nsqlookupd: the same one partition
    direct = parse({"nsqdHttp": ",".join(d.http_address for d in cluster.nodes), "topic": topic})
    assert replicas.partitions(direct) == found

    leader.kill()  # kill -9: the first of the readers refuses every connection now
    part = logread.LogRange(topic, REPLICATED, 100, 500, readers=readers)
    read = [(o, bytes(b)) for batch in logread.read_range(options, part)
            for o, b in zip(batch.column("offset").to_pylist(), batch.column("body").to_pylist(),
                            strict=True)]
    assert read == [(i, bodies[i]) for i in range(100, 500)]
    assert {str(n) for batch in logread.read_range(options, part)
            for n in batch.column("nsqd").to_pylist()} == {REPLICATED}
    # the killed leader leaves nsqlookupd; the partition is still the one topic, at once
    wait_until(lambda: len(replicas.partitions(options)[(topic, REPLICATED)]) == 2,
               what="the partition read from the two live replicas")
    clean(cluster)


def test_a_replicated_topic_is_read_once_not_once_per_replica(spark, run_daemon, etcd, tmp_path):
    topic = "once"
    cluster = start_cluster(run_daemon, etcd, topic)
    bodies = [f"{topic}-{i}".encode() for i in range(1000)]
    for i in range(0, len(bodies), 100):
        r = httpx.post(f"http://{cluster.nodes[i // 100 % 3].http_address}/mpub",
                       params={"topic": topic}, content=b"\n".join(bodies[i:i + 100]),
                       timeout=DEADLINE)
        assert r.status_code == 200, r.text
    sink: dict[int, list] = {}
    query, _ = collected(spark, topic, tmp_path, sink, lookupd=cluster.lookupd.http_address)
    try:
        wait_progressing(lambda: len(rows_of(sink)) >= len(bodies) and caught_up(query),
                         lambda: (len(rows_of(sink)), query.status["message"]),
                         "the query caught up past every message",
                         details=lambda: f"{query.exception()}\n{query.lastProgress}")
        assert query.exception() is None
    finally:
        query.stop()
    rows = rows_of(sink)
    counts = collections.Counter(bytes(r.body) for r in rows)
    assert sum(counts.values()) == len(bodies), (
        f"{sum(counts.values())} rows for {len(bodies)} messages "
        f"({len({r.nsqd for r in rows})} partitions: {sorted({r.nsqd for r in rows})})")
    assert counts == collections.Counter(bodies)
    assert sorted(r.offset for r in rows) == list(range(len(bodies)))
    assert {(r.topic, r.nsqd) for r in rows} == {(topic, REPLICATED)}
    batch = (spark.read.format("nsq").option("lookupd", cluster.lookupd.http_address)
             .option("topic", topic).load().select("body", "offset").collect())
    assert sorted((r.offset, bytes(r.body)) for r in batch) == list(enumerate(bodies))
    clean(cluster)


@pytest.fixture
def producing() -> Iterator[Callable[[Producer], threading.Thread]]:
    """Starts a producer in a thread of its own; at the test's end, passed or failed, each
    is stopped and its thread joined (before the cluster stops)."""
    started_: list[tuple[Producer, threading.Thread]] = []

    def start(producer: Producer) -> threading.Thread:
        thread = threading.Thread(target=producer.run, daemon=True)
        started_.append((producer, thread))
        thread.start()
        return thread

    yield start
    for producer, thread in started_:
        producer.stop()
        thread.join(timeout=FAILOVER)


def test_a_query_across_the_leaders_kill_holds_every_acknowledged_message_once(
        spark, run_daemon, etcd, tmp_path, producing):
    """The leader is killed (``kill -9``) while the query reads and the producer publishes:
    the query goes on by itself on the new leader from the offsets in its checkpoint, and
    at the end every acknowledged message is in the sink exactly once, and nothing else is
    there more than once."""
    topic = "failover"
    cluster = start_cluster(run_daemon, etcd, topic)
    producer = Producer(cluster, topic, 3000)
    producer.hold_at(1000)
    thread = producing(producer)
    sink: dict[int, list] = {}
    query, _ = collected(spark, topic, tmp_path, sink, lookupd=cluster.lookupd.http_address,
                         timeout="120s")

    def progress() -> tuple[int, int, str]:
        return len(rows_of(sink)), producer.sent, query.status["message"]

    def details() -> str:
        return f"{query.exception()}\n{query.lastProgress}"

    try:
        wait_progressing(lambda: producer.sent >= 1000 and len(rows_of(sink)) >= 300, progress,
                         "the query reading mid-stream", details=details)
        old = cluster.leader(topic)
        producer.hold_at(2000)
        wait_progressing(lambda: producer.sent >= 1200, progress, "publishing on")
        old.kill()  # mid-stream: the query is reading, the producer publishing
        sent_at_kill = producer.sent
        wait_until(lambda: (cluster.replication(topic) or {}).get("leader") not in (
            None, cluster.node_id(old)), timeout=FAILOVER, interval=0.2, what="a new leader")
        producer.hold_at(3000)
        wait_progressing(lambda: producer.sent >= 3000, progress, "every message sent",
                         details=details)
        thread.join(timeout=FAILOVER)
        wait_progressing(lambda: set(producer.acked) <= {bytes(r.body) for r in rows_of(sink)}
                         and caught_up(query), progress,
                         "every acknowledged message in the sink", details=details)
        assert query.isActive and query.exception() is None, details()
    finally:
        query.stop()
    rows = rows_of(sink)
    counts = collections.Counter(bytes(r.body) for r in rows)
    twice = {body: n for body, n in counts.items() if n > 1}
    assert not twice, f"{len(twice)} messages more than once: {sorted(twice)[:5]}"
    missing = set(producer.acked) - set(counts)
    assert not missing, f"{len(missing)} acknowledged messages missing: {sorted(missing)[:5]}"
    assert set(counts) <= set(producer.acked) | set(producer.unknown)
    offsets = collections.Counter(r.offset for r in rows)
    assert max(offsets.values()) == 1
    assert {r.nsqd for r in rows} == {REPLICATED}
    # the new leader took publishes, and the query read them from it
    assert any(int(body.rsplit(b"-", 1)[1]) >= sent_at_kill for body in producer.acked)
    clean(cluster)
    print(f"acknowledged {len(producer.acked)}, unknown {len(producer.unknown)}, "
          f"of which in the sink {len(set(producer.unknown) & set(counts))}")
