"""The window join (semantics.md section 10): each rule, then the property that any
in-bound interleaving of the two inputs gives the reference's rows."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.state_cache import StateMaps
from service.core.time import MAX_TIMESTAMP
from service.operators.join.rows import How, JoinConfigError
from service.operators.join.window import WindowJoinOperator
from service.operators.window.assigners import SessionAssigner, SlidingAssigner, TumblingAssigner

from .reference import BACKENDS, PIPELINE, Backend, Driver, in_bound, out, reference_window

TUMBLING = TumblingAssigner(10)


def join(
    how: How = How.INNER,
    assigner: Any = TUMBLING,
    lateness: int = 0,
    state_maps: StateMaps | None = None,
) -> WindowJoinOperator:
    return WindowJoinOperator(
        PIPELINE, how, assigner, lateness, inputs=("clicks", "views"), state_maps=state_maps
    )


def rows(op: WindowJoinOperator) -> list[tuple[str, int, Any]]:
    emitted = [(r.id, r.timestamp, r.value) for r in op.collector.results]
    op.collector.results.clear()
    return emitted


def test_pairs_of_a_window_are_emitted_when_the_watermark_reaches_its_end_minus_one() -> None:
    op = join()
    op.process_left([("k", 3, "l", 1, None)])
    op.process_right([("k", 8, "r", 2, None), ("k", 10, "next window", 3, None)])
    op.advance_watermark(8)
    assert rows(op) == []
    op.advance_watermark(9)
    assert rows(op) == [("p|k|0|10|1|2", 9, {"left": "l", "right": "r"})]
    assert op.collector.results == []


def test_outer_rows_are_padded_per_window_without_a_partner() -> None:
    op = join(How.FULL)
    op.process_left([("k", 3, "l", 1, None)])
    op.process_right([("k", 13, "r", 2, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert rows(op) == [
        ("p|k|0|10|1|none", 9, {"left": "l", "right": None}),
        ("p|k|10|20|none|2", 19, {"left": None, "right": "r"}),
    ]


def test_semi_emits_each_left_row_with_a_partner_once_and_anti_those_without() -> None:
    for how, want in ((How.SEMI, ["p|k|0|10|1|none"]), (How.ANTI, ["p|j|0|10|2|none"])):
        op = join(how)
        op.process_left([("k", 3, "l", 1, None), ("j", 4, "l2", 2, None)])
        op.process_right([("k", 5, "r", 3, None), ("k", 6, "r2", 4, None)])
        op.advance_watermark(MAX_TIMESTAMP)
        assert [r[0] for r in rows(op)] == want


def test_a_pair_meets_in_every_sliding_window_both_rows_are_in() -> None:
    op = join(assigner=SlidingAssigner(10, 5))
    op.process_left([("k", 7, "l", 1, None)])
    op.process_right([("k", 8, "r", 2, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert [r[0] for r in rows(op)] == ["p|k|0|10|1|2", "p|k|5|15|1|2"]


def test_a_row_whose_every_window_fired_is_late_and_names_its_input() -> None:
    op = join()
    op.advance_watermark(9)
    op.process_right([("k", 9, "r", 2, "late one")])
    (late,) = op.collector.late
    assert (late.source, late.timestamp, late.input) == ("late one", 9, "views")
    assert op.gauges().windows_open == 0


def test_a_row_below_the_watermark_joins_while_its_window_has_not_fired() -> None:
    """Flink's rule: lateness is the window's, not the row's time against W."""
    op = join()
    op.process_left([("k", 1, "l", 1, None)])
    op.advance_watermark(5)
    op.process_right([("k", 2, "r", 2, None)])  # 2 <= W, but the window ends at 9
    op.advance_watermark(9)
    assert [r[0] for r in rows(op)] == ["p|k|0|10|1|2"]
    assert op.collector.late == []


def test_allowed_lateness_joins_a_late_row_at_once_with_the_partners_kept() -> None:
    op = join(lateness=20)
    op.process_left([("k", 3, "l", 1, None)])
    op.advance_watermark(9)
    assert rows(op) == []  # fired, nothing to pair
    op.process_right([("k", 4, "r", 2, None)])
    assert rows(op) == [("p|k|0|10|1|2", 9, {"left": "l", "right": "r"})]
    op.advance_watermark(29)  # cleanup at 9 + 20
    assert op.gauges().windows_open == 0


@pytest.mark.parametrize("how", [How.LEFT, How.RIGHT, How.FULL, How.SEMI, How.ANTI])
def test_only_an_inner_window_join_takes_allowed_lateness(how: How) -> None:
    with pytest.raises(JoinConfigError):
        join(how, lateness=1)


def test_session_windows_are_refused() -> None:
    with pytest.raises(JoinConfigError):
        join(assigner=SessionAssigner(10))


def test_a_restored_window_join_goes_on_as_if_it_had_never_stopped() -> None:
    op = join(How.FULL, SlidingAssigner(10, 5))
    op.process_left([("k", 3, "l", 1, None), ("j", 7, "l2", 2, None)])
    op.process_right([("k", 6, "r", 3, None)])
    op.advance_watermark(4)
    rows(op)
    restored = join(How.FULL, SlidingAssigner(10, 5))
    restored.restore_changes(op.snapshot_changes().items())
    for each in (op, restored):
        each.process_right([("j", 8, "r2", 4, None)])
        each.advance_watermark(MAX_TIMESTAMP)
    assert sorted(rows(restored)) == sorted(rows(op))
    assert restored.gauges().windows_open == 0


steps = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 6), st.integers(0, 8)), max_size=25
)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=400, deadline=None)
@given(
    left=steps,
    right=steps,
    schedule=st.lists(st.integers(0, 1), max_size=60),
    how=st.sampled_from(list(How)),
    size=st.integers(1, 12),
    slide=st.one_of(st.none(), st.integers(1, 12)),
    bound=st.integers(0, 8),
    every=st.integers(1, 3),
    restore=st.one_of(st.none(), st.integers(0, 60)),
)
def test_any_in_bound_interleaving_gives_the_reference_rows_and_ends_empty(
    backend: str,
    left: list[tuple[str, int, int]],
    right: list[tuple[str, int, int]],
    schedule: list[int],
    how: How,
    size: int,
    slide: int | None,
    bound: int,
    every: int,
    restore: int | None,
) -> None:
    left_events, right_events = in_bound(left, bound), in_bound(right, bound)
    assigner = TumblingAssigner(size) if slide is None else SlidingAssigner(size, slide)

    state = Backend(backend)

    def make() -> WindowJoinOperator:
        return join(how, assigner, state_maps=state.state_maps())

    driver = Driver(make(), bound, state)
    driver.run(left_events, right_events, schedule, every, restore, make)
    emitted = [out(r) for r in driver.emitted]
    assert len(emitted) == len(set(emitted))
    assert set(emitted) == reference_window(left_events, right_events, how, assigner.assign)
    assert driver.late == 0
    assert driver.operator.gauges().windows_open == 0
    assert all(len(cache) == 0 for cache in driver.operator.state_maps())
