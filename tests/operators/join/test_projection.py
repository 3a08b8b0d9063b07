"""A join's ``select``: SQL expressions over ``<input>.<path>``, a missing side NULL."""

from __future__ import annotations

import pytest

from service.core.time import MAX_TIMESTAMP
from service.operators.join.interval import IntervalJoinOperator
from service.operators.join.projection import REASON_SELECT, SelectError, compile_projection
from service.operators.join.regular_outer import OuterRegularJoinOperator
from service.operators.join.rows import How
from service.operators.join.window import WindowJoinOperator
from service.operators.window.assigners import TumblingAssigner

INPUTS = ("orders", "payments")


def test_fields_are_expressions_over_both_inputs() -> None:
    project = compile_projection(
        {"order_id": "orders.order_id", "delay_ms": "payments.paid_at - orders.ts"}, INPUTS
    )
    order = {"order_id": "o1", "ts": 100}
    assert project(order, {"paid_at": 160}) == {"order_id": "o1", "delay_ms": 60}


def test_a_missing_side_reads_as_null() -> None:
    project = compile_projection(
        {"paid": "payments.paid_at IS NOT NULL", "delay_ms": "payments.paid_at - orders.ts"},
        INPUTS,
    )
    assert project({"ts": 100}, None) == {"paid": False, "delay_ms": None}


def test_nested_paths_are_read() -> None:
    project = compile_projection({"city": "orders.address.city"}, INPUTS)
    assert project({"address": {"city": "Lyon"}}, None) == {"city": "Lyon"}


def test_every_problem_is_reported_with_its_output_field() -> None:
    with pytest.raises(SelectError) as caught:
        compile_projection(
            {"a": "orders.x +", "b": "customers.name", "c": "payments.amount"}, INPUTS
        )
    fields = [field for field, _ in caught.value.problems]
    assert fields[0] == "a" and fields[-1] == "b"
    assert "customers is not an input of the join" in caught.value.problems[-1][1]


def test_an_empty_select_is_refused() -> None:
    with pytest.raises(SelectError):
        compile_projection({}, INPUTS)


