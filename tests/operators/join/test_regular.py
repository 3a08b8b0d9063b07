"""The regular join (docs/joins.md, "Regular join"): each rule, then the properties that
any in-bound interleaving gives every same-key pair once, and, with a state TTL, at
least every pair at most the TTL apart."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.state_cache import StateMaps
from service.core.time import MAX_TIMESTAMP
from service.operators.join.factory import build_join_operator
from service.operators.join.regular import RegularJoinOperator
from service.operators.join.rows import How, JoinConfigError

from .reference import (
    BACKENDS,
    PIPELINE,
    Backend,
    Driver,
    Event,
    Out,
    _out,
    in_bound,
    out,
    records,
)


def join(
    ttl: int | None = None, how: How = How.INNER, state_maps: StateMaps | None = None
) -> RegularJoinOperator:
    return RegularJoinOperator(
        PIPELINE, how, ttl, inputs=("auction", "person"), state_maps=state_maps
    )


def rows(op: RegularJoinOperator) -> list[tuple[str, int, Any]]:
    emitted = [(r.id, r.timestamp, r.value) for r in op.collector.results]
    op.collector.results.clear()
    return emitted


def reference_regular(left: list[Event], right: list[Event]) -> set[Out]:
    """Every pair of a left and a right row with the same key."""
    return {
        _out(lkey, max(lts, rts), i, j, lvalue, rvalue)
        for i, (lkey, lts, lvalue) in enumerate(left)
        for j, (rkey, rts, rvalue) in enumerate(right)
        if lkey == rkey
    }


def test_an_arriving_row_is_joined_with_every_held_row_of_the_other_side_at_once() -> None:
    op = join()
    op.process_left([("k", 100, "a1", 1, None), ("k", 300, "a2", 2, None)])
    assert rows(op) == []
    op.process_right([("k", 200, "p", 7, None)])
    assert rows(op) == [
        ("p|k|1|7", 200, {"left": "a1", "right": "p"}),
        ("p|k|2|7", 300, {"left": "a2", "right": "p"}),
    ]


def test_rows_of_other_keys_never_match() -> None:
    op = join()
    op.process_left([("a", 100, "l", 0, None)])
    op.process_right([("b", 100, "r", 0, None)])
    assert rows(op) == []


def test_without_a_ttl_no_row_is_late_and_none_is_ever_dropped() -> None:
    op = join()
    op.process_left([("k", 100, "l", 1, None)])
    op.advance_watermark(MAX_TIMESTAMP - 1)
    op.process_right([("k", 5, "r", 2, None)])
    assert rows(op) == [("p|k|1|2", 100, {"left": "l", "right": "r"})]
    assert (op.collector.dropped_late, op.rows_held(0), op.rows_held(1)) == (0, 1, 1)


def test_with_a_ttl_a_row_is_dropped_when_the_watermark_reaches_its_time_plus_the_ttl() -> None:
    op = join(ttl=50)
    op.process_left([("k", 100, "l", 1, None)])
    op.advance_watermark(149)
    op.process_right([("k", 149, "r", 2, None)])
    assert [r[0] for r in rows(op)] == ["p|k|1|2"]
    op.advance_watermark(150)
    assert (op.rows_held(0), op.rows_held(1)) == (0, 1)
    op.process_right([("k", 150, "r2", 3, None)])
    assert rows(op) == []


def test_a_row_expired_on_arrival_is_joined_with_the_held_rows_but_not_kept() -> None:
    op = join(ttl=50)
    op.process_right([("k", 200, "r", 2, None)])
    op.advance_watermark(160)
    op.process_left([("k", 100, "l", 1, None)])  # 100 + 50 <= 160
    assert [r[0] for r in rows(op)] == ["p|k|1|2"]
    assert op.rows_held(0) == 0


def test_with_a_ttl_the_state_is_empty_after_the_final_watermark() -> None:
    op = join(ttl=10)
    op.process_left([("k", ts, ts, ts, None) for ts in range(0, 100, 7)])
    op.process_right([("j", ts, ts, ts, None) for ts in range(0, 100, 11)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert (op.rows_held(0), op.rows_held(1), op.gauges().keys) == (0, 0, 0)


def test_a_restored_join_goes_on_as_if_it_had_never_stopped() -> None:
    op = join(ttl=1000)
    op.process_left([("k", 100, "l", 1, None), ("j", 100, "l2", 2, None)])
    op.process_right([("k", 105, "r", 3, None)])
    rows(op)
    restored = join(ttl=1000)
    restored.restore_changes(op.snapshot_changes().items())
    for each in (op, restored):
        each.process_right([("k", 108, "r2", 4, None), ("j", 900, "r3", 5, None)])
        each.advance_watermark(1100)  # drops the rows at 100 and 105
        each.process_right([("k", 1101, "r4", 6, None)])
        each.advance_watermark(MAX_TIMESTAMP)
    assert sorted(rows(restored)) == sorted(rows(op))
    assert restored.rows_held(0) == op.rows_held(0) == 0


def test_a_whole_snapshot_restores_the_held_rows() -> None:
    op = join()
    op.process_left([("k", 100, "l", 1, None)])
    op.process_right([("j", 100, "r", 2, None)])
    restored = join()
    restored.restore(op.snapshot())
    restored.process_right([("k", 50, "r2", 3, None)])
    assert rows(restored) == [("p|k|1|3", 100, {"left": "l", "right": "r2"})]
    assert (restored.rows_held(0), restored.rows_held(1)) == (1, 2)


def test_only_the_keys_changed_since_the_last_checkpoint_are_written() -> None:
    op = join(ttl=10)
    op.process_left([("a", 100, "l", 1, None), ("b", 100, "l", 2, None)])
    assert set(op.snapshot_changes()) == {"l:a", "l:b", "meta"}
    op.process_right([("a", 105, "r", 3, None)])  # a match changes no left row
    assert set(op.snapshot_changes()) == {"r:a", "meta"}
    op.advance_watermark(MAX_TIMESTAMP)
    changes = op.snapshot_changes()
    assert {k: v for k, v in changes.items() if k != "meta"} == {
        "l:a": None,
        "l:b": None,
        "r:a": None,
    }


@pytest.mark.parametrize("how", [How.LEFT, How.RIGHT, How.FULL, How.SEMI, How.ANTI])
def test_the_append_only_regular_join_is_inner_only(how: How) -> None:
    """Outer hows are the outer regular join's (test_regular_outer.py)."""
    with pytest.raises(JoinConfigError, match="is inner, not"):
        join(how=how)


