"""The source's pieces that need no Spark session: options, the batch log and its columns,
the Arrow rows, Spark's checkpoint files."""

from __future__ import annotations

import base64
import json
import pickle
from datetime import UTC, datetime

import pytest
from nsq_spark.batchlog import Batch, BatchLog, Entry, Messages, Part
from nsq_spark.errors import BatchLogError, NSQSparkError, OptionError
from nsq_spark.options import LATEST, Position, parse
from nsq_spark.positions import behind, flat, nest, prorate, ranges
from nsq_spark.pull import id_set
from nsq_spark.rows import ARROW_SCHEMA, messages_batch
from nsq_spark.sparklog import committed_end

BASE = {"topic": "clicks", "channel": "spark", "lookupd": "127.0.0.1:4161"}


def test_options_are_case_insensitive_and_typed():
    o = parse({**BASE, "maxMessagesPerTrigger": "500", "MSGTIMEOUT": "90s", "idleTimeout": "250",
               "nsqd": "a:1, b:2", "checkpointLocation": "/ck", "timeout": "5s"})
    assert (o.max_per_trigger, o.msg_timeout, o.idle_timeout, o.timeout) == (500, 90.0, 0.25, 5.0)
    assert o.nsqd == ("a:1", "b:2") and o.lookupd == ("127.0.0.1:4161",)
    assert o.checkpoint == "/ck" and o.transport == "auto" and o.max_in_flight == 10_000
    assert not o.by_offset and o.topics == ("clicks",)


def test_offset_read_options():
    o = parse({"lookupd": "l:1", "topics": "a, b", "startingOffsets": '{"a": {"n:1": 5}}',
               "endingTimestamp": "1700000000000", "maxOffsetsPerTrigger": "100",
               "minOffsetsPerTrigger": "10", "maxTriggerDelay": "30s", "failOnDataLoss": "False",
               "minPartitions": "4", "maxRecordsPerPartition": "1000"})
    assert o.by_offset and o.topics == ("a", "b") and o.timeout == 30.0
    assert o.starting == Position("offsets", offsets={"a": {"n:1": 5}})
    assert o.ending == Position("timestamp", timestamp=1_700_000_000_000)
    assert (o.max_per_trigger, o.min_per_trigger, o.max_trigger_delay) == (100, 10, 30.0)
    assert (o.fail_on_data_loss, o.min_partitions, o.max_records_per_partition) == (False, 4, 1000)
    assert parse({"lookupd": "l:1", "topicPattern": "clicks_.*"}).topic_pattern == "clicks_.*"
    assert parse({"lookupd": "l:1", "topic": "t", "startingOffsets": "LATEST"}).starting == \
        Position("latest")
    o.check_read()
    with pytest.raises(OptionError, match="for batch reads"):
        o.check_stream()


def test_client_options_in_either_spelling():
    o = parse({**BASE, "tlsRootCaFile": "/ca.pem", "tls": "true", "auth_secret": "s3cret",
               "snappy": "true"})
    config = o.client_config(max_in_flight=7)
    assert config.tls_root_ca_file == "/ca.pem" and config.tls_v1 and config.snappy
    assert config.auth_secret == "s3cret" and config.max_in_flight == 7


