"""The event-time temporal join (semantics.md section 10): each rule, then the property
that any in-bound interleaving of the two inputs gives the reference's rows."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.state_cache import StateMaps
from service.core.time import MAX_TIMESTAMP
from service.operators.join.rows import How, JoinConfigError, Side
from service.operators.join.temporal import TemporalJoinOperator

from .reference import (
    BACKENDS,
    PIPELINE,
    Backend,
    Driver,
    Event,
    in_bound,
    out,
    reference_temporal,
)


def join(
    how: How = How.INNER, lateness: int = 0, state_maps: StateMaps | None = None
) -> TemporalJoinOperator:
    return TemporalJoinOperator(
        PIPELINE, how, lateness, inputs=("orders", "rates"), state_maps=state_maps
    )


def rows(op: TemporalJoinOperator) -> list[tuple[str, int, Any]]:
    emitted = [(r.id, r.timestamp, r.value) for r in op.collector.results]
    op.collector.results.clear()
    return emitted


def test_a_left_row_waits_for_the_watermark_and_takes_the_version_valid_at_its_time() -> None:
    op = join()
    op.process_right([("eur", 10, 1.1, 1, None), ("eur", 20, 1.2, 2, None)])
    op.process_left([("eur", 15, "order", 7, None)])
    op.process_right([("eur", 14, 1.15, 3, None)])  # arrives after, still valid at 15
    op.advance_watermark(14)
    assert rows(op) == []
    op.advance_watermark(15)
    assert rows(op) == [("p|eur|7|3", 15, {"left": "order", "right": 1.15})]


def test_a_version_is_valid_from_its_own_time_on() -> None:
    op = join()
    op.process_right([("eur", 15, 1.5, 1, None)])
    op.process_left([("eur", 15, "at", 2, None), ("eur", 14, "before", 3, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert [r[0] for r in rows(op)] == ["p|eur|2|1"]  # nothing was valid at 14


def test_a_tombstone_deletes_the_row_from_its_time_on_and_left_pads() -> None:
    op = join(How.LEFT)
    op.process_right([("eur", 10, 1.1, 1, None), ("eur", 20, None, 2, None)])
    op.process_left([("eur", 19, "a", 3, None), ("eur", 21, "b", 4, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert rows(op) == [
        ("p|eur|3|1", 19, {"left": "a", "right": 1.1}),
        ("p|eur|4|none", 21, {"left": "b", "right": None}),
    ]


def test_of_two_versions_at_one_time_the_later_to_arrive_wins() -> None:
    op = join()
    op.process_right([("eur", 10, "first", 1, None), ("eur", 10, "second", 2, None)])
    op.process_left([("eur", 12, "x", 3, None)])
    op.advance_watermark(12)
    assert rows(op) == [("p|eur|3|2", 12, {"left": "x", "right": "second"})]


def test_a_left_row_at_or_below_the_watermark_is_late_and_names_its_input() -> None:
    op = join()
    op.advance_watermark(10)
    op.process_left([("eur", 10, "x", 3, "source")])
    (late,) = op.collector.late
    assert (late.source, late.input) == ("source", "orders")


def test_only_the_newest_version_at_or_below_the_watermark_is_kept() -> None:
    op = join()
    op.process_right([("eur", ts, ts, ts, None) for ts in (10, 20, 30, 40)])
    op.advance_watermark(35)
    assert op.rows_held(Side.RIGHT) == 2  # 30 answers for (35, 40), 40 for later
    op.process_right([("usd", 5, None, 1, None)])
    op.advance_watermark(36)
    assert op.rows_held(Side.RIGHT) == 2  # the tombstone went with its key
    assert op.gauges().keys == 1


def test_allowed_lateness_keeps_the_versions_a_late_row_may_ask_for() -> None:
    op = join(lateness=10)
    op.process_right([("eur", 10, "a", 1, None), ("eur", 20, "b", 2, None)])
    op.advance_watermark(25)
    op.process_left([("eur", 16, "late", 3, None)])  # 16 + 10 > 25: allowed, joined now
    assert rows(op) == [("p|eur|3|1", 16, {"left": "late", "right": "a"})]


@pytest.mark.parametrize("how", [How.RIGHT, How.FULL, How.SEMI, How.ANTI])
def test_a_temporal_join_is_inner_or_left(how: How) -> None:
    with pytest.raises(JoinConfigError):
        join(how)


def test_a_restored_temporal_join_goes_on_as_if_it_had_never_stopped() -> None:
    op = join(How.LEFT)
    op.process_right([("eur", 10, "a", 1, None), ("eur", 20, "b", 2, None)])
    op.process_left([("eur", 25, "x", 3, None), ("gbp", 5, "y", 4, None)])
    op.advance_watermark(12)
    rows(op)
    restored = join(How.LEFT)
    restored.restore_changes(op.snapshot_changes().items())
    for each in (op, restored):
        each.process_right([("eur", 22, "c", 5, None)])
        each.advance_watermark(MAX_TIMESTAMP)
    assert sorted(rows(restored)) == sorted(rows(op))
    assert restored.rows_held(Side.LEFT) == 0


steps = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 6), st.integers(0, 8)), max_size=25
)


def with_tombstones(events: list[Event], every: int) -> list[Event]:
    return [
        (k, ts, None if every and i % every == every - 1 else v)
        for i, (k, ts, v) in enumerate(events)
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=400, deadline=None)
@given(
    left=steps,
    right=steps,
    schedule=st.lists(st.integers(0, 1), max_size=60),
    how=st.sampled_from([How.INNER, How.LEFT]),
    tombstones=st.integers(0, 4),
    bound=st.integers(0, 8),
    every=st.integers(1, 3),
    restore=st.one_of(st.none(), st.integers(0, 60)),
)
def test_any_in_bound_interleaving_gives_the_reference_rows(
    backend: str,
    left: list[tuple[str, int, int]],
    right: list[tuple[str, int, int]],
    schedule: list[int],
    how: How,
    tombstones: int,
    bound: int,
    every: int,
    restore: int | None,
) -> None:
    left_events = in_bound(left, bound)
    right_events = with_tombstones(in_bound(right, bound), tombstones)

    state = Backend(backend)

    def make() -> TemporalJoinOperator:
        return join(how, state_maps=state.state_maps())

    driver = Driver(make(), bound, state)
    driver.run(left_events, right_events, schedule, every, restore, make)
    emitted = [out(r) for r in driver.emitted]
    assert len(emitted) == len(set(emitted))
    assert set(emitted) == reference_temporal(left_events, right_events, how)
    assert driver.late == 0
    assert driver.operator.rows_held(Side.LEFT) == 0
    assert driver.operator.rows_held(Side.RIGHT) <= len({k for k, _, _ in right_events})
