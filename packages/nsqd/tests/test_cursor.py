"""The cursor's positions (``nsqd.cursor``): what reading passes over after acknowledgements,
one at a time or in bulk."""

from __future__ import annotations

import pytest
from nsqd.cursor import Cursor
from nsqd.cursorfile import CursorState


def restored(mark_delete: int, ranges: tuple[tuple[int, int], ...]) -> Cursor:
    """A cursor as a start leaves it: read from the mark-delete position, ``ranges``
    acknowledged ahead of it."""
    cursor = Cursor(0)
    cursor.restore(CursorState(mark_delete, ranges, ()), 0)
    return cursor


@pytest.mark.parametrize("bulk", [False, True], ids=["ack", "ack_many"])
def test_finishing_the_first_passes_the_ranges_acknowledged_after_it(bulk: bool) -> None:
    # a clean restart with offset 0 waiting and 1..2 finished; 0 read again and finished:
    # reading goes on at 3, never back over 1 and 2
    cursor = restored(0, ((1, 3),))
    assert (cursor.mark_delete, cursor.read) == (0, 0)
    cursor.advance_read(1)
    if bulk:
        cursor.ack_many([0])
    else:
        cursor.ack(0)
    assert (cursor.mark_delete, cursor.read) == (3, 3)
    assert not cursor.acked
    assert cursor.unread(4) == 1


@pytest.mark.parametrize("bulk", [False, True], ids=["ack", "ack_many"])
def test_acknowledging_behind_the_read_position_leaves_it(bulk: bool) -> None:
    cursor = Cursor(0)
    cursor.advance_read(10)
    if bulk:
        cursor.ack_many([0, 1, 5])
    else:
        for offset in (0, 1, 5):
            cursor.ack(offset)
    assert (cursor.mark_delete, cursor.read) == (2, 10)
    assert cursor.is_done(5) and not cursor.is_done(2)
    assert cursor.unread(12) == 2
