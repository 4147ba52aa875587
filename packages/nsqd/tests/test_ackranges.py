"""AckRanges against a plain set of ints, by hypothesis, and its documented cases."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from nsqd.ackranges import AckRanges

OFFSETS = st.integers(min_value=0, max_value=300)


def as_set(ranges: AckRanges) -> set[int]:
    return {o for start, end in ranges for o in range(start, end)}


def check_shape(ranges: AckRanges) -> None:
    """Sorted, disjoint, never touching, never empty; total() and len() agree."""
    pairs = list(ranges)
    assert all(start < end for start, end in pairs)
    assert all(a_end < b_start for (_, a_end), (b_start, _) in itertools.pairwise(pairs))
    assert len(ranges) == len(pairs)
    assert ranges.total() == sum(end - start for start, end in pairs)
    assert ranges.ranges() == tuple(pairs)


class AgainstASet(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ranges = AckRanges()
        self.model: set[int] = set()

    @rule(offset=OFFSETS)
    def add(self, offset: int) -> None:
        self.ranges.add(offset)
        self.model.add(offset)

    @rule(start=OFFSETS, length=st.integers(min_value=-3, max_value=40))
    def add_range(self, start: int, length: int) -> None:
        self.ranges.add_range(start, start + length)
        self.model.update(range(start, start + length))

    @rule(mark_delete=OFFSETS)
    def pop_prefix(self, mark_delete: int) -> None:
        new = self.ranges.pop_prefix(mark_delete)
        below = {o for o in self.model if o < mark_delete}
        self.model -= below
        expected = mark_delete
        while expected in self.model:
            self.model.discard(expected)
            expected += 1
        assert new == expected

    @rule(offset=OFFSETS)
    def discard_below(self, offset: int) -> None:
        self.ranges.discard_below(offset)
        self.model = {o for o in self.model if o >= offset}

    @rule()
    def clear(self) -> None:
        self.ranges.clear()
        self.model.clear()

    @rule(offset=st.integers(min_value=-5, max_value=350))
    def contains(self, offset: int) -> None:
        assert (offset in self.ranges) == (offset in self.model)

    @rule(start=st.integers(min_value=-5, max_value=350), length=st.integers(min_value=-3, max_value=120))
    def count_in(self, start: int, length: int) -> None:
        end = start + length
        assert self.ranges.count_in(start, end) == len([o for o in self.model if start <= o < end])

    @invariant()
    def same_offsets(self) -> None:
        assert as_set(self.ranges) == self.model
        assert self.ranges.total() == len(self.model)
        check_shape(self.ranges)


TestAgainstASet = AgainstASet.TestCase
TestAgainstASet.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)


@given(st.lists(st.tuples(OFFSETS, st.integers(min_value=0, max_value=30))))
def test_built_from_ranges(pairs: list[tuple[int, int]]) -> None:
    ranges = AckRanges((start, start + n) for start, n in pairs)
    assert as_set(ranges) == {o for start, n in pairs for o in range(start, start + n)}
    check_shape(ranges)
    assert AckRanges(ranges) == ranges


def test_fins_in_order_are_one_range() -> None:
    ranges = AckRanges()
    for offset in range(10, 100_000):
        ranges.add(offset)
    assert list(ranges) == [(10, 100_000)] and ranges.total() == 99_990


def test_the_documented_example() -> None:
    ranges = AckRanges()
    for offset in (7, 8, 12):
        ranges.add(offset)
    assert list(ranges) == [(7, 9), (12, 13)]
    assert ranges.pop_prefix(5) == 5  # nothing acknowledged at 5
    assert ranges.pop_prefix(7) == 9
    assert list(ranges) == [(12, 13)]
    ranges.add(10)
    ranges.add(11)
    assert list(ranges) == [(10, 13)]
    assert ranges.pop_prefix(9) == 9
    assert ranges.pop_prefix(11) == 13  # a range straddling the mark-delete
    assert not ranges and ranges.first() is None


@pytest.mark.parametrize(("added", "offset", "expected"), [
    ([(0, 2), (3, 5)], 2, [(0, 5)]),  # joins both neighbours
    ([(0, 2), (4, 5)], 2, [(0, 3), (4, 5)]),  # extends the left one
    ([(0, 2), (4, 5)], 3, [(0, 2), (3, 5)]),  # extends the right one
    ([(0, 2), (5, 6)], 3, [(0, 2), (3, 4), (5, 6)]),  # alone between
    ([(5, 6)], 1, [(1, 2), (5, 6)]),  # before all
    ([(5, 6)], 5, [(5, 6)]),  # already there
])
def test_add_merges_neighbours(added: list[tuple[int, int]], offset: int,
                               expected: list[tuple[int, int]]) -> None:
    ranges = AckRanges(added)
    ranges.add(offset)
    assert list(ranges) == expected


def test_count_in_and_discard_below() -> None:
    ranges = AckRanges([(0, 10), (20, 30), (40, 50)])
    assert ranges.count_in(5, 45) == 5 + 10 + 5
    assert ranges.count_in(10, 20) == 0
    assert ranges.count_in(25, 26) == 1
    ranges.discard_below(25)
    assert list(ranges) == [(25, 30), (40, 50)] and ranges.total() == 15
    assert "x" not in ranges  # type: ignore[operator]
