"""Deferred messages saved across a clean restart, with the time they are due.

NSQ writes deferred messages into the disk queue at shutdown and so delivers them at once
after a restart; we keep their remaining delay. Each topic or channel with deferred messages
gets ``<queue name>.deferred.dat``, read and removed at start-up::

    repeated: [ due: int64 BE, ns since the epoch ][ size: int32 BE ][ message record ]
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from .backlog import decode_record, encode_record
from .message import QueuedMessage
from .metadata import write_atomic

_ENTRY = struct.Struct(">qi")


def deferred_path(data_path: str, queue_name: str) -> Path:
    return Path(data_path or ".") / f"{queue_name}.deferred.dat"


def save(path: Path, entries: list[tuple[int, QueuedMessage]]) -> None:
    """Write ``(due wall-clock ns, message)`` pairs; an empty list removes the file."""
    if not entries:
        path.unlink(missing_ok=True)
        return
    parts = []
    for due, msg in entries:
        record = encode_record(msg)
        parts.append(_ENTRY.pack(due, len(record)))
        parts.append(record)
    write_atomic(path, b"".join(parts))


def load(path: Path) -> list[tuple[int, QueuedMessage]]:
    """Read and remove the file; a damaged tail is ignored (what came before is kept)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    pos = 0
    while len(data) - pos >= _ENTRY.size:
        due, size = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        if size < 26 or pos + size > len(data):
            break
        entries.append((due, decode_record(data[pos:pos + size])))
        pos += size
    os.unlink(path)
    return entries
