"""The sink's and the batch reader's pure parts: schema checks, MPUB chunking, planning."""

from __future__ import annotations

import pyarrow as pa
import pytest
from nsq_spark import options as parsing
from nsq_spark import sink
from nsq_spark.batch import NsqdShare, plan
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType


def opts(**extra: str) -> parsing.Options:
    return parsing.parse({"nsqd": "127.0.0.1:4150", **extra})


def schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])  # type: ignore[arg-type]


def test_columns_body_or_value_binary_or_string():
    where = sink.columns(schema(("x", IntegerType()), ("VALUE", StringType())), opts(topic="t"))
    assert where == sink.Columns(1, None, "t")
    with pytest.raises(sink.SchemaError, match="column named 'body'"):
        sink.columns(schema(("x", BinaryType())), opts(topic="t"))
    with pytest.raises(sink.SchemaError, match="must be binary or string, not int"):
        sink.columns(schema(("body", IntegerType())), opts(topic="t"))
    with pytest.raises(sink.SchemaError, match='option "topic", or a string column'):
        sink.columns(schema(("body", BinaryType())), opts())
    assert sink.columns(schema(("topic", StringType()), ("body", BinaryType())), opts()) == \
        sink.Columns(1, 0, "")


def test_chunks_split_by_count_and_route_by_topic_in_order():
    batch = pa.record_batch({"body": [b"a1", b"b1", b"a2", b"a3", b"b2"],
                             "topic": ["a", "b", "a", "a", "b"]})
    got = list(sink.chunks(batch, sink.Columns(0, 1, ""), batch_size=2))
    assert got == [("a", [b"a1", b"a2"]), ("a", [b"a3"]), ("b", [b"b1", b"b2"])]


def test_chunks_stay_under_the_mpub_byte_limit():
    big = b"x" * (sink.MAX_MPUB_BYTES // 3)
    batch = pa.record_batch({"body": [big] * 7})
    sizes = [len(part) for _, part in sink.chunks(batch, sink.Columns(0, None, "t"), 500)]
    assert sizes == [2, 2, 2, 1]


@pytest.mark.parametrize(("bodies", "topics", "message"), [
    ([b"x", b""], ["t", "t"], "row 1 of a record batch for topic 't' has an empty body"),
    ([b"x", None], ["t", "u"], "row 1 of a record batch for topic 'u' has a null body"),
    ([b"x", b"y"], ["t", "no good"], "invalid topic name 'no good'"),
    ([b"x", b"y"], ["t", None], "a row has a null topic"),
])
def test_chunks_refuse_what_nsq_cannot_carry(bodies, topics, message):
    batch = pa.record_batch({"body": pa.array(bodies, pa.binary()), "topic": topics})
    with pytest.raises(sink.SchemaError, match=message):
        list(sink.chunks(batch, sink.Columns(0, 1, ""), 500))


def test_plan_spreads_the_limit_in_pieces_of_at_most_max_in_flight():
    assert plan(["a:1", "b:1"], 6000, 2500) == [
        NsqdShare("a:1", 1500), NsqdShare("b:1", 1500), NsqdShare("a:1", 1500),
        NsqdShare("b:1", 1500)]
    assert plan(["a:1", "b:1", "c:1"], 2, 2500) == [NsqdShare("a:1", 1), NsqdShare("b:1", 1)]
    assert plan([], 10, 5) == []