def test_a_ttl_below_one_millisecond_is_refused() -> None:
    with pytest.raises(JoinConfigError):
        join(ttl=0)


def test_the_factory_builds_a_regular_join_with_its_ttl() -> None:
    spec = {"kind": "regular", "left": "auction", "right": "person", "state_ttl_ms": 60_000}
    op = build_join_operator(PIPELINE, spec, ("auction", "person"), late_output=False)
    assert isinstance(op, RegularJoinOperator) and op.ttl == 60_000


def test_a_join_is_not_fed_one_input() -> None:
    with pytest.raises(TypeError):
        join().process_batch(records([("k", 1, None)]))


steps = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 6), st.integers(0, 8)), max_size=25
)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=300, deadline=None)
@given(
    left=steps,
    right=steps,
    schedule=st.lists(st.integers(0, 1), max_size=60),
    bound=st.integers(0, 8),
    every=st.integers(1, 3),
    restore=st.one_of(st.none(), st.integers(0, 60)),
)
def test_any_interleaving_gives_every_same_key_pair_once(
    backend: str,
    left: list[tuple[str, int, int]],
    right: list[tuple[str, int, int]],
    schedule: list[int],
    bound: int,
    every: int,
    restore: int | None,
) -> None:
    left_events, right_events = in_bound(left, bound), in_bound(right, bound)
    state = Backend(backend)

    def make() -> RegularJoinOperator:
        return join(state_maps=state.state_maps())

    driver = Driver(make(), bound, state)
    driver.run(left_events, right_events, schedule, every, restore, make)
    got = [out(r) for r in driver.emitted]
    assert len(got) == len(set(got))
    assert set(got) == reference_regular(left_events, right_events)
    assert driver.late == 0


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=300, deadline=None)
@given(
    left=steps,
    right=steps,
    schedule=st.lists(st.integers(0, 1), max_size=60),
    bound=st.integers(0, 8),
    ttl=st.integers(1, 20),
    every=st.integers(1, 3),
    restore=st.one_of(st.none(), st.integers(0, 60)),
)
def test_with_a_ttl_every_pair_at_most_the_ttl_apart_is_joined_and_the_state_ends_empty(
    backend: str,
    left: list[tuple[str, int, int]],
    right: list[tuple[str, int, int]],
    schedule: list[int],
    bound: int,
    ttl: int,
    every: int,
    restore: int | None,
) -> None:
    """A pair further apart may or may not meet (it depends on how far the watermark had
    come when the second row arrived), but never twice, and nothing outside the pairs."""
    left_events, right_events = in_bound(left, bound), in_bound(right, bound)
    state = Backend(backend)

    def make() -> RegularJoinOperator:
        return join(ttl, state_maps=state.state_maps())

    driver = Driver(make(), bound, state)
    driver.run(left_events, right_events, schedule, every, restore, make)
    got = [out(r) for r in driver.emitted]
    assert len(got) == len(set(got))
    assert set(got) <= reference_regular(left_events, right_events)
    near = {
        row
        for row in reference_regular(left_events, right_events)
        if _apart(row, left_events, right_events) <= ttl
    }
    assert near <= set(got)
    assert (driver.operator.rows_held(0), driver.operator.rows_held(1)) == (0, 0)
    assert all(len(cache) == 0 for cache in driver.operator.state_maps())


def _apart(row: Out, left: list[Event], right: list[Event]) -> int:
    """How far apart in time the two rows of an output row are."""
    _, _, lpos, rpos = row[0].split("|")
    return abs(left[int(lpos)][1] - right[int(rpos)][1])
