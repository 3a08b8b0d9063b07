"""max_by and min_by: a field of the row with the largest/smallest ``by`` (Nexmark q7's
highest bid with its bidder). Each scenario runs on both window paths."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from service.operators.window import AggregationPlan, WindowConfigError
from service.operators.window.aggregations import parse_aggregations

from .helpers import build, results, spec

BIDS = [
    (5, {"auction": 1, "bidder": "a", "price": 30}),
    (2, {"auction": 2, "bidder": "b", "price": 80}),
    (7, {"auction": 3, "bidder": "c", "price": 10}),
    (9, {"auction": 4, "bidder": "d", "price": 80.0}),
]
HIGHEST = {
    "auction": {"fn": "max_by", "field": "auction", "by": "price"},
    "bidder": {"fn": "max_by", "field": "bidder", "by": "price"},
    "cheapest": {"fn": "min_by", "field": "auction", "by": "price"},
}


def fire(
    aggregations: dict[str, Any], values: list[tuple[int, Any]], general: bool, **extra: Any
) -> tuple[dict[str, Any] | None, Any]:
    op = build(
        spec({"type": "tumbling", "size_ms": 100}, aggregations=aggregations, **extra),
        general=general,
    )
    op.process_batch([("u", ts, value, i, ("src", i)) for i, (ts, value) in enumerate(values)])
    op.advance_watermark(99)
    fired = results(op)
    return (fired[0].result if fired else None), op


def test_max_by_and_min_by_return_fields_of_the_row_with_the_extreme_by(general: bool) -> None:
    result, _ = fire(HIGHEST, BIDS, general)
    assert result == {"auction": 2, "bidder": "b", "cheapest": 3}


def test_a_tie_goes_to_the_earliest_row_whatever_the_arrival_order(general: bool) -> None:
    """Bids 2 (at 2) and 4 (at 9) both offer 80: 2 wins, in either order, and every
    max_by over price names the same row."""
    for values in (BIDS, BIDS[::-1]):
        result, _ = fire(HIGHEST, values, general)
        assert result is not None
        assert (result["auction"], result["bidder"]) == (2, "b")


def test_a_tie_at_the_same_time_goes_to_the_first_to_arrive(general: bool) -> None:
    values = [(5, {"auction": 1, "price": 9}), (5, {"auction": 2, "price": 9})]
    result, _ = fire({"a": HIGHEST["auction"]}, values, general)
    assert result == {"a": 1}


def test_rows_without_by_are_left_out_and_a_missing_field_is_null(general: bool) -> None:
    values = [(1, {"auction": 1}), (2, {"auction": 2, "price": None}), (3, {"price": 5})]
    result, _ = fire({"a": HIGHEST["auction"]}, values, general)
    assert result == {"a": None}  # the row with price 5 has no auction
    empty, _ = fire({"a": HIGHEST["auction"]}, values[:2], general)
    assert empty == {"a": None}


def test_by_orders_every_number_before_every_string_as_max_does(general: bool) -> None:
    values = [(1, {"auction": 1, "price": "10"}), (2, {"auction": 2, "price": 99})]
    result, _ = fire(HIGHEST, values, general)
    assert result == {"auction": 1, "bidder": None, "cheapest": 2}


def test_a_by_value_it_cannot_order_dead_letters_the_record_naming_by(general: bool) -> None:
    values = [(1, {"auction": 1, "price": 3}), (2, {"auction": 2, "price": [1]})]
    op = build(
        spec({"type": "tumbling", "size_ms": 100}, aggregations={"a": HIGHEST["auction"]}),
        general=general,
    )
    op.process_batch([("u", ts, value, i, ("src", i)) for i, (ts, value) in enumerate(values)])
    op.advance_watermark(99)
    fired, _, (failed,) = op.collector.drain()
    assert [r.result for r in fired] == [{"a": 1}]
    assert dict(failed.headers or ())["clockwork.field"] == b"price"
    assert "max_by(price) cannot take" in failed.detail


def test_the_field_may_be_any_json_value(general: bool) -> None:
    values = [(1, {"bid": {"a": [1]}, "price": 3}), (2, {"bid": "x", "price": 1})]
    result, _ = fire({"b": {"fn": "max_by", "field": "bid", "by": "price"}}, values, general)
    assert result == {"b": {"a": [1]}}


def test_a_window_with_max_by_restores_from_its_snapshot(general: bool) -> None:
    aggs = spec({"type": "tumbling", "size_ms": 100}, aggregations=HIGHEST)
    op = build(aggs, general=general)
    op.process_batch([("u", ts, v, i, None) for i, (ts, v) in enumerate(BIDS[:2])])
    snapshot = orjson.loads(orjson.dumps(op.snapshot()))
    restored = build(aggs, general=general)
    restored.restore(snapshot)
    rest = [("u", ts, v, i + 2, None) for i, (ts, v) in enumerate(BIDS[2:])]
    for each in (op, restored):
        each.process_batch(rest)
        each.advance_watermark(99)
    assert [r.result for r in results(restored)] == [r.result for r in results(op)]


def test_merging_accumulators_keeps_the_extreme_row_and_its_tie_rule() -> None:
    plan = AggregationPlan(parse_aggregations(HIGHEST))
    left, right, whole = plan.new(), plan.new(), plan.new()
    for part, values in ((left, BIDS[2:]), (right, BIDS[:2])):
        for ts, value in values:
            plan.add(part, ts, value)
    for ts, value in BIDS:
        plan.add(whole, ts, value)
    plan.merge(left, right)
    assert plan.result(left) == plan.result(whole) == {"auction": 2, "bidder": "b", "cheapest": 3}


@pytest.mark.parametrize(
    "aggregations",
    [
        {"x": {"fn": "max_by", "field": "a"}},
        {"x": {"fn": "min_by", "field": "a", "by": "b..c"}},
        {"x": {"fn": "max", "field": "a", "by": "b"}},
        {"x": ("max_by", "a")},
    ],
)
def test_max_by_needs_by_and_nothing_else_takes_it(aggregations: dict[str, Any]) -> None:
    with pytest.raises(WindowConfigError):
        parse_aggregations(aggregations)
