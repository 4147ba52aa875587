"""``--history-file``: round trip, bounds on load, atomic writes, files that cannot be used."""

import gzip
import json
import logging

import trio
from nsq_common import TopicStats
from nsqadmin import history_file
from nsqadmin.history import History


def sample(node: str, depth: int, messages: int) -> TopicStats:
    raw = {"topic_name": "t", "depth": depth, "message_count": messages,
           "channels": [{"channel_name": "c", "depth": depth, "message_count": messages}]}
    return TopicStats.parse(raw, node, "h")


def filled(start: float = 1_700_000_000.0) -> History:
    history = History(clock=lambda: start + 3595)  # the last sample's time
    for i in range(0, 3600, 5):  # an hour of samples every 5 s
        history.record([sample("a:1", i % 7, i * 2)], now=start + i, nodes=["a:1"])
    return history


def test_round_trip_keeps_every_tier_and_counter_state(tmp_path):
    history = filled()
    path = tmp_path / "history.gz"
    trio.run(history_file.save, history, str(path))
    assert json.loads(gzip.decompress(path.read_bytes()))["version"] == 1
    again = History(clock=history.clock)
    assert history_file.load(again, str(path)) == len(history) == 8
    for key in history:
        for window in ("10m", "1h", "6h"):
            assert again.points(key, window) == history.points(key, window)
    # counters continue from where they were: the next rate is right, not a jump
    for h in (history, again):
        h.record([sample("a:1", 0, 3600 * 2)], now=1_700_000_000.0 + 3600)
    assert again.rate("t", "c") == history.rate("t", "c") == 2.0


def test_load_applies_this_runs_bounds(tmp_path):
    path = tmp_path / "history.gz"
    trio.run(history_file.save, filled(), str(path))
    small = History(max_series=2, clock=lambda: 1_700_000_000.0 + 3600)
    assert history_file.load(small, str(path)) == 2
    later = History(clock=lambda: 1_700_000_000.0 + 3600 + 6 * 3600 + 1)  # all too old now
    assert history_file.load(later, str(path)) == 0


def test_missing_or_bad_files_start_empty(tmp_path, caplog):
    history = History()
    assert history_file.load(history, str(tmp_path / "absent")) == 0
    bad = tmp_path / "bad"
    for content in (b"not gzip", gzip.compress(b"[1, 2]"),
                    gzip.compress(b'{"version": 1, "series": [{"key": ["x"]}]}'),
                    gzip.compress(b'{"version": 1, "series": [{"key": ["depth", "t", "", ""],'
                                  b' "tiers": [[[2, 1], [0, 0]]]}]}')):
        bad.write_bytes(content)
        with caplog.at_level(logging.WARNING, "nsqadmin"):
            assert history_file.load(history, str(bad)) == 0
        assert "starting empty" in caplog.text
        assert len(history) == 0


def test_writes_are_atomic(tmp_path):
    path = tmp_path / "history.gz"
    path.write_bytes(b"previous")
    history_file.write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert not (tmp_path / "history.gz.tmp").exists()
    # a directory that cannot be written: the save fails (logged), the old file stays
    assert trio.run(history_file.save, filled(), str(tmp_path / "missing-dir" / "h.gz")) is False


async def test_saver_saves_on_cancel(tmp_path, autojump_clock):
    path = tmp_path / "history.gz"
    history = filled()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(history_file.run_saver, history, str(path), 60.0)
        while not path.exists():  # virtual time: a periodic save after 60 s
            await trio.sleep(1)
        assert trio.current_time() >= 60
        path.unlink()
        nursery.cancel_scope.cancel()
    assert path.exists()  # and one on the way out
