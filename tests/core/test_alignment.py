"""Watermark alignment: what a partition may take, and which partitions are paused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.alignment import WatermarkAlignment
from service.core.errors import ConfigError
from service.core.time import MIN_TIMESTAMP
from service.core.watermarks import BoundedOutOfOrderness, StrictlyAscending


def stamped(*timestamps: int) -> list[tuple[str, int, Any]]:
    return [("k", ts, None) for ts in timestamps]


def at(watermark: int) -> BoundedOutOfOrderness:
    """A generator (bound 0) whose watermark is ``watermark``."""
    g = BoundedOutOfOrderness(0)
    g.on_event(watermark + 1, None)
    return g


def test_a_partition_takes_records_while_at_most_max_drift_ahead_of_the_others() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    # watermark before each: 2000, 2499, 2999, 3099 (> 3000: not taken)
    records = stamped(2500, 3000, 3100, 3200)
    assert alignment.admit(at(1999), records, 0, others=2000) == 3


def test_a_partition_more_than_max_drift_ahead_takes_nothing() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    assert alignment.admit(at(3001), stamped(3002), 0, others=2000) == 0


def test_a_partition_exactly_max_drift_ahead_takes_its_next_record() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    assert alignment.admit(at(3000), stamped(9000, 9001), 0, others=2000) == 1


def test_a_partition_with_no_other_to_align_with_takes_everything() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(0)
    assert alignment.admit(at(10**9), stamped(10**10, 10**11), 0, others=None) == 2


def test_before_another_partition_has_a_watermark_each_takes_only_its_first_record() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    fresh = BoundedOutOfOrderness(0)
    assert alignment.admit(fresh, stamped(5000, 5001), 0, others=MIN_TIMESTAMP) == 1
    assert alignment.admit(at(4999), stamped(5001), 0, others=MIN_TIMESTAMP) == 0


def test_a_partition_ahead_is_paused_and_resumed_once_within_max_drift() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    assert alignment.decide({0: 5000, 1: 2000}, {0: 2000, 1: 5000}, holding=()) == ([0], [])
    assert alignment.paused == {0}
    assert alignment.decide({0: 5000, 1: 3500}, {0: 3500, 1: 5000}, holding=()) == ([], [])
    assert alignment.decide({0: 5000, 1: 4000}, {0: 4000, 1: 5000}, holding=()) == ([], [0])
    assert alignment.paused == frozenset()
    assert (alignment.pauses, alignment.resumes) == (1, 1)


def test_a_partition_holding_records_stays_paused_until_it_holds_none() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    assert alignment.decide({0: 2500, 1: 2000}, {0: 2000, 1: 2500}, holding={0}) == ([0], [])
    assert alignment.decide({0: 2500, 1: 2000}, {0: 2000, 1: 2500}, holding=()) == ([], [0])


def test_the_partition_holding_the_minimum_is_never_paused() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(0)
    to_pause, _ = alignment.decide({0: 100, 1: 900, 2: 900}, {0: 900, 1: 100, 2: 100}, ())
    assert to_pause == [1, 2]


def test_nothing_is_paused_when_no_other_partition_counts() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(0)
    assert alignment.decide({0: 9000}, {0: None}, holding=()) == ([], [])


def test_a_revoked_paused_partition_is_forgotten_without_a_resume() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    alignment.decide({0: 5000, 1: 2000, 2: 2000}, {0: 2000, 1: 2000, 2: 2000}, ())
    assert alignment.decide({1: 2000, 2: 2000}, {1: 2000, 2: 2000}, ()) == ([], [])
    assert alignment.paused == frozenset()


def test_negative_max_drift_is_refused() -> None:
    with pytest.raises(ConfigError):
        WatermarkAlignment(-1)


@settings(max_examples=300, deadline=None)
@given(
    drift=st.integers(0, 50),
    bound=st.integers(-1, 20),
    streams=st.lists(
        st.lists(st.integers(0, 400), min_size=1, max_size=30), min_size=2, max_size=4
    ),
    order=st.lists(st.integers(0, 3), max_size=200),
)
def test_taking_records_as_admitted_keeps_every_partition_within_the_bound_and_never_stalls(
    drift: int, bound: int, streams: list[list[int]], order: list[int]
) -> None:
    """Partitions take records in a random interleaving, each only what alignment admits;
    a partition whose input is exhausted leaves the minimum (bounded input finishes it,
    unbounded input turns it idle). Every record is taken with its partition at most
    ``drift`` ahead of the others' minimum (once they all have a watermark); and however
    the turns fall, the partitions always take all their input (no deadlock). A bound of
    -1 is the strictly ascending generator (``W = max_ts``)."""
    alignment: WatermarkAlignment[int] = WatermarkAlignment(drift)
    generators = [
        BoundedOutOfOrderness(bound) if bound >= 0 else StrictlyAscending() for _ in streams
    ]
    records = [stamped(*s) for s in streams]
    taken = [0] * len(streams)

    def others(p: int) -> int | None:
        counted = [
            g.current_watermark
            for i, g in enumerate(generators)
            if i != p and taken[i] < len(records[i])
        ]
        return min(counted, default=None)

    def take(p: int) -> int:
        n = alignment.admit(generators[p], records[p], taken[p], others(p))
        for record in records[p][taken[p] : taken[p] + n]:
            minimum = others(p)
            if minimum is not None and minimum != MIN_TIMESTAMP:
                assert generators[p].current_watermark - minimum <= drift
            generators[p].on_event(record[1], None)
        taken[p] += n
        return n

    for p in order:
        if p < len(streams):
            take(p)
    for _ in range(sum(len(s) for s in streams) + 1):  # round robin until all is taken
        if not any(take(p) for p in range(len(streams))):
            break
    assert taken == [len(s) for s in streams]
