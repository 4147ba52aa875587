"""nsqd.privatemigration on a data directory of the release before internal logs
(tests/integration/data/private_queues_v1): the move killed with SIGKILL before each of its
file operations, then run again, ends exactly where a move never killed ends: every queue's
messages once in its channel's log, no old file, no staging directory left."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
import trio
from nsq_testing.killsteps import run_in_child
from nsqd import gofiles, privatemigration
from nsqd.clock import SystemClock
from nsqd.options import Options
from nsqd.privatelog import DEAD, OWN, directory_name, each_unread
from nsqd.record import decode_record
from nsqd.topiclog import TopicLog

DATA = Path(__file__).parents[3] / "tests" / "integration" / "data" / "private_queues_v1"
QUIET = logging.getLogger("test_privatemigration")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False
QUEUES = [("orders", "a", DEAD), ("orders", "a", OWN), ("orders", "b", DEAD),
          ("other", "c", DEAD)]
STEPS = [(TopicLog, "append"), (TopicLog, "close"), (os, "rename"), (Path, "unlink"),
         (gofiles, "sync_path"), (shutil, "rmtree")]


def migrate_in_child(data: Path, kill_at: int | None) -> int:
    """The move in a forked child, killed with SIGKILL before its ``kill_at``-th file
    operation; how many it made when it is not killed (-1 when killed)."""
    return run_in_child(
        lambda: trio.run(privatemigration.migrate, Options.defaults(data_path=str(data)),
                         QUIET, SystemClock()),
        STEPS, kill_at, data.parent / "steps")


def moved(data: Path) -> dict[str, list[tuple[bytes, bytes, int]]]:
    """Each queue's messages in its log (id, body, attempts), in order; and the state: no
    old file, no staging directory."""
    assert not [n for n in os.listdir(data) if privatemigration.is_private_queue_file(n)]
    assert not list(data.glob(f"topics/*/*{privatemigration.STAGING}"))

    async def read() -> dict[str, list[tuple[bytes, bytes, int]]]:
        out: dict[str, list[tuple[bytes, bytes, int]]] = {}
        for topic, channel, kind in QUEUES:
            got = out[f"{topic}:{channel}{kind}"] = []

            async def add(batch: list[bytes], got: list[tuple[bytes, bytes, int]] = got
                          ) -> None:
                for record in batch:
                    msg = decode_record(record)
                    got.append((msg.id, msg.body, msg.attempts))

            await each_unread(data / "topics" / topic / directory_name(channel, kind),
                              f"{topic}:{channel}{kind}", QUIET, add, SystemClock())
        return out

    return trio.run(read)


def test_the_move_of_the_fixture() -> None:
    """What the fixture's queues hold (``make_private_queues_v1.py`` says how it was made)."""
    names = privatemigration.private_queues(os.listdir(DATA))
    assert names == sorted(QUEUES)


def test_killed_before_any_step_then_run_again(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    shutil.copytree(DATA, reference)
    steps = migrate_in_child(reference, None)
    wanted = moved(reference)
    assert {key: [body for _, body, _ in msgs] for key, msgs in wanted.items()} == {
        "orders:a#dead": [b"m2", b"m3"], "orders:a#own": [b"m1"],
        "orders:b#dead": [b"m1", b"m2"], "other:c#dead": [b"x1"]}
    assert steps > 10
    for kill_at in range(1, steps + 1):
        data = tmp_path / f"killed-{kill_at}"
        shutil.copytree(DATA, data)
        assert migrate_in_child(data, kill_at) == -1, f"not killed at step {kill_at}"
        assert migrate_in_child(data, None) >= 0
        assert moved(data) == wanted, f"killed before step {kill_at}"
        shutil.rmtree(data)


@pytest.mark.parametrize("leftover", ["old files", "staging"])
def test_what_a_crash_left_is_settled(tmp_path: Path, leftover: str) -> None:
    """A log in place with its old files still there (a kill while they were removed): they
    are removed, nothing appended again. A staging directory with the old files (a kill
    while it was written): it is written again from them."""
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    migrate_in_child(data, None)
    wanted = moved(data)
    for name in os.listdir(DATA):
        if privatemigration.is_private_queue_file(name):
            shutil.copy(DATA / name, data / name)
    if leftover == "staging":
        for topic, channel, kind in QUEUES:
            log = data / "topics" / topic / directory_name(channel, kind)
            log.rename(log.with_name(log.name + privatemigration.STAGING))
    migrate_in_child(data, None)
    assert moved(data) == wanted
