"""The rows the source yields: one per message, in the columns of :data:`SCHEMA`, handed to
Spark as Arrow record batches built column by column (no tuple per row for Spark to convert).

==========  =========  ===================================================================
column      type
==========  =========  ===================================================================
id          string     NSQ's message id
body        binary     the message
value       binary     the same bytes, under Kafka's name
timestamp   timestamp  when nsqd received it
attempts    int        deliveries so far
nsqd        string     where it was read: the nsqd's HTTP address for reads by offset (the
                       key of the offsets), its TCP address for channel reads
topic       string
offset      long       its offset in the topic's log on that nsqd (null for channel reads)
channel     string     the channel read (null for reads by offset)
==========  =========  ===================================================================

:func:`messages_batch` makes Arrow arrays of :class:`.batchlog.Messages`' columns without
copying them one value at a time: the ids, bodies, timestamps and attempts already lie in
memory as Arrow wants them (native byte order, fixed widths, bodies back to back).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    from .batchlog import Messages

SCHEMA = StructType([
    StructField("id", StringType(), nullable=False),
    StructField("body", BinaryType(), nullable=False),
    StructField("value", BinaryType(), nullable=False),
    StructField("timestamp", TimestampType(), nullable=False),
    StructField("attempts", IntegerType(), nullable=False),
    StructField("nsqd", StringType(), nullable=False),
    StructField("topic", StringType(), nullable=False),
    StructField("offset", LongType(), nullable=True),
    StructField("channel", StringType(), nullable=True),
])

ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
_TIMESTAMP = ARROW_SCHEMA.field("timestamp").type


# Arrays are made from buffers here, not from Python values: pa.array and pa.scalar import
# pandas the first time (about a second in each fresh Python worker).

def _strings(texts: Sequence[str]) -> pa.Array:
    data = [text.encode() for text in texts]
    offsets = array("i", accumulate(map(len, data), initial=0))
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets),
                                                          pa.py_buffer(b"".join(data))])


def _same(text: str, n: int) -> pa.Array:
    data = text.encode()
    offsets = array("i", range(0, len(data) * n + 1, len(data))) if data else array("i", [0]) * (n + 1)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data * n)])


def record_batch(ids: Sequence[str | bytes], bodies: Sequence[bytes], timestamps: Sequence[int],
                 attempts: Sequence[int], nsqd: str | Sequence[str], topic: str,
                 channel: str) -> pa.RecordBatch:
    """Rows of :data:`SCHEMA` from columns; ``timestamps`` in ns since the epoch (NSQ's),
    ``nsqd`` one address for all rows or one per row."""
    n = len(ids)
    id_type = pa.binary() if n and isinstance(ids[0], bytes) else pa.string()
    body = pa.array(bodies, pa.binary())
    columns = [
        pa.array(ids, id_type).cast(pa.string()),
        body,
        body,
        pa.array([t // 1000 for t in timestamps], pa.int64()).cast(_TIMESTAMP),
        pa.array(attempts, pa.int32()),
        _same(nsqd, n) if isinstance(nsqd, str) else pa.array(nsqd, pa.string()),
        _same(topic, n),
        pa.nulls(n, pa.int64()),
        _same(channel, n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)



def _column(type: pa.DataType, n: int, data: object) -> pa.Array:
    return pa.Array.from_buffers(type, n, [None, pa.py_buffer(data)])


def messages_batch(messages: Messages, topic: str, channel: str | None,
                   offsets: array[int] | None = None) -> pa.RecordBatch:
    """Rows of :data:`SCHEMA` from a batch's columns, with no Python work per message: a
    channel's (``offsets`` None), or the log's (``channel`` None, an offset per message)."""
    n = len(messages)
    sizes = accumulate(messages.sizes, initial=0)
    bodies = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(array("i", sizes)),
                                                    pa.py_buffer(messages.bodies)])
    ids = _column(pa.binary(16), n, messages.ids).cast(pa.string())  # checks UTF-8
    # ns to _TIMESTAMP's microseconds by a cast that truncates (no Python scalar to divide by)
    timestamps = _column(pa.timestamp("ns", _TIMESTAMP.tz), n, messages.timestamps)
    if len(messages.addresses) == 1:
        nsqd = _same(messages.addresses[0], n)
    else:
        nsqd = _strings(messages.addresses).take(_column(pa.uint16(), n, messages.nsqd))
    columns = [ids, bodies, bodies, timestamps.cast(_TIMESTAMP, safe=False),
               _column(pa.uint16(), n, messages.attempts).cast(pa.int32()),
               nsqd, _same(topic, n),
               pa.nulls(n, pa.int64()) if offsets is None else _column(pa.int64(), n, offsets),
               pa.nulls(n, pa.string()) if channel is None else _same(channel, n)]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
