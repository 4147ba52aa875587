"""nsqd.gofiles: Go's queue files read as Go's nsqd reads them, and records turned into Go's."""

from __future__ import annotations

import logging
import struct
import time
from pathlib import Path

from nsq_common import MESSAGE_HEADER
from nsqd import goexport, gofiles
from nsqd.diskfiles import DiskFiles
from nsqd.message import Job, QueuedMessage
from nsqd.record import EXTENDED, decode_record, encode_record

LOG = logging.getLogger("test_gofiles")
NOW = time.time_ns()


def go_record(i: int, attempts: int = 0, body: bytes | None = None) -> bytes:
    return MESSAGE_HEADER.pack(NOW, attempts) + b"%016x" % i + (body or b"body-%d" % i)


def write_queue(data: Path, name: str, records: list[bytes]) -> tuple[DiskFiles, tuple[int, int]]:
    """A queue of ``records`` in files of 200 bytes; its files and write position."""
    files = DiskFiles(name, data, 200, 26, 1 << 20, LOG)
    out = files.write(records, (0, 0), 0, (0, 0), True)
    return files, out.write


def read(data: Path, name: str) -> list[bytes]:
    return [r for batch in gofiles.read_queue(data, name, LOG) for r in batch]


def test_a_queue_is_read_from_its_read_position_across_files(tmp_path):
    records = [go_record(i) for i in range(12)]  # 200-byte files: several of them
    files, write = write_queue(tmp_path, "t:c", records)
    files.sync(10, (0, 2 * (4 + len(records[0]))), write, [])  # two of file 0 read
    files.close_files()
    assert len(gofiles.data_files(tmp_path, "t:c")) > 2
    assert read(tmp_path, "t:c") == records[2:]


def test_records_past_the_metadata_are_read_as_go_reads_them(tmp_path):
    """A kill -9 before the metadata was persisted: the records written since are there."""
    records = [go_record(i) for i in range(3)]
    files = DiskFiles("t", tmp_path, 1 << 20, 26, 1 << 20, LOG)
    files.write(records[:1], (0, 0), 0, (0, 0), True)
    files.write(records[1:], (0, 4 + len(records[0])), 1, (0, 0), False)
    files.close_files()
    assert read(tmp_path, "t") == records


def test_data_files_without_metadata_are_read_whole(tmp_path, caplog):
    records = [go_record(i) for i in range(5)]
    write_queue(tmp_path, "t", records)[0].close_files()
    gofiles.meta_path(tmp_path, "t").unlink()
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        assert read(tmp_path, "t") == records
    assert "no metadata" in caplog.text


def test_damage_skips_the_rest_of_its_file_only(tmp_path, caplog):
    records = [go_record(i) for i in range(12)]
    write_queue(tmp_path, "t", records)[0].close_files()
    first = gofiles.data_files(tmp_path, "t")[0][1]
    data = bytearray(first.read_bytes())
    struct.pack_into(">i", data, 4 + len(records[0]), 7)  # the second record's length: too small
    first.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        got = read(tmp_path, "t")
    per_file = (200 // (4 + len(records[0]))) or 1
    assert got == records[:1] + records[per_file:]
    assert "the rest of that file is skipped" in caplog.text


def test_deferred_side_file_and_its_torn_end(tmp_path, caplog):
    entries = [(NOW + 10**9 * i, go_record(i)) for i in range(3)]
    blob = b"".join(struct.pack(">qi", due, len(r)) + r for due, r in entries)
    path = tmp_path / "t:c.deferred.dat"
    path.write_bytes(blob + blob[:20])
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        assert gofiles.read_deferred(path, LOG) == entries
    assert "not a whole entry" in caplog.text


def test_go_records_drop_our_extension_and_keep_attempts():
    msg = QueuedMessage(b"0123456789abcdef", b"\0body\n", NOW, 3, expires=NOW + 10**12,
                        due=NOW + 10**10)
    job = Job(b"fedcba9876543210", b"job", NOW, 2, tries=5, delay=60, due=NOW + 10**11,
              attributes=b'{"a":"b"}')
    for original in (msg, job):
        out = gofiles.go_record(encode_record(original))
        assert not out[8] & 0x80
        assert out == MESSAGE_HEADER.pack(NOW, original.attempts) + original.id + original.body
    plain = go_record(1, attempts=1)
    assert gofiles.go_record(plain) is plain
    assert decode_record(gofiles.go_record(plain, attempts=4)).attempts == 4


def test_a_go_record_with_the_top_bit_of_its_attempts_set_stays_go_s():
    """Go's attempts go to 65535; ours use the top bit for the extension. A Go record with
    32768 attempts or more, whose bytes after the id are no extension of ours, is kept as a
    plain record with its attempts capped, its body whole."""
    record = go_record(7, attempts=0x8001, body=b"\xff\x00 not an extension")
    checked = gofiles.checked_record(record)
    msg = decode_record(checked)
    assert (msg.attempts, msg.body) == (EXTENDED - 1, b"\xff\x00 not an extension")
    ours = encode_record(QueuedMessage(b"0123456789abcdef", b"x", NOW, 1, expires=NOW + 10**9))
    assert gofiles.checked_record(ours) is ours


def test_export_leaves_out_what_has_expired():
    tally = goexport.Tally()
    live = encode_record(QueuedMessage(b"0123456789abcdef", b"live", NOW, 0,
                                       expires=time.time_ns() + 10**12))
    gone = encode_record(QueuedMessage(b"0123456789abcdee", b"gone", NOW, 0,
                                       expires=time.time_ns() - 1))
    out = goexport._go_records([(live, 0), (gone, 0), (go_record(3), 2)], tally,
                               time.time_ns())
    assert [decode_record(r).body for r in out] == [b"live", b"body-3"]
    assert decode_record(out[1]).attempts == 2
    assert (tally.written, tally.expired) == (2, 1)
