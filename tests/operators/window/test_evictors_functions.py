"""Evictors (before/after the function) and full-window user functions."""

from __future__ import annotations

from typing import Any

from service.operators.window import FUNCTION_ERROR, CountEvictor, TimeEvictor

from .helpers import build, feed, rec, spec, summary, tumbling


def amounts(key: str, window: tuple[int, int], values: list[dict[str, Any]]) -> list[Any]:
    return [v["amount"] for v in values]


def with_function(**extra: Any) -> dict[str, Any]:
    return spec({"type": "tumbling", "size_ms": 100}, aggregations=None, function="m:f", **extra)


def test_count_evictor_keeps_the_last_n() -> None:
    elements = [[1, "a"], [2, "b"], [3, "c"]]
    CountEvictor(2).evict(elements)
    assert elements == [[2, "b"], [3, "c"]]


def test_time_evictor_keeps_elements_within_keep_ms_of_the_newest() -> None:
    elements = [[10, "a"], [15, "b"], [30, "c"], [20, "d"]]
    TimeEvictor(15).evict(elements)  # cutoff 30 - 15 = 15: 15 and older go
    assert elements == [[30, "c"], [20, "d"]]


def test_count_evictor_before_function_limits_what_it_sees() -> None:
    trigger = {"type": "count", "count": 3}
    op = build(
        with_function(evictor={"type": "count", "max_count": 2}, trigger=trigger), function=amounts
    )
    feed(op, rec("u", 1, 1), rec("u", 2, 2), rec("u", 3, 3))
    feed(op, rec("u", 4, 4), rec("u", 5, 5), rec("u", 6, 6))
    assert [r[3] for r in summary(op)] == [[2, 3], [5, 6]]


def test_count_evictor_after_function_trims_for_the_next_firing() -> None:
    trigger = {"type": "count", "count": 3}
    evictor = {"type": "count", "max_count": 2, "after": True}
    op = build(with_function(evictor=evictor, trigger=trigger), function=amounts)
    feed(op, rec("u", 1, 1), rec("u", 2, 2), rec("u", 3, 3))
    feed(op, rec("u", 4, 4), rec("u", 5, 5), rec("u", 6, 6))
    assert [r[3] for r in summary(op)] == [[1, 2, 3], [2, 3, 4, 5, 6]]


def test_time_evictor_with_aggregations_aggregates_what_remains() -> None:
    op = build(tumbling(100, evictor={"type": "time", "keep_ms": 10}))
    feed(op, rec("u", 1, 1), rec("u", 50, 2), rec("u", 45, 4), rec("u", 40, 8))
    op.advance_watermark(99)
    assert summary(op) == [("u", 0, 100, {"n": 2, "total": 6}, "on_time", 0)]


def test_evictor_that_empties_the_window_leaves_no_contents() -> None:
    trigger = {"type": "count", "count": 1}
    evictor = {"type": "count", "max_count": 0, "after": True}
    op = build(with_function(evictor=evictor, trigger=trigger), function=amounts)
    feed(op, rec("u", 1, 1), rec("u", 2, 2))
    assert [r[3] for r in summary(op)] == [[1], [2]]
    assert op.gauges().windows_open == 0


def test_function_gets_key_window_and_values() -> None:
    calls: list[tuple[str, tuple[int, int], int]] = []

    def record(key: str, window: tuple[int, int], values: list[Any]) -> dict[str, int]:
        calls.append((key, window, len(values)))
        return {"size": len(values)}

    op = build(with_function(), function=record)
    feed(op, rec("u", 1), rec("u", 2), rec("v", 150))
    op.advance_watermark(10_000)
    assert calls == [("u", (0, 100), 2), ("v", (100, 200), 1)]
    assert [r[3] for r in summary(op)] == [{"size": 2}, {"size": 1}]


def test_function_that_raises_yields_a_failed_record_not_a_result() -> None:
    def broken(key: str, window: tuple[int, int], values: list[Any]) -> Any:
        raise ZeroDivisionError("boom")

    op = build(with_function(), function=broken)
    feed(op, rec("u", 1))
    op.advance_watermark(99)
    results, _, failed = op.collector.drain()
    assert results == []
    assert [(f.key, f.reason) for f in failed] == [("u", FUNCTION_ERROR)]
    assert "boom" in failed[0].detail
    assert op.counters.function_errors == 1
    assert op.gauges().windows_open == 0
