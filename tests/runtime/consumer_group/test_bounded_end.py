"""Bounded input's arithmetic: when a partition and the pipeline are finished, and what
is committed again (consumer_group/bounded_end.py)."""

from __future__ import annotations

from hypothesis import assume, given, seed, settings
from hypothesis import strategies as st

from service.runtime.consumer_group.bounded_end import (
    EndCheck,
    Held,
    check_end,
    must_ask_position,
    past_gap,
    reached,
    readable_end,
)


def test_a_negative_readable_end_is_not_known_yet() -> None:
    assert readable_end(-1) is None
    assert readable_end(None) is None
    assert readable_end(0) == 0


def test_a_gap_moves_the_next_offset_to_the_consumer_s_position() -> None:
    assert past_gap(10, 14, None) == 14


def test_a_gap_never_moves_the_next_offset_past_the_end() -> None:
    assert past_gap(10, 14, 12) == 12


def test_a_gap_never_moves_the_next_offset_back() -> None:
    assert past_gap(10, 8, None) == 10
    assert past_gap(10, 14, 9) == 10


def test_a_partition_short_of_its_end_that_fetched_nothing_asks_its_position() -> None:
    assert must_ask_position(5, 10, fetched=False)
    assert must_ask_position(None, 10, fetched=False)


def test_a_partition_that_fetched_records_does_not_ask_its_position() -> None:
    assert not must_ask_position(5, 10, fetched=True)


def test_a_partition_at_its_end_does_not_ask_its_position() -> None:
    assert not must_ask_position(10, 10, fetched=False)


def test_a_partition_is_finished_at_or_past_its_end() -> None:
    assert reached(10, 10)
    assert reached(11, 10)
    assert not reached(9, 10)
    assert not reached(None, 0)


def test_a_partition_held_elsewhere_is_done_once_the_group_committed_its_end() -> None:
    assert check_end(10, None, 10, source=True) == EndCheck(True, None, None)
    assert check_end(10, None, 9, source=True) == EndCheck(False, None, None)
    assert check_end(10, None, None, source=True) == EndCheck(False, None, None)


def test_a_held_partition_s_own_end_counts_over_the_probed_one() -> None:
    held = Held(end_offset=8, finished=False, next_offset=5)
    assert check_end(10, held, 8, source=True).done  # at its own end, short of the probed
    assert not check_end(6, held, 7, source=True).done  # past the probed end, short of its own


def test_a_partition_finished_here_is_done_whatever_the_group_committed() -> None:
    held = Held(end_offset=10, finished=True, next_offset=10)
    assert check_end(10, held, 10, source=True) == EndCheck(True, 10, None)


def test_a_partition_finished_here_whose_commit_is_behind_is_committed_again() -> None:
    held = Held(end_offset=10, finished=True, next_offset=12)
    assert check_end(10, held, 7, source=True) == EndCheck(True, 12, 12)
    assert check_end(10, held, None, source=True) == EndCheck(True, 12, 12)


def test_a_finished_partition_without_a_next_offset_is_committed_at_its_end() -> None:
    held = Held(end_offset=10, finished=True, next_offset=None)
    assert check_end(10, held, None, source=True) == EndCheck(True, None, 10)


def test_a_finished_shuffle_partition_ends_at_the_topic_s_end() -> None:
    held = Held(end_offset=None, finished=True, next_offset=7)
    assert check_end(9, held, 7, source=False) == EndCheck(True, 9, 9)


def test_a_finished_source_partition_keeps_its_next_offset() -> None:
    held = Held(end_offset=10, finished=True, next_offset=7)
    assert check_end(10, held, 10, source=True).next_offset == 7


offsets = st.integers(0, 50)
held_partitions = st.none() | st.builds(
    Held, end_offset=st.none() | offsets, finished=st.booleans(), next_offset=st.none() | offsets
)


@seed(4901)
@settings(max_examples=500, deadline=None)
@given(probed=offsets, held=held_partitions, committed=st.none() | offsets, source=st.booleans())
def test_a_check_only_ever_adds_what_a_finished_partition_needs(
    probed: int, held: Held | None, committed: int | None, source: bool
) -> None:
    check = check_end(probed, held, committed, source=source)
    if held is None:
        assert check.next_offset is None and check.recommit is None
        return
    end = held.end_offset if held.end_offset is not None else probed
    if held.finished:
        assert check.done
    else:
        assert check.done == (committed is not None and committed >= end)
        assert check.recommit is None and check.next_offset == held.next_offset
    if check.recommit is not None:
        assert committed is None or committed < end
    if held.next_offset is not None:
        assert check.next_offset is not None and check.next_offset >= held.next_offset


@seed(4902)
@settings(max_examples=500, deadline=None)
@given(
    probed=offsets,
    end=st.none() | offsets,
    beyond=st.integers(0, 5),
    committed=st.none() | offsets,
    source=st.booleans(),
)
def test_once_the_commit_is_made_again_the_next_check_commits_nothing(
    probed: int, end: int | None, beyond: int, committed: int | None, source: bool
) -> None:
    reached_end = end if end is not None else probed
    assume(source or end is None)  # a shuffle partition has no end of its own
    # a finished source partition has read to its end (reached); a shuffle one any way
    held = Held(end, True, reached_end + beyond if source else None)
    first = check_end(probed, held, committed, source=source)
    after = Held(end, True, first.next_offset)
    committed = first.recommit if first.recommit is not None else committed
    assert check_end(probed, after, committed, source=source).recommit is None


@seed(4903)
@settings(max_examples=300, deadline=None)
@given(next_offset=offsets, position=offsets, end=st.none() | offsets)
def test_a_gap_moves_forward_only_and_stays_within_the_end(
    next_offset: int, position: int, end: int | None
) -> None:
    moved = past_gap(next_offset, position, end)
    assert moved >= next_offset
    assert moved <= max(next_offset, position)
    if end is not None:
        assert moved <= max(next_offset, end)
