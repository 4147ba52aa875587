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
from nsq_spark.options import parse
from nsq_spark.pull import id_set
from nsq_spark.rows import ARROW_SCHEMA, messages_batch
from nsq_spark.sparklog import committed_end

BASE = {"topic": "clicks", "channel": "spark", "lookupd": "127.0.0.1:4161"}


def test_options_are_case_insensitive_and_typed():
    o = parse({**BASE, "maxMessagesPerTrigger": "500", "MSGTIMEOUT": "90s", "idleTimeout": "250",
               "nsqd": "a:1, b:2", "checkpointLocation": "/ck"}, reading=True)
    assert (o.max_messages_per_trigger, o.msg_timeout, o.idle_timeout) == (500, 90.0, 0.25)
    assert o.nsqd == ("a:1", "b:2") and o.lookupd == ("127.0.0.1:4161",)
    assert o.checkpoint == "/ck" and o.mode == "auto" and o.max_in_flight == 10_000


def test_client_options_in_either_spelling():
    o = parse({**BASE, "tlsRootCaFile": "/ca.pem", "tls": "true", "auth_secret": "s3cret",
               "snappy": "true"}, reading=True)
    config = o.client_config(max_in_flight=7)
    assert config.tls_root_ca_file == "/ca.pem" and config.tls_v1 and config.snappy
    assert config.auth_secret == "s3cret" and config.max_in_flight == 7


@pytest.mark.parametrize(("options", "message"), [
    ({"channel": "c", "lookupd": "x:1"}, 'option "topic" is required'),
    ({"topic": "t", "lookupd": "x:1"}, 'option "channel" is required'),
    ({"topic": "bad topic", "channel": "c", "lookupd": "x:1"}, "invalid topic name"),
    ({"topic": "t", "channel": "c"}, '"lookupd"'),
    ({**BASE, "maxMessagesPerTrigger": "many"}, "maxMessagesPerTrigger must be a whole number"),
    ({**BASE, "maxMessagesPerTrigger": "0"}, "above 0"),
    ({**BASE, "msgTimeout": "soon"}, "msgTimeout must be a duration"),
    ({**BASE, "mode": "udp"}, "option mode"),
    ({**BASE, "snappy": "true", "deflate": "true"}, "both deflate and snappy"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(OptionError, match=message) as info:
        parse(options, reading=True)
    assert isinstance(info.value, NSQSparkError) and isinstance(info.value, ValueError)


def test_writing_needs_no_channel_nor_topic():
    o = parse({"nsqd": "127.0.0.1:4150"}, reading=False)
    assert o.topic_column and o.channel is None


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
        {"id": e.id.decode(), "body": e.body,
         "timestamp": datetime.fromtimestamp(e.timestamp // 1000 / 1e6, UTC),
         "attempts": e.attempts, "nsqd": e.nsqd, "topic": "t", "channel": "c"}
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