@pytest.mark.parametrize(("options", "message"), [
    ({"topic": "bad topic", "channel": "c", "lookupd": "x:1"}, "invalid topic name"),
    ({"topic": "t", "channel": "c"}, '"lookupd"'),
    ({**BASE, "maxMessagesPerTrigger": "many"}, "maxMessagesPerTrigger must be a whole number"),
    ({**BASE, "maxMessagesPerTrigger": "0"}, "at least 1"),
    ({**BASE, "msgTimeout": "soon"}, "msgTimeout must be a duration"),
    ({**BASE, "transport": "udp"}, "option transport"),
    ({**BASE, "snappy": "true", "deflate": "true"}, "both deflate and snappy"),
    ({**BASE, "subscribe": "clicks"}, r"unknown option subscribe .*the valid options are: lookupd"),
    ({**BASE, "kafka.bootstrap.servers": "x"}, "unknown option kafka.bootstrap.servers"),
    ({**BASE, "startingOffsets": "earliest"}, "startingOffsets reads a topic by offset"),
    ({"lookupd": "l:1", "topic": "t", "maxInFlight": "5"}, "maxInFlight applies to channel"),
    ({"lookupd": "l:1", "topic": "t", "topics": "u"}, "only one of the options topic"),
    ({"lookupd": "l:1", "topicPattern": "("}, "not a regular expression"),
    ({"lookupd": "l:1", "topic": "t", "startingOffsets": "soon"}, "must be JSON"),
    ({"lookupd": "l:1", "topic": "t", "startingOffsets": '{"t": {"n:1": -3}}'}, "at least 0"),
    ({"lookupd": "l:1", "topic": "t", "startingOffsets": '{"t": 5}'}, "needs an object"),
    ({"lookupd": "l:1", "topic": "t", "startingTimestamp": "today"}, "milliseconds"),
    ({"lookupd": "l:1", "topic": "t", "failOnDataLoss": "maybe"}, "true or false"),
    ({"lookupd": "l:1", "topic": "t", "maxOffsetsPerTrigger": "5", "maxMessagesPerTrigger": "5"},
     "another name"),
    ({"lookupd": "l:1", "topic": "t", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"},
     "above maxOffsetsPerTrigger"),
    ({"lookupd": "l:1", "topic": "t", "startingOffsetsByTimestampStrategy": "never"},
     "error or latest"),
    ({**BASE, "checkpointLocation": "s3a://bucket/ck"}, "local path"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(OptionError, match=message) as info:
        parse(options)
    assert isinstance(info.value, NSQSparkError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(("options", "message"), [
    ({"lookupd": "x:1"}, 'reading needs option "topic"'),
    ({"nsqd": "x:1", "topic": "t"}, "reading a topic by offset uses nsqd's HTTP API"),
    ({"lookupd": "x:1", "topic": "t", "batchSize": "5"}, "option of the sink"),
])
def test_what_a_read_needs_is_checked_with_its_schema(options, message):
    with pytest.raises(OptionError, match=message):
        parse(options).check_read()


def test_batch_reads_refuse_kafkas_way():
    with pytest.raises(OptionError, match="can't be latest"):
        parse({"lookupd": "l:1", "topic": "t", "startingOffsets": "latest"}).check_batch()
    with pytest.raises(OptionError, match="can't be latest"):
        parse({"lookupd": "l:1", "topic": "t",
               "startingOffsets": '{"t": {"n:1": -1}}'}).check_batch()
    with pytest.raises(OptionError, match="can't be earliest"):
        parse({"lookupd": "l:1", "topic": "t", "endingOffsets": "earliest"}).check_batch()


def test_writing_needs_no_channel_nor_topic():
    o = parse({"nsqd": "127.0.0.1:4150", "checkpointLocation": "s3a://bucket/ck"})
    assert o.topic_column and o.channel is None


def test_positions_are_nested_sorted_and_prorated():
    offsets = {"b": {"n:2": 5, "n:1": 7}, "a": {"n:1": 1}}
    assert list(nest(flat(offsets))) == ["a", "b"]
    assert list(nest(flat(offsets))["b"]) == ["n:1", "n:2"]
    start = {("t", "x"): 0, ("t", "y"): 100, ("t", "z"): 50}
    end = {("t", "x"): 900, ("t", "y"): 200, ("t", "z"): 50}
    assert prorate(100, start, end) == {("t", "x"): 90, ("t", "y"): 110, ("t", "z"): 50}
    assert prorate(5000, start, end) == end
    assert prorate(1, {("t", "x"): 0, ("t", "y"): 0}, {("t", "x"): 10, ("t", "y"): 10}) == {
        ("t", "x"): 1, ("t", "y"): 1}  # none starved
    assert behind({("t", "x"): 10, ("t", "y"): 30}, {("t", "x"): 10, ("t", "y"): 10}) == (0, 10.0, 20)
    assert behind({}, {}) is None


def test_ranges_of_a_batch():
    earliest = {("t", "new"): 40, ("t", "x"): 0}
    parts = ranges({("t", "x"): 10, ("t", "gone"): 5, ("t", "late"): LATEST},
                   {("t", "x"): 30, ("t", "gone"): 5, ("t", "late"): 99, ("t", "new"): 45},
                   earliest)
    assert [(p.nsqd, p.start, p.end, p.from_earliest) for p in parts] == [
        ("new", 40, 45, True), ("x", 10, 30, False)]
    assert [(p.start, p.end) for p in ranges({("t", "x"): 0}, {("t", "x"): 10}, {},
                                             max_records=4)] == [(0, 3), (3, 6), (6, 10)]
    split = ranges({("t", "x"): 0, ("t", "y"): 0}, {("t", "x"): 100, ("t", "y"): 10}, {},
                   min_partitions=4)
    assert [(p.nsqd, p.start, p.end) for p in split] == [
        ("x", 0, 33), ("x", 33, 66), ("x", 66, 100), ("y", 0, 10)]
    assert ranges({("t", "x"): 50}, {("t", "x"): 20}, {}) == []  # the log went back


def entry(n: int, nsqd: str = "127.0.0.1:4150") -> Entry:
    return Entry(nsqd, b"%016x" % n, 1 + n % 3, 1_700_000_000_000_000_000 + n, b"\x00body%d" % n)


def messages(numbers, nsqd: str = "127.0.0.1:4150") -> Messages:
    return Messages.of_entries([entry(n, nsqd) for n in numbers])


def test_messages_columns_split_and_keys():
    mixed = Messages.of_entries([entry(1), entry(2, "b:1"), entry(3), entry(4, "b:1"), entry(5)])
    assert mixed.addresses == ("127.0.0.1:4150", "b:1") and list(mixed.nsqd) == [0, 1, 0, 1, 0]
    assert mixed.entries() == [entry(1), entry(2, "b:1"), entry(3), entry(4, "b:1"), entry(5)]
    assert mixed.key_list() == [e.key for e in mixed.entries()]
    pieces = mixed.split(2)
    assert [len(p) for p in pieces] == [2, 3]
    assert [e for p in pieces for e in p.entries()] == mixed.entries()
    assert len(messages(range(3)).split(10)) == 3 and len(Messages.empty()) == 0
    assert pickle.loads(pickle.dumps(mixed)) == mixed
    with pytest.raises(ValueError, match="16 bytes"):
        Messages.build("a:1", [b"short"], [1], [1], [b"x"])


def test_messages_batch_is_the_rows_of_the_messages():
    rows = messages_batch(Messages.of_entries([entry(1), entry(2, "b:1"), entry(3)]), "t", "c")
    assert rows.schema == ARROW_SCHEMA
    assert rows.to_pylist() == [
        {"id": e.id.decode(), "body": e.body, "value": e.body,
         "timestamp": datetime.fromtimestamp(e.timestamp // 1000 / 1e6, UTC),
         "attempts": e.attempts, "nsqd": e.nsqd, "topic": "t", "offset": None, "channel": "c"}
        for e in [entry(1), entry(2, "b:1"), entry(3)]]
    one = messages_batch(messages(range(2000, 2100)).split(3)[1], "t", "c")
    assert one.column("id").to_pylist() == [f"{n:016x}" for n in range(2033, 2066)]
    assert one.column("body").to_pylist() == [b"\x00body%d" % n for n in range(2033, 2066)]
    assert set(one.column("nsqd").to_pylist()) == {"127.0.0.1:4150"}
    assert messages_batch(Messages.empty(), "t", "c").num_rows == 0


def test_batch_log_round_trip_commit_and_prune(tmp_path):
    log = BatchLog.under_checkpoint(f"file://{tmp_path}")
    assert log.directory == tmp_path / "sources" / "nsq"
    for end in range(10, 60, 10):
        log.write(Batch(end - 10, end, messages(range(end - 10, end))))
    assert log.ends() == [10, 20, 30, 40, 50]
    assert log.read(30) == Batch(20, 30, messages(range(20, 30)))
    assert log.read(30).messages.entries() == [entry(i) for i in range(20, 30)]
    assert log.read(35) is None
    small = BatchLog(log.directory, keep=2)
    small.commit(40)
    assert small.committed() == 40 and small.ends() == [30, 40, 50]
    assert [b.end for b in small.discard_after(40)] == [50] and small.ends() == [30, 40]
    assert not list(log.directory.glob("*.tmp"))


def test_batch_log_layout(tmp_path):
    log = BatchLog(tmp_path)
    log.write(Batch(0, 2, Messages.of_entries([entry(7), entry(8, "b:1")])))
    data = (tmp_path / f"{2:020d}.batch").read_bytes()
    assert data[:5] == b"NSQB\x01"
    length = int.from_bytes(data[5:9], "big")
    header = json.loads(data[9:9 + length])
    assert header == {"start": 0, "end": 2, "parts": [], "count": 2,
                      "nsqd": ["127.0.0.1:4150", "b:1"]}
    columns = data[9 + length:]
    e = entry(7)
    assert columns[:8] == e.timestamp.to_bytes(8, "little")
    assert columns[16:18] == e.attempts.to_bytes(2, "little")
    assert columns[20:24] == b"\x00\x00\x01\x00"  # nsqd indexes
    assert columns[24:28] == len(e.body).to_bytes(4, "little")
    assert columns[32:64] == b"%016x%016x" % (7, 8)
    assert columns[64:] == entry(7).body + entry(8).body
    (tmp_path / f"{4:020d}.batch").write_bytes(data[:-1])
    with pytest.raises(BatchLogError, match="truncated"):
        log.read(4)


def test_batch_log_reads_the_json_files_before_it(tmp_path):
    old = {"start": 0, "end": 2, "parts": [],
           "messages": [["127.0.0.1:4150", f"{n:016x}", 1 + n % 3, 1_700_000_000_000_000_000 + n,
                         base64.b64encode(b"\x00body%d" % n).decode()] for n in (1, 2)]}
    (tmp_path / f"{2:020d}.batch").write_text(json.dumps(old))
    assert BatchLog(tmp_path).read(2) == Batch(0, 2, messages([1, 2]))


def test_batch_log_parts(tmp_path):
    log = BatchLog(tmp_path)
    parts = [Part("127.0.0.1:4151", "127.0.0.1:4150", 3), Part("127.0.0.1:4251", "127.0.0.1:4250", 2)]
    batch = Batch(0, 5, parts=parts)
    log.write(batch)
    assert log.read(5) == batch and log.pulled(batch) == []
    log.write_part(5, 1, messages([1, 2], "127.0.0.1:4250"))
    assert log.read_part(5, 1) == messages([1, 2], "127.0.0.1:4250")
    assert log.read_part(5, 0) is None
    assert log.pulled(batch) == [(parts[1], messages([1, 2], "127.0.0.1:4250"))]
    log.write_part(5, 0, Messages.empty())
    assert log.read_part(5, 0) == Messages.empty()
    log.commit(5)
    BatchLog(tmp_path, keep=0).commit(5)
    assert list(tmp_path.glob("*.part-*")) == [] and log.ends() == []


def test_pull_partition_id_sets():
    assert id_set(b"%016x%016x" % (1, 2)) == {b"%016x" % 1, b"%016x" % 2} and id_set(b"") == set()


def write_offsets(root, batch, *lines):
    (root / "offsets").mkdir(exist_ok=True)
    (root / "offsets" / str(batch)).write_text("\n".join(["v1", "{}", *lines]) + "\n")


def test_committed_end_reads_sparks_own_logs(tmp_path):
    assert committed_end(str(tmp_path), "clicks", "spark") is None
    ours = json.dumps({"offset": 700, "topic": "clicks", "channel": "spark"})
    other = json.dumps({"offset": 5, "topic": "other", "channel": "spark"})
    write_offsets(tmp_path, 0, other, ours)
    write_offsets(tmp_path, 1, other, json.dumps({"offset": 900, "topic": "clicks",
                                                   "channel": "spark"}))
    (tmp_path / "commits").mkdir()
    assert committed_end(str(tmp_path), "clicks", "spark") is None  # nothing committed yet
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    (tmp_path / "commits" / ".0.crc").write_text("")
    assert committed_end(f"file:{tmp_path}", "clicks", "spark") == 700
    (tmp_path / "commits" / "1").write_text("v1\n{}\n")
    assert committed_end(str(tmp_path), "clicks", "spark") == 900
    assert committed_end(str(tmp_path), "clicks", "elsewhere") is None


class FakeTime:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_a_call_rides_out_failures_with_a_growing_pause(caplog):
    import httpx
    from nsq_spark.retry import retrying

    clock, failures = FakeTime(), [httpx.ConnectError("refused")] * 5

    def attempt() -> str:
        if failures:
            raise failures.pop()
        return "answer"

    assert retrying(attempt, "nsqd a:1 (GET /x)", 30.0, sleep=clock.sleep,
                    clock=lambda: clock.now) == "answer"
    assert clock.pauses == [0.1, 0.2, 0.4, 0.8, 1.6]
    logged = [r.getMessage() for r in caplog.records]
    assert any("retrying for up to 30 s" in m for m in logged)
    assert any("answering again after 3.1 s" in m for m in logged)


def test_a_call_failing_past_the_timeout_names_the_address():
    import httpx
    from nsq_spark.errors import UnreachableError
    from nsq_spark.retry import retrying

    clock = FakeTime()

    def attempt() -> str:
        raise httpx.ConnectError("refused")

    with pytest.raises(UnreachableError, match=r"nsqd a:1 \(GET /x\): no answer for 5 s .*"
                                               "ConnectError: refused") as info:
        retrying(attempt, "nsqd a:1 (GET /x)", 5.0, sleep=clock.sleep, clock=lambda: clock.now)
    assert isinstance(info.value, ConnectionError) and isinstance(info.value, NSQSparkError)
    assert clock.pauses == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 1.9])  # up to the timeout


def planner(monkeypatch, bounds, **options):
    """An offset stream whose nsqd bounds are ``bounds`` (the planning alone: the reads
    against a real nsqd are tests/integration/test_spark_stream.py's)."""
    from nsq_spark import offset_source
    from nsq_spark.logread import Bounds

    monkeypatch.setattr(offset_source, "current",
                        lambda _: {key: Bounds(*b) for key, b in bounds.items()})
    return offset_source.OffsetStreamReader(parse({"nsqdHttp": "n:1", "topic": "t", **options}))


def test_planning_a_stream_by_offset(monkeypatch):
    from nsq_spark import offset_source
    from nsq_spark.logread import Bounds
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    reader = planner(monkeypatch, {("t", "a"): (0, 900), ("t", "b"): (0, 100)})
    assert reader.initialOffset() == {"t": {"a": LATEST, "b": LATEST}}  # Kafka's default
    # the first batch of a read from the latest ends where the latest is, and reads nothing
    first = reader.latestOffset({"t": {"a": LATEST, "b": LATEST}}, ReadAllAvailable())
    assert first == {"t": {"a": 900, "b": 100}}
    assert reader.partitions({"t": {"a": LATEST, "b": LATEST}}, first) == []
    capped = reader.latestOffset({"t": {"a": 0, "b": 0}}, ReadMaxRows(100))
    assert capped == {"t": {"a": 90, "b": 10}}
    report = reader.reportLatestOffset()
    assert report == {"t": {"a": 900, "b": 100}, "minOffsetsBehindLatest": 90,
                      "avgOffsetsBehindLatest": 450.0, "maxOffsetsBehindLatest": 810}
    reader.prepareForTriggerAvailableNow()
    monkeypatch.setattr(offset_source, "current", lambda _: {
        ("t", "a"): Bounds(0, 5000), ("t", "b"): Bounds(0, 100), ("t", "new"): Bounds(0, 10)})
    # what came after AvailableNow began is not read, nor a partition new since
    assert reader.latestOffset({"t": {"a": 0, "b": 0}}, ReadAllAvailable()) == {
        "t": {"a": 900, "b": 100}}
    assert reader.latestOffset({"t": {"a": 900, "b": 100}}, ReadAllAvailable()) == {
        "t": {"a": 900, "b": 100}}  # the same as its start: the query ends
    waiting = planner(monkeypatch, {("t", "a"): (0, 10)}, minOffsetsPerTrigger="50",
                      maxTriggerDelay="1h")
    # a machine booted a minute ago: the monotonic clock is young, the first batch still at once
    monkeypatch.setattr(offset_source, "clock", lambda: 60.0)
    assert waiting.latestOffset({"t": {"a": 0}}, ReadMinRows(50)) == {"t": {"a": 10}}  # first
    assert waiting.latestOffset({"t": {"a": 10}}, ReadMinRows(50)) == {"t": {"a": 10}}  # waits


def test_a_log_that_went_back_is_data_loss(monkeypatch):
    from nsq_spark.errors import DataLossError
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    reader = planner(monkeypatch, {("t", "a"): (0, 20)})
    with pytest.raises(DataLossError, match="now ends at 19, before offset 50"):
        reader.latestOffset({"t": {"a": 50}}, ReadAllAvailable())
    lenient = planner(monkeypatch, {("t", "a"): (0, 20)}, failOnDataLoss="false")
    end = lenient.latestOffset({"t": {"a": 50}}, ReadAllAvailable())
    assert end == {"t": {"a": 20}}  # on from where the log ends now, as Kafka's source
    assert lenient.partitions({"t": {"a": 50}}, end) == []


def test_a_replicated_topic_is_asked_of_its_replicas_in_turn(caplog):
    """retry.first_of: a replica down, answering 5xx or not holding the offset yet passes
    the call to the next; a round where none answers is tried again; every one saying it
    does not have the topic is the answer."""
    import httpx
    from nsq_spark.errors import UnreachableError
    from nsq_spark.retry import NotYet, first_of

    clock = FakeTime()
    asked: list[str] = []
    behind = {"b": 2}  # rounds in which b's high watermark is still behind

    def attempt(address: str) -> str | None:
        asked.append(address)
        if address == "a":
            raise httpx.ConnectError("refused")
        if behind["b"]:
            behind["b"] -= 1
            raise NotYet("not past 10 yet")
        return f"from {address}"

    timing = {"sleep": clock.sleep, "clock": lambda: clock.now}
    caplog.set_level("INFO", logger="nsq_spark")
    assert first_of(["a", "b"], attempt, who="nsqd", timeout=30, **timing) == "from b"
    assert asked == ["a", "b", "a", "b", "a", "b"] and clock.pauses == [0.1, 0.2]
    assert any("a: ConnectError: refused; asked the next" in m for m in caplog.messages)
    assert any("b: not past 10 yet" in m for m in caplog.messages)
    assert first_of(["a", "c"], lambda a: None, who="nsqd", timeout=30, **timing) is None
    with pytest.raises(UnreachableError, match=r"nsqd a, b: no answer for 5 s .*a: ConnectError"):
        first_of(["a", "b"], lambda a: attempt("a"), who="nsqd", timeout=5, **timing)


def test_a_replicated_topic_is_one_partition_whose_end_never_goes_back(monkeypatch):
    """A replicated topic's partition ("*"): a replica whose high watermark is behind the
    query's offset (a new leader's, just after a failover) is no data loss and moves the
    query's offsets back by nothing; its ranges are read from the replicas that were found."""
    import pickle

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    readers = ("leader:4151", "follower:4151")
    reader = planner(monkeypatch, {("t", "*"): (0, 20, readers)})
    end = reader.latestOffset({"t": {"*": 50}}, ReadAllAvailable())
    assert end == {"t": {"*": 50}}
    assert reader.partitions({"t": {"*": 50}}, end) == []
    reader = planner(monkeypatch, {("t", "*"): (0, 80, readers)})
    end = reader.latestOffset({"t": {"*": 50}}, ReadAllAvailable())
    assert end == {"t": {"*": 80}}
    (part,) = reader.partitions({"t": {"*": 50}}, end)
    assert (part.topic, part.nsqd, part.start, part.end) == ("t", "*", 50, 80)
    assert part.where == readers and pickle.loads(pickle.dumps(part)).where == readers
    # a partition of one nsqd is read there, as before
    (alone,) = ranges({("t", "a:1"): 0}, {("t", "a:1"): 5}, {}, readers={("t", "*"): readers})
    assert alone.where == "a:1" and alone.readers == ()
