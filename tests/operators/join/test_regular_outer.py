"""The outer regular join (docs/pipeline-spec.md, "Outer regular joins"): a padded row at
once, deleted when its row's first partner arrives; each rule, then the property that
any interleaving of the two inputs, with or without a restore, folds to the SQL outer
join of the whole input and never upserts a row id's ``seq`` twice."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.state_cache import StateMaps
from service.core.time import MAX_TIMESTAMP
from service.operators.base import Upsert
from service.operators.join.factory import build_join_operator
from service.operators.join.regular import RegularJoinOperator
from service.operators.join.regular_outer import OuterRegularJoinOperator
from service.operators.join.rows import How, JoinConfigError

from .reference import BACKENDS, PIPELINE, Backend, Driver, Event, in_bound, reference_interval

EVERYTHING = 10**9
"""Interval bounds wide enough that the interval join's reference is the regular one's."""


def join(
    how: How = How.LEFT, ttl: int | None = None, state_maps: StateMaps | None = None
) -> OuterRegularJoinOperator:
    return OuterRegularJoinOperator(
        PIPELINE, how, ttl, inputs=("auction", "person"), state_maps=state_maps
    )


def emitted(op: OuterRegularJoinOperator) -> list[tuple[str, int, Any, int]]:
    """``(id, seq, value or None, timestamp)`` of each upsert since the last call."""
    rows = [(r.id, r.seq, r.result, r.timestamp) for r in op.collector.results]
    op.collector.results.clear()
    return rows


def fold(upserts: list[Upsert]) -> dict[str, tuple[int, str]]:
    """The table an upsert stream folds to: id -> (timestamp, value JSON), the newest
    upsert of each id, a delete removing it."""
    table: dict[str, tuple[int, str]] = {}
    for row in upserts:
        if row.result is None:
            table.pop(row.id, None)
        else:
            table[row.id] = (row.timestamp, orjson.dumps(row.result).decode())
    return table


def sql_outer_join(left: list[Event], right: list[Event], how: How) -> dict[str, tuple[int, str]]:
    """The SQL answer over the whole input, as :func:`fold` writes a table."""
    rows = reference_interval(left, right, how, -EVERYTHING, EVERYTHING)
    return {ident: (ts, value) for ident, _key, ts, value, _window in rows}


def test_a_left_row_without_partner_is_emitted_padded_at_once() -> None:
    op = join()
    op.process_left([("k", 100, "a", 1, None)])
    assert emitted(op) == [("p|k|1|none", 0, {"left": "a", "right": None}, 100)]


def test_the_first_partner_deletes_the_padded_row_before_the_joined_row() -> None:
    op = join()
    op.process_left([("k", 100, "a", 1, None)])
    emitted(op)
    op.process_right([("k", 200, "b", 7, None)])
    assert emitted(op) == [
        ("p|k|1|none", 1, None, 200),
        ("p|k|1|7", 0, {"left": "a", "right": "b"}, 200),
    ]


def test_a_later_partner_only_adds_its_joined_row() -> None:
    op = join()
    op.process_left([("k", 100, "a", 1, None)])
    op.process_right([("k", 200, "b", 7, None)])
    emitted(op)
    op.process_right([("k", 150, "c", 8, None)])
    assert emitted(op) == [("p|k|1|8", 0, {"left": "a", "right": "c"}, 150)]


def test_a_left_join_never_pads_a_right_row() -> None:
    op = join(How.LEFT)
    op.process_right([("k", 100, "b", 7, None)])
    assert emitted(op) == []
    op.process_left([("k", 50, "a", 1, None)])
    assert emitted(op) == [("p|k|1|7", 0, {"left": "a", "right": "b"}, 100)]


def test_a_right_join_pads_right_rows_and_deletes_them_on_a_left_partner() -> None:
    op = join(How.RIGHT)
    op.process_left([("k", 10, "a", 1, None)])
    op.process_right([("j", 100, "b", 7, None)])
    op.process_left([("j", 50, "c", 2, None)])
    assert emitted(op) == [
        ("p|j|none|7", 0, {"left": None, "right": "b"}, 100),
        ("p|j|none|7", 1, None, 100),
        ("p|j|2|7", 0, {"left": "c", "right": "b"}, 100),
    ]


def test_a_full_join_pads_both_sides() -> None:
    op = join(How.FULL)
    op.process_left([("a", 10, "l", 1, None)])
    op.process_right([("b", 20, "r", 2, None)])
    assert [row[0] for row in emitted(op)] == ["p|a|1|none", "p|b|none|2"]


def test_an_expired_row_is_dropped_silently_and_a_late_partner_is_padded() -> None:
    """Flink's state TTL: nothing is retracted when a row expires."""
    op = join(How.FULL, ttl=50)
    op.process_left([("k", 100, "a", 1, None)])
    op.advance_watermark(150)
    assert emitted(op) == [("p|k|1|none", 0, {"left": "a", "right": None}, 100)]
    op.process_right([("k", 160, "b", 2, None)])
    assert emitted(op) == [("p|k|none|2", 0, {"left": None, "right": "b"}, 160)]