def test_a_pair_whose_select_fails_goes_to_the_dead_letters_not_to_the_results() -> None:
    project = compile_projection({"ratio": "orders.amount / payments.amount"}, INPUTS)
    op = IntervalJoinOperator("p", How.INNER, 0, 10, project=project, inputs=INPUTS)
    op.process_left([("k", 100, {"amount": 6}, 1, None)])
    op.process_right([("k", 101, {"amount": 0}, 2, None), ("k", 102, {"amount": 3}, 3, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert [(r.id, r.value) for r in op.collector.results] == [("p|k|1|3", {"ratio": 2.0})]
    (failed,) = op.collector.failed
    assert (failed.key, failed.reason) == ("k", REASON_SELECT)
    assert "division by zero" in failed.detail and "p|k|1|2" in failed.detail


def test_a_window_join_selects_the_bounds_of_its_rows_window() -> None:
    project = compile_projection(
        {"id": "orders.order_id", "start": "window.start", "end": "window.end"},
        INPUTS,
        window=True,
    )
    op = WindowJoinOperator("p", How.INNER, TumblingAssigner(10), project=project, inputs=INPUTS)
    op.process_left([("k", 13, {"order_id": "o1"}, 1, None)])
    op.process_right([("k", 15, {}, 2, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert [r.value for r in op.collector.results] == [{"id": "o1", "start": 10, "end": 20}]


def test_the_window_bounds_are_refused_outside_a_window_join() -> None:
    with pytest.raises(SelectError) as caught:
        compile_projection({"start": "window.start"}, INPUTS)
    assert "a window join's" in caught.value.problems[0][1]


def test_a_window_has_a_start_and_an_end_only() -> None:
    with pytest.raises(SelectError) as caught:
        compile_projection({"t": "window.time"}, INPUTS, window=True)
    assert caught.value.problems[0][0] == "t"


def test_an_input_named_window_is_refused_when_the_bounds_can_be_read() -> None:
    with pytest.raises(SelectError) as caught:
        compile_projection({"a": "window.a"}, ("window", "payments"), window=True)
    assert "hides the window's bounds" in caught.value.problems[0][1]


def test_a_semi_joins_select_cannot_read_the_right_input() -> None:
    with pytest.raises(SelectError) as caught:
        compile_projection(
            {"id": "orders.order_id", "paid": "payments.paid_at"}, INPUTS, right_row=False
        )
    assert [field for field, _ in caught.value.problems] == ["paid"]
    assert "no right row" in caught.value.problems[0][1]


def test_a_semi_window_join_selects_each_matched_left_row_with_its_window() -> None:
    project = compile_projection(
        {"id": "orders.order_id", "start": "window.start"}, INPUTS, window=True, right_row=False
    )
    op = WindowJoinOperator("p", How.SEMI, TumblingAssigner(10), project=project, inputs=INPUTS)
    op.process_left([("k", 3, {"order_id": "o1"}, 1, None), ("j", 4, {"order_id": "o2"}, 2, None)])
    op.process_right([("k", 5, {}, 3, None), ("k", 6, {}, 4, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert [r.value for r in op.collector.results] == [{"id": "o1", "start": 0}]


def test_a_where_keeps_the_rows_whose_condition_over_both_sides_is_true() -> None:
    project = compile_projection(
        {"order_id": "orders.order_id"}, INPUTS, where="payments.paid_at <= orders.due"
    )
    assert project({"order_id": "o1", "due": 200}, {"paid_at": 200}) == {"order_id": "o1"}
    assert project({"order_id": "o1", "due": 200}, {"paid_at": 201}) is None


def test_a_where_drops_a_row_whose_condition_is_null() -> None:
    project = compile_projection(None, INPUTS, where="payments.paid_at <= orders.due")
    assert project({"due": 200}, None) is None
    assert project({"due": 200}, {"paid_at": 1}) == {
        "left": {"due": 200},
        "right": {"paid_at": 1},
    }


def test_a_where_problem_is_reported_without_an_output_field() -> None:
    with pytest.raises(SelectError) as caught:
        compile_projection({"a": "orders.a"}, INPUTS, where="customers.x > orders.y")
    ((field, message),) = caught.value.problems
    assert field is None and "customers is not an input of the join" in message


def test_an_interval_join_emits_only_the_pairs_its_where_keeps() -> None:
    project = compile_projection(
        {"price": "payments.price"}, INPUTS, where="payments.ts <= orders.expires"
    )
    op = IntervalJoinOperator("p", How.INNER, 0, 10, project=project, inputs=INPUTS)
    op.process_left([("k", 100, {"expires": 104}, 1, None)])
    op.process_right(
        [("k", 103, {"ts": 103, "price": 5}, 2, None), ("k", 106, {"ts": 106, "price": 9}, 3, None)]
    )
    op.advance_watermark(MAX_TIMESTAMP)
    assert [(r.id, r.value) for r in op.collector.results] == [("p|k|1|2", {"price": 5})]
    assert op.collector.failed == []


def test_a_where_that_is_not_boolean_sends_the_pair_to_the_dead_letters() -> None:
    project = compile_projection(None, INPUTS, where="orders.amount + payments.amount")
    op = IntervalJoinOperator("p", How.INNER, 0, 10, project=project, inputs=INPUTS)
    op.process_left([("k", 100, {"amount": 6}, 1, None)])
    op.process_right([("k", 101, {"amount": 1}, 2, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert op.collector.results == []
    (failed,) = op.collector.failed
    assert failed.reason == REASON_SELECT and "not BOOLEAN" in failed.detail


def test_an_outer_regular_join_upserts_only_the_rows_its_where_keeps() -> None:
    """A joined row the where drops was never in the table: nothing of it is written, not
    even a tombstone. The padded row (its where over NULL drops it too) is not emitted,
    and its delete when the first partner comes is harmless (a tombstone of no row)."""
    project = compile_projection(
        {"price": "payments.price"}, INPUTS, where="payments.ts <= orders.expires"
    )
    op = OuterRegularJoinOperator("p", How.LEFT, project=project, inputs=INPUTS)
    op.process_left([("k", 100, {"expires": 104}, 1, None)])
    op.process_right(
        [("k", 103, {"ts": 103, "price": 5}, 2, None), ("k", 106, {"ts": 106, "price": 9}, 3, None)]
    )
    rows = [(r.id, r.seq, r.result) for r in op.collector.results]
    assert rows == [("p|k|1|none", 1, None), ("p|k|1|2", 0, {"price": 5})]
