"""A replica's leader-epoch file (nsqd.replication.epochs, KIP-101): lines added in order,
kept across a reopen, ``EPOCH_END``'s answer, cut back with the log, an unreadable file read
as empty."""

from __future__ import annotations

from pathlib import Path

from nsqd.replication.epochs import Epochs


def test_lines_are_added_in_order_and_kept(tmp_path: Path) -> None:
    epochs = Epochs(tmp_path / "t").load()
    assert epochs.lines == [] and epochs.latest == 0
    assert epochs.add(1, 0)
    assert epochs.add(3, 120)
    assert not epochs.add(2, 130)  # an epoch not above the last: nothing
    assert not epochs.add(3, 140)
    assert (tmp_path / "t" / "epochs").read_text() == "1 0\n3 120\n"
    assert Epochs(tmp_path / "t").load().lines == [(1, 0), (3, 120)]
    assert epochs.start_of(3) == 120 and epochs.start_of(2) is None


def test_epoch_end_answers_where_the_asked_epoch_ends_on_the_leader(tmp_path: Path) -> None:
    epochs = Epochs(tmp_path).load()
    assert epochs.end_of(4, 99) == (0, 99)  # none held: the log end
    for epoch, start in ((2, 10), (4, 50), (7, 80)):
        epochs.add(epoch, start)
    assert epochs.end_of(7, 99) == (7, 99)   # its current epoch: its log end
    assert epochs.end_of(9, 99) == (7, 99)   # (newer than it holds: its last)
    assert epochs.end_of(4, 99) == (4, 80)   # where the next epoch began
    assert epochs.end_of(5, 99) == (4, 80)   # never held 5: the one below, and its end
    assert epochs.end_of(2, 99) == (2, 50)
    assert epochs.end_of(1, 99) == (0, 10)   # older than any: the first start


def test_a_cut_drops_the_lines_at_and_past_it(tmp_path: Path) -> None:
    epochs = Epochs(tmp_path).load()
    for epoch, start in ((1, 0), (2, 10), (3, 50)):
        epochs.add(epoch, start)
    epochs.cut(50)
    assert epochs.lines == [(1, 0), (2, 10)]
    epochs.cut(11)
    assert Epochs(tmp_path).load().lines == [(1, 0), (2, 10)]
    epochs.cut(10)
    assert Epochs(tmp_path).load().lines == [(1, 0)]


def test_an_unreadable_file_is_read_as_empty(tmp_path: Path) -> None:
    (tmp_path / "epochs").write_text("1 0\nnot numbers\n")
    assert Epochs(tmp_path).load().lines == []
    (tmp_path / "epochs").write_text("1 0 7\n")
    assert Epochs(tmp_path).load().lines == []
