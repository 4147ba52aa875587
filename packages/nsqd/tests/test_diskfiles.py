"""DiskFiles, our go-diskqueue reader and writer (``gofiles`` reads Go's queues with it,
``goexport`` writes them): a file read in chunks gives what a record-by-record read gives."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest


def _reference_read(data: bytes, pos: int, end: int, max_bytes: int, max_records: int,
                    lo: int, hi: int) -> tuple[list[tuple[bytes, int]], int, str | None]:
    """DiskFiles.read's semantics, record by record (what it did before reading in chunks)."""
    records: list[tuple[bytes, int]] = []
    used = 0
    while pos < end and used < max_bytes and len(records) < max_records:
        if end - pos < 4 or len(data) - pos < 4:
            return records, pos, f"short read of a length ({end - pos} bytes left)"
        size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        if size < lo or size > hi:
            return records, pos, f"invalid message read size ({size})"
        if pos + 4 + size > end or len(data) < pos + 4 + size:
            return records, pos, f"short read of a {size} byte message"
        records.append((data[pos + 4:pos + 4 + size], pos + 4 + size))
        pos += 4 + size
        used += 4 + size
    return records, pos, None


@pytest.mark.parametrize("max_bytes", [1, 100, 70_000, 1 << 20])
@pytest.mark.parametrize("max_records", [1, 3, 4096])
@pytest.mark.parametrize("cut", [0, 2, 50, 150_000])
def test_files_read_in_chunks_as_record_by_record(tmp_path: Path, max_bytes: int,
                                                  max_records: int, cut: int) -> None:
    from nsqd.diskfiles import DiskFiles

    sizes = [30, 26, 300_000, 40, 26, 70_000, 100] * 3
    data = b"".join(len(b).to_bytes(4, "big") + b
                    for b in (bytes([i % 251]) * n for i, n in enumerate(sizes)))
    data = data[:len(data) - cut]  # a file cut short: the last record (or its length) is short
    files = DiskFiles("t", tmp_path, 1 << 30, 26, 300_000, logging.getLogger("test"))
    files.data_file(0).write_bytes(data)
    try:
        for end in (None, len(data) + cut):  # an older file read to its end; the write file
            pos = 0
            while True:
                out = files.read(0, pos, end, max_bytes, max_records)
                want = _reference_read(data, pos, len(data) if end is None else end,
                                       max_bytes, max_records, 26, 300_000)
                assert (out.records, out.pos, out.error) == want
                if out.error is not None or out.finished or not out.records:
                    break
                pos = out.pos
            assert out.finished == (end is None and cut == 0)
    finally:
        files._close_reader()
