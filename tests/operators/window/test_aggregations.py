"""Built-in aggregations: every function, invalid values, one accumulator per window."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from service.operators.window import AggregationPlan, WindowConfigError
from service.operators.window.aggregations import parse_aggregations

from .helpers import build, results, spec


def run(aggregations: dict[str, Any], values: list[tuple[int, Any]], general: bool) -> Any:
    op = build(
        spec({"type": "tumbling", "size_ms": 100}, aggregations=aggregations), general=general
    )
    op.process_batch([("u", ts, value, i, None) for i, (ts, value) in enumerate(values)])
    op.advance_watermark(99)
    (result,) = results(op)
    return result.result, op


VALUES = [(5, {"x": 3}), (1, {"x": 7.5}), (9, {"x": -2}), (3, {"x": 3})]


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        ("sum", 11.5),
        ("min", -2),
        ("max", 7.5),
        ("avg", 11.5 / 4),
        ("first", 7.5),  # smallest timestamp (1), not the first to arrive
        ("last", -2),  # largest timestamp (9)
        ("count_distinct", 3),
        ("collect", [3, 7.5, -2, 3]),
    ],
)
def test_aggregation_of_a_field(fn: str, expected: Any, general: bool) -> None:
    result, _ = run({"out": {"fn": fn, "field": "x"}}, VALUES, general)
    assert result == {"out": expected}


def test_count_counts_records_without_a_field(general: bool) -> None:
    result, _ = run({"n": {"fn": "count"}}, [(1, {}), (2, "not a dict"), (3, None)], general)
    assert result == {"n": 3}


def test_several_named_outputs_share_one_window(general: bool) -> None:
    aggs = {
        "n": {"fn": "count"},
        "s": {"fn": "sum", "field": "x"},
        "hi": {"fn": "max", "field": "x"},
    }
    op = build(spec({"type": "tumbling", "size_ms": 100}, aggregations=aggs), general=general)
    op.process_batch([("u", ts, value, i, None) for i, (ts, value) in enumerate(VALUES)])
    assert op.gauges().windows_open == 1
    state = op.snapshot()["keys"]["u"]
    if general:  # keystate.py's form: one contents entry per window
        (contents,) = state["contents"]
        assert contents[:2] == [0, 100]
    else:  # the fast operator's form: one [start, seq, opened, *slots] row per window
        (row,) = state
        assert row[0] == 0
    op.advance_watermark(99)
    (result,) = results(op)
    assert result.result == {"n": 4, "s": 11.5, "hi": 7.5}


def test_dotted_field_paths_reach_into_nested_values(general: bool) -> None:
    result, _ = run(
        {"s": {"fn": "sum", "field": "a.b"}},
        [(1, {"a": {"b": 2}}), (2, {"a": {"b": 5}}), (3, {"a": [1]})],
        general,
    )
    assert result == {"s": 7}


def test_missing_and_null_values_follow_sql_null_rules(general: bool) -> None:
    aggs = {
        "n": {"fn": "count"},
        "s": {"fn": "sum", "field": "x"},
        "m": {"fn": "min", "field": "x"},
        "c": {"fn": "collect", "field": "x"},
    }
    values = [(1, {"x": 2}), (4, {}), (5, {"x": None})]
    result, op = run(aggs, values, general)
    assert result == {"n": 3, "s": 2, "m": 2, "c": [2, None]}
    assert op.stats()["invalid_values"] == {"n": 0, "s": 0, "m": 0, "c": 0}


def test_empty_numeric_aggregations_have_neutral_results(general: bool) -> None:
    aggs = {
        "s": {"fn": "sum", "field": "x"},
        "lo": {"fn": "min", "field": "x"},
        "a": {"fn": "avg", "field": "x"},
        "f": {"fn": "first", "field": "x"},
        "d": {"fn": "count_distinct", "field": "x"},
    }
    result, _ = run(aggs, [(1, {"y": 1})], general)
    assert result == {"s": 0, "lo": None, "a": None, "f": None, "d": 0}


def test_count_distinct_tells_json_types_apart(general: bool) -> None:
    values = [
        (1, {"x": 1}),
        (2, {"x": "1"}),
        (3, {"x": 1.5}),
        (4, {"x": {"b": 1, "a": 2}}),
        (5, {"x": {"a": 2, "b": 1}}),
        (6, {"x": 1}),
    ]
    result, _ = run({"d": {"fn": "count_distinct", "field": "x"}}, values, general)
    assert result == {"d": 4}


def test_accumulators_are_json_safe_plain_data(general: bool) -> None:
    aggs = {
        f: {"fn": f, "field": "x"} for f in ("sum", "avg", "first", "count_distinct", "collect")
    }
    op = build(spec({"type": "tumbling", "size_ms": 100}, aggregations=aggs), general=general)
    op.process_batch([("u", 1, {"x": 1}, 0, None), ("u", 2, {"x": 2}, 1, None)])
    snapshot = op.snapshot()
    assert orjson.loads(orjson.dumps(snapshot)) == snapshot


def test_merging_accumulators_equals_adding_everything_to_one() -> None:
    specs = parse_aggregations(
        {
            f: (f, "x")
            for f in ("sum", "min", "max", "avg", "first", "last", "count_distinct", "collect")
        }
        | {"n": ("count", None)}
    )
    plan = AggregationPlan(specs)
    left, right, whole = plan.new(), plan.new(), plan.new()
    for ts, value in VALUES[:2]:
        plan.add(left, ts, value)
        plan.add(whole, ts, value)
    for ts, value in VALUES[2:]:
        plan.add(right, ts, value)
        plan.add(whole, ts, value)
    plan.merge(left, right)
    assert plan.result(left) == plan.result(whole)


@pytest.mark.parametrize(
    "aggregations",
    [
        {},
        {"x": {"fn": "median", "field": "a"}},
        {"x": {"fn": "sum"}},
        {"x": {"fn": "count", "field": "a"}},
        {"x": {"fn": "sum", "field": "a..b"}},
        {"x": "sum"},
    ],
)
def test_bad_aggregations_are_config_errors(aggregations: dict[str, Any]) -> None:
    with pytest.raises(WindowConfigError):
        parse_aggregations(aggregations)
