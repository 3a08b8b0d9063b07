"""A join's ``select``: SQL expressions over ``<input>.<path>``, a missing side NULL."""

from __future__ import annotations

import pytest

from service.core.time import MAX_TIMESTAMP
from service.operators.join.interval import IntervalJoinOperator
from service.operators.join.projection import REASON_SELECT, SelectError, compile_projection
from service.operators.join.rows import How

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