def test_which_rows_are_matched_survives_a_restore() -> None:
    op = join(How.FULL)
    op.process_left([("k", 100, "a", 1, None)])
    op.process_right([("k", 200, "b", 7, None)])
    op.process_right([("j", 200, "c", 8, None)])
    emitted(op)
    restored = join(How.FULL)
    restored.restore(op.snapshot())
    restored.process_left([("j", 300, "d", 2, None), ("k", 300, "e", 3, None)])
    assert emitted(restored) == [
        ("p|j|none|8", 1, None, 300),
        ("p|j|2|8", 0, {"left": "d", "right": "c"}, 300),
        ("p|k|3|7", 0, {"left": "e", "right": "b"}, 300),
    ]


def test_the_factory_builds_an_outer_regular_join_for_an_outer_how() -> None:
    spec = {"kind": "regular", "how": "full", "left": "auction", "right": "person"}
    op = build_join_operator(PIPELINE, spec, ("auction", "person"), late_output=False)
    assert type(op) is OuterRegularJoinOperator and op.how is How.FULL
    inner = build_join_operator(PIPELINE, {**spec, "how": "inner"}, ("a", "b"), False)
    assert type(inner) is RegularJoinOperator


def test_neither_class_builds_the_other_ones_how() -> None:
    with pytest.raises(JoinConfigError):
        RegularJoinOperator(PIPELINE, How.LEFT)
    with pytest.raises(JoinConfigError):
        OuterRegularJoinOperator(PIPELINE, How.INNER)


steps = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 6), st.integers(0, 8)), max_size=25
)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=300, deadline=None)
@given(
    how=st.sampled_from([How.LEFT, How.RIGHT, How.FULL]),
    left=steps,
    right=steps,
    schedule=st.lists(st.integers(0, 1), max_size=60),
    bound=st.integers(0, 8),
    every=st.integers(1, 3),
    restore=st.one_of(st.none(), st.integers(0, 60)),
)
def test_any_interleaving_folds_to_the_sql_outer_join_of_the_whole_input(
    backend: str,
    how: How,
    left: list[tuple[str, int, int]],
    right: list[tuple[str, int, int]],
    schedule: list[int],
    bound: int,
    every: int,
    restore: int | None,
) -> None:
    left_events, right_events = in_bound(left, bound), in_bound(right, bound)
    state = Backend(backend)

    def make() -> OuterRegularJoinOperator:
        return join(how, state_maps=state.state_maps())

    driver = Driver(make(), bound, state)
    driver.run(left_events, right_events, schedule, every, restore, make)
    upserts: list[Upsert] = driver.emitted  # type: ignore[assignment]
    seqs = [(row.id, row.seq) for row in upserts]
    assert len(seqs) == len(set(seqs))
    assert fold(upserts) == sql_outer_join(left_events, right_events, how)
    assert driver.late == 0


def test_the_end_of_input_changes_nothing() -> None:
    op = join(How.FULL)
    op.process_left([("k", 100, "a", 1, None)])
    emitted(op)
    op.advance_watermark(MAX_TIMESTAMP)
    assert emitted(op) == []
