"""The rows the source yields: one per message, in the columns of :data:`SCHEMA`."""

from __future__ import annotations

import datetime
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA = StructType([
    StructField("id", StringType(), nullable=False),
    StructField("body", BinaryType(), nullable=False),
    StructField("timestamp", TimestampType(), nullable=False),
    StructField("attempts", IntegerType(), nullable=False),
    StructField("nsqd", StringType(), nullable=False),
    StructField("topic", StringType(), nullable=False),
    StructField("channel", StringType(), nullable=False),
])

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def timestamp(nanoseconds: int) -> datetime.datetime:
    """NSQ's publish time (ns since the epoch) as Spark's timestamp (microseconds, UTC)."""
    return _EPOCH + datetime.timedelta(microseconds=nanoseconds // 1000)


def row(id: str, body: bytes, ts: int, attempts: int, nsqd: str, topic: str,
        channel: str) -> tuple[Any, ...]:
    return (id, body, timestamp(ts), attempts, nsqd, topic, channel)
