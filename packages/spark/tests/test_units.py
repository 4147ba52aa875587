"""The source's pieces that need no Spark: options, the batch log, Spark's checkpoint files."""

from __future__ import annotations

import json

import pytest
from nsq_spark.batchlog import Batch, BatchLog, Entry, Part
from nsq_spark.errors import NSQSparkError, OptionError
from nsq_spark.options import parse
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


def entry(n: int) -> Entry:
    return Entry("127.0.0.1:4150", f"{n:016x}", 1, 1_700_000_000_000_000_000 + n, b"\x00body%d" % n)


def test_batch_log_round_trip_commit_and_prune(tmp_path):
    log = BatchLog.under_checkpoint(f"file://{tmp_path}")
    assert log.directory == tmp_path / "sources" / "nsq"
    for end in range(10, 60, 10):
        log.write(Batch(end - 10, end, [entry(i) for i in range(end - 10, end)]))
    assert log.ends() == [10, 20, 30, 40, 50]
    assert log.read(30) == Batch(20, 30, [entry(i) for i in range(20, 30)])
    assert log.read(35) is None
    small = BatchLog(log.directory, keep=2)
    small.commit(40)
    assert small.committed() == 40 and small.ends() == [30, 40, 50]
    assert [b.end for b in small.discard_after(40)] == [50] and small.ends() == [30, 40]
    assert not list(log.directory.glob("*.tmp"))


def test_batch_log_parts(tmp_path):
    log = BatchLog(tmp_path)
    parts = [Part("127.0.0.1:4151", "127.0.0.1:4150", 3), Part("127.0.0.1:4251", "127.0.0.1:4250", 2)]
    batch = Batch(0, 5, [], parts)
    log.write(batch)
    assert log.read(5) == batch and log.pulled(batch) == []
    log.write_part(5, 1, [entry(1), entry(2)])
    assert log.read_part(5, 1) == [entry(1), entry(2)] and log.read_part(5, 0) is None
    assert log.pulled(batch) == [(parts[1], [entry(1), entry(2)])]
    log.commit(5)
    BatchLog(tmp_path, keep=0).commit(5)
    assert list(tmp_path.glob("*.part-*")) == [] and log.ends() == []


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
