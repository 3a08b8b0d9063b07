"""Issue 24: a value an aggregation cannot take is a data error, never skipped in silence.

Each test runs on both window paths (the ``general`` fixture: the fast operator the
factory builds for these specs, and the general one for the same spec).
"""

from __future__ import annotations

from typing import Any

import pytest

from service.operators.base import FailedRecord

from .helpers import build, results, spec

WRONG_FOR_NUMBERS = ["abc", "12", True, False, [], [1], {}, {"a": 1}]
"""Not numbers: strings (numeric ones too), booleans, arrays, objects."""
WRONG_FOR_ORDER = [True, False, [], [1], {}, {"a": 1}]
"""Neither numbers nor strings: what min and max cannot order."""


def run(
    aggregations: dict[str, Any], values: list[Any], general: bool, **extra: Any
) -> tuple[dict[str, Any] | None, list[FailedRecord], Any]:
    op = build(
        spec({"type": "tumbling", "size_ms": 100}, aggregations=aggregations, **extra),
        general=general,
    )
    records = [("u", ts, value, ts, ("src", ts)) for ts, value in enumerate(values)]
    op.process_batch(records)
    op.advance_watermark(99)
    out, _, failed = op.collector.drain()
    fired = [r.result for r in out]
    return (fired[0] if fired else None), failed, op


@pytest.mark.parametrize("fn", ["sum", "avg"])
@pytest.mark.parametrize("bad", WRONG_FOR_NUMBERS, ids=repr)
def test_a_non_number_for_sum_or_avg_dead_letters_the_record(
    fn: str, bad: Any, general: bool
) -> None:
    aggs = {"n": {"fn": "count"}, "out": {"fn": fn, "field": "x"}}
    result, failed, _ = run(aggs, [{"x": 4}, {"x": bad}, {"x": 2}], general)
    assert result == {"n": 2, "out": 6 if fn == "sum" else 3.0}
    (letter,) = failed
    assert letter.reason == "bad_value"
    assert letter.source == ("src", 1)
    assert dict(letter.headers) == {"clockwork.field": b"x", "clockwork.function": fn.encode()}


@pytest.mark.parametrize("fn", ["min", "max"])
@pytest.mark.parametrize("bad", WRONG_FOR_ORDER, ids=repr)
def test_a_value_min_or_max_cannot_order_dead_letters_the_record(
    fn: str, bad: Any, general: bool
) -> None:
    aggs = {"n": {"fn": "count"}, "out": {"fn": fn, "field": "x"}}
    result, failed, _ = run(aggs, [{"x": 4}, {"x": bad}, {"x": 2}], general)
    assert result == {"n": 2, "out": 2 if fn == "min" else 4}
    assert [f.reason for f in failed] == ["bad_value"]


def test_a_record_with_a_bad_value_opens_no_window(general: bool) -> None:
    result, failed, op = run({"s": {"fn": "sum", "field": "x"}}, [{"x": "abc"}], general)
    assert result is None
    assert len(failed) == 1
    assert op.gauges().windows_open == 0


@pytest.mark.parametrize("fn", ["first", "last", "collect", "count_distinct"])
@pytest.mark.parametrize("value", ["abc", True, [], {"a": 1}, 1.5], ids=repr)
def test_first_last_collect_and_count_distinct_take_any_json_value(
    fn: str, value: Any, general: bool
) -> None:
    result, failed, _ = run({"out": {"fn": fn, "field": "x"}}, [{"x": value}], general)
    assert failed == []
    assert result == {"out": {"first": value, "last": value, "collect": [value]}.get(fn, 1)}


def test_min_and_max_order_every_number_before_every_string(general: bool) -> None:
    aggs = {"lo": {"fn": "min", "field": "x"}, "hi": {"fn": "max", "field": "x"}}
    for values in ([{"x": "b"}, {"x": 10}, {"x": "a"}, {"x": -1}], [{"x": -1}, {"x": "b"}]):
        result, failed, _ = run(aggs, values, general)
        assert failed == []
        assert result == {"lo": -1, "hi": "b"}


def test_booleans_are_not_numbers(general: bool) -> None:
    result, failed, _ = run({"s": {"fn": "sum", "field": "x"}}, [{"x": True}, {"x": 1}], general)
    assert result == {"s": 1}
    assert len(failed) == 1


def test_skip_aggregates_the_record_with_the_bad_field_as_null(general: bool) -> None:
    aggs = {
        "n": {"fn": "count"},
        "s": {"fn": "sum", "field": "x"},
        "c": {"fn": "collect", "field": "x"},
    }
    result, failed, op = run(aggs, [{"x": 1}, {"x": "abc"}, {"x": 2}], general, on_bad_value="skip")
    assert failed == []
    assert result == {"n": 3, "s": 3, "c": [1, "abc", 2]}
    assert op.stats()["invalid_values"]["s"] == 1


@pytest.mark.parametrize("on_bad_value", ["dead_letter", "skip"])
def test_bad_values_are_counted_by_field_and_reason(on_bad_value: str, general: bool) -> None:
    aggs = {"s": {"fn": "sum", "field": "x"}, "m": {"fn": "max", "field": "y"}}
    op = build(
        spec({"type": "tumbling", "size_ms": 100}, aggregations=aggs, on_bad_value=on_bad_value),
        general=general,
    )
    op.process_batch(
        [
            ("u", 1, {"x": "abc", "y": 1}, 1, None),
            ("u", 2, {"x": 1, "y": []}, 2, None),
            ("u", 3, {"x": True, "y": "z"}, 3, None),
        ]
    )
    assert op.collector.bad_values == {("x", "not_a_number"): 2, ("y", "not_comparable"): 1}


def test_a_late_allowed_record_is_checked_before_its_late_firing(general: bool) -> None:
    op = build(
        spec(
            {"type": "tumbling", "size_ms": 100},
            aggregations={"s": {"fn": "sum", "field": "x"}},
            allowed_lateness_ms=1000,
        ),
        general=general,
    )
    op.process_batch([("u", 1, {"x": 1}, 1, None)])
    op.advance_watermark(150)
    results(op)
    op.process_batch([("u", 2, {"x": "abc"}, 2, None), ("u", 3, {"x": 2}, 3, None)])
    assert [r.result for r in results(op)] == [{"s": 3}]


def test_a_bad_value_in_sliding_windows_is_dead_lettered_once(general: bool) -> None:
    op = build(
        spec(
            {"type": "sliding", "size_ms": 100, "slide_ms": 50},
            aggregations={"s": {"fn": "sum", "field": "x"}},
        ),
        general=general,
    )
    op.process_batch([("u", 60, {"x": 1}, 1, None), ("u", 70, {"x": "abc"}, 2, None)])
    op.advance_watermark(200)
    out, _, failed = op.collector.drain()
    assert [r.result for r in out] == [{"s": 1}, {"s": 1}]
    assert len(failed) == 1
