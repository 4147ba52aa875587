"""The rows the source yields: one per message, in the columns of :data:`SCHEMA`, handed to
Spark as Arrow record batches built column by column (no tuple per row for Spark to convert)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    from .batchlog import Entry

SCHEMA = StructType([
    StructField("id", StringType(), nullable=False),
    StructField("body", BinaryType(), nullable=False),
    StructField("timestamp", TimestampType(), nullable=False),
    StructField("attempts", IntegerType(), nullable=False),
    StructField("nsqd", StringType(), nullable=False),
    StructField("topic", StringType(), nullable=False),
    StructField("channel", StringType(), nullable=False),
])

ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
_TIMESTAMP = ARROW_SCHEMA.field("timestamp").type


def _same(text: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(text, pa.string()), n)


def record_batch(ids: Sequence[str | bytes], bodies: Sequence[bytes], timestamps: Sequence[int],
                 attempts: Sequence[int], nsqd: str | Sequence[str], topic: str,
                 channel: str) -> pa.RecordBatch:
    """Rows of :data:`SCHEMA` from columns; ``timestamps`` in ns since the epoch (NSQ's),
    ``nsqd`` one address for all rows or one per row."""
    n = len(ids)
    id_type = pa.binary() if n and isinstance(ids[0], bytes) else pa.string()
    columns = [
        pa.array(ids, id_type).cast(pa.string()),
        pa.array(bodies, pa.binary()),
        pa.array([t // 1000 for t in timestamps], pa.int64()).cast(_TIMESTAMP),
        pa.array(attempts, pa.int32()),
        _same(nsqd, n) if isinstance(nsqd, str) else pa.array(nsqd, pa.string()),
        _same(topic, n),
        _same(channel, n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def entries_batch(entries: Sequence[Entry], topic: str, channel: str) -> pa.RecordBatch:
    return record_batch([e.id for e in entries], [e.body for e in entries],
                        [e.timestamp for e in entries], [e.attempts for e in entries],
                        [e.nsqd for e in entries], topic, channel)
