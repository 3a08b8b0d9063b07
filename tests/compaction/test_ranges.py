"""Offset ranges: planning and splitting (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.compaction.errors import DataLossError
from service.compaction.ranges import OffsetRange, Watermarks, plan_ranges, split_ranges


def test_plan_starts_at_stored_or_earliest_and_ends_at_high_watermark() -> None:
    marks = {("a", 0): Watermarks(0, 10), ("a", 1): Watermarks(5, 7), ("b", 0): Watermarks(0, 0)}
    ranges = plan_ranges({("a", 0): 4}, marks)
    assert ranges == [
        OffsetRange("a", 0, 4, 10),
        OffsetRange("a", 1, 5, 7),
        OffsetRange("b", 0, 0, 0),
    ]


def test_plan_refuses_deleted_records_unless_allowed() -> None:
    marks = {("a", 0): Watermarks(8, 10)}
    with pytest.raises(DataLossError):
        plan_ranges({("a", 0): 3}, marks)
    assert plan_ranges({("a", 0): 3}, marks, fail_on_data_loss=False) == [
        OffsetRange("a", 0, 8, 10)
    ]


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), max_size=5),
    st.integers(1, 300),
)
def test_split_covers_exactly_the_same_offsets(bounds: list[tuple[int, int]], size: int) -> None:
    ranges = [OffsetRange("t", i, min(a, b), max(a, b)) for i, (a, b) in enumerate(bounds)]
    pieces = split_ranges(ranges, size)
    assert all(0 < p.size <= size for p in pieces)
    covered = sorted((p.partition, o) for p in pieces for o in range(p.start, p.end))
    expected = sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert covered == expected
