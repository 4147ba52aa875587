"""A segment file's format (docs/design/storage.md, "Segments")::

    NSQSEG1\\n                                   8 bytes of magic, then batches, one per append:

     0        4                12        16                24        28
     +--------+----------------+---------+-----------------+---------+---------------------+
     | length | base offset    | count   | max timestamp   | crc32   | records             |
     | u32    | u64            | u32     | i64 (ns)        | u32     | count x (u32 size,  |
     |        |                |         |                 |         |   record bytes)     |
     +--------+----------------+---------+-----------------+---------+---------------------+
     length: bytes after the length field; crc32: of the records part; big-endian throughout

The records of a batch have consecutive offsets from its base; a later batch's base is at or
past the previous batch's end (gaps are allowed: records no cursor needed were never written,
and a follower keeps its leader's gaps). ``segbatch`` frames and parses batches, ``segment``
writes and reads them, ``segscan`` finds them from the start of the file, ``segindex`` keeps
where each is.
"""

from __future__ import annotations

import struct

__all__ = ["AFTER_LENGTH", "BATCH_HEAD", "HEAD", "MAGIC"]

MAGIC = b"NSQSEG1\n"
#: length (bytes after this field), base offset, count, max timestamp (ns), crc32 of the records
BATCH_HEAD = struct.Struct(">IQIqI")
HEAD = BATCH_HEAD.size  # 28
AFTER_LENGTH = HEAD - 4  # the part of a head that ``length`` counts
