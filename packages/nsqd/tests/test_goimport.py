"""nsqd.goimport on real files (packages/nsqd/tests/data): the import killed with SIGKILL before
each of its file operations, then run again, ends exactly where an import never killed ends
(every message once, where each channel gets it); a failure undoes a topic's import and
leaves its files for the next start."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
from nsq_testing.killsteps import run_in_child
from nsqd import cursorfile, goexport, gofiles, goimport, metadata
from nsqd.clock import SystemClock
from nsqd.options import Options
from nsqd.record import decode_record
from nsqd.topiclog import TopicLog

DATA = Path(__file__).parent / "data"
QUIET = logging.getLogger("test_goimport")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False

#: The file operations of an import: killed before the n-th call of any of them.
STEPS: list[tuple[Any, str]] = [
    (goimport, "write_atomically"), (TopicLog, "append"), (TopicLog, "close"),
    (cursorfile.CursorJournal, "append"),
    (Path, "unlink"), (os, "truncate"),
]


def options(data: Path, **overrides: Any) -> Options:
    return Options.defaults(data_path=str(data), **overrides)


def import_in_child(data: Path, kill_at: int | None, **overrides: Any) -> int:
    """Run the import in a forked child, killed with SIGKILL before its ``kill_at``-th file
    operation; the number of operations it made when it is not killed."""
    return run_in_child(
        lambda: trio.run(goimport.bring_in, options(data, **overrides), QUIET, SystemClock()),
        STEPS, kill_at, data.parent / f"{data.name}.steps")


def copy_fixture(name: str, tmp_path: Path, as_name: str) -> Path:
    data = tmp_path / as_name
    shutil.copytree(DATA / name, data)
    return data


def what_channels_get(data: Path) -> dict[str, list[tuple[bytes, bytes, int]]]:
    """What each channel (``topic:channel``) and what each topic holds for its channels
    (``topic``) would deliver, as ``goexport`` reads it: (id, body, attempts), sorted. Plus
    the state of the import: no file in Go's layout, no marker."""
    names = os.listdir(data)
    assert goimport.MARKER not in names
    assert [n for n in names if gofiles.is_queue_file(n)] == []

    async def read() -> dict[str, list[tuple[bytes, bytes, int]]]:
        out: dict[str, list[tuple[bytes, bytes, int]]] = {}
        topics, _ = metadata.load(metadata.metadata_path(str(data)))
        for meta in topics:
            topic = goexport.SourceTopic(data, meta, QUIET, SystemClock())
            try:
                for channel in meta.channels:
                    key = f"{meta.name}:{channel.name}"
                    out[key] = []
                    await topic.channel_records(channel.name, goexport.Tally(),
                                                _into(out[key]))
                out[meta.name] = []
                await topic.held_records(goexport.Tally(), _into(out[meta.name]))
            finally:
                await topic.close()
        return {key: sorted(messages) for key, messages in out.items()}

    return trio.run(read)


def _into(messages: list[tuple[bytes, bytes, int]]) -> goexport.Sink:
    async def sink(batch: list[bytes]) -> None:
        for record in batch:
            msg = decode_record(record)
            messages.append((msg.id, msg.body, msg.attempts))

    return sink


@pytest.mark.parametrize("name", ["go-1.3.0-killed", "ours-326d0d9"])
def test_killed_before_any_step_then_run_again(tmp_path, name):
    reference = copy_fixture(name, tmp_path, "reference")
    steps = import_in_child(reference, None)
    wanted = what_channels_get(reference)
    assert steps > 10
    assert sum(map(len, wanted.values())) > 0
    for kill_at in range(1, steps + 1):
        data = copy_fixture(name, tmp_path, f"killed-{kill_at}")
        assert import_in_child(data, kill_at) == -1
        import_in_child(data, None)
        assert what_channels_get(data) == wanted, f"killed before step {kill_at} of {steps}"
        shutil.rmtree(data)


def test_killed_while_undoing(tmp_path):
    """An import killed half-way, then its undo killed before each of its own steps: the next
    start still ends where an import never killed ends."""
    name = "go-1.3.0-clean"
    reference = copy_fixture(name, tmp_path, "reference")
    steps = import_in_child(reference, None)
    wanted = what_channels_get(reference)
    half = steps // 2
    first = copy_fixture(name, tmp_path, "first")
    assert import_in_child(first, half) == -1
    probe = tmp_path / "probe"
    shutil.copytree(first, probe)
    undo_and_more = import_in_child(probe, None)
    for kill_at in range(1, min(undo_and_more, 15) + 1):
        data = tmp_path / f"undo-{kill_at}"
        shutil.copytree(first, data)
        assert import_in_child(data, kill_at) == -1
        import_in_child(data, None)
        assert what_channels_get(data) == wanted, f"undo killed before step {kill_at}"
        shutil.rmtree(data)


def test_a_record_bigger_than_max_msg_size_comes_into_an_own_queue(tmp_path):
    """A channel's record bigger than --max-msg-size (a Go nsqd with a larger one) is kept in
    its own queue's log, as a topic's records are in the topic's log: nothing is refused."""
    name = "go-1.3.0-clean"
    data = copy_fixture(name, tmp_path, "data")
    big = b"\0" * 20_000
    _append_go_record(data, "orders:shipping", big)
    trio.run(goimport.bring_in, options(data, max_msg_size=1024), QUIET, SystemClock())
    got = what_channels_get(data)["orders:shipping"]
    assert any(body == big for _, body, _ in got)


def _append_go_record(data: Path, queue: str, body: bytes) -> None:
    """One more record at the end of a Go queue (written by our go-diskqueue writer)."""
    import time

    from nsq_common import MESSAGE_HEADER
    from nsqd.diskfiles import DiskFiles

    files = DiskFiles(queue, data, 1 << 30, 26, 1 << 30, QUIET)
    loaded = files.load()
    assert loaded is not None
    record = MESSAGE_HEADER.pack(time.time_ns(), 0) + b"%016x" % 0xB16 + body
    files.write([record], loaded.write, loaded.depth, loaded.read, True)
    files.close_files()


def test_a_full_disk_undoes_what_it_cut_short(tmp_path, tiny_fs):
    """The import on a file system with room for only part of it (a real ENOSPC): what did
    not fit is put back and left for the next start, which, with room again, ends where an
    import never short of room ends."""
    name = "go-1.3.0-clean"
    reference = copy_fixture(name, tmp_path, "reference")
    import_in_child(reference, None)
    wanted = what_channels_get(reference)
    data = tiny_fs.path / "data"
    shutil.copytree(DATA / name, data)
    filler = tiny_fs.fill()
    os.truncate(filler, max(filler.stat().st_size - 6 * 4096, 0))  # room for a few files
    logger = logging.getLogger("nsqd.test.goimport.full")
    failed = []
    handler = _Collect(failed)
    logger.addHandler(handler)
    try:
        trio.run(goimport.bring_in, options(data), logger, SystemClock())
    finally:
        logger.removeHandler(handler)
    assert any("not brought in" in line for line in failed), failed
    assert goimport.MARKER not in os.listdir(data)
    assert [n for n in os.listdir(data) if gofiles.is_queue_file(n)]
    filler.unlink()
    trio.run(goimport.bring_in, options(data), logger, SystemClock())
    assert what_channels_get(data) == wanted


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def test_queue_files_of_no_topic_are_left_alone(tmp_path, caplog):
    data = copy_fixture("go-1.3.0-killed", tmp_path, "data")
    metadata.write_atomic(data / "nsqd.dat", metadata.encode([]))
    with caplog.at_level(logging.WARNING, logger="nsqd.test"):
        trio.run(goimport.bring_in, options(data), logging.getLogger("nsqd.test"), SystemClock())
    assert sorted(n for n in os.listdir(data) if gofiles.is_queue_file(n)) == sorted(
        n for n in os.listdir(DATA / "go-1.3.0-killed") if gofiles.is_queue_file(n))
    assert any("queue files of no topic or channel" in r.getMessage() for r in caplog.records)
