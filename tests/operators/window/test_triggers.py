"""Count, continuous, processing-time, purging and never triggers; processing-time windows."""

from __future__ import annotations

from service.core.time import ManualClock
from service.operators.window import GeneralWindowOperator

from .helpers import build, feed, rec, spec, summary, tumbling


def test_count_trigger_fires_every_n_elements_then_restarts() -> None:
    op = build(tumbling(100, trigger={"type": "count", "count": 2}))
    assert isinstance(op, GeneralWindowOperator)
    feed(op, rec("u", 1, 1), rec("u", 2, 2), rec("u", 3, 4))
    assert summary(op) == [("u", 0, 100, {"n": 2, "total": 3}, "early", 0)]
    feed(op, rec("u", 4, 8))
    assert summary(op) == [("u", 0, 100, {"n": 4, "total": 15}, "early", 1)]


def test_count_trigger_with_purge_starts_each_firing_empty() -> None:
    op = build(tumbling(100, trigger={"type": "count", "count": 2, "purge": True}))
    feed(op, rec("u", 1, 1), rec("u", 2, 2), rec("u", 3, 4), rec("u", 4, 8), rec("u", 5, 16))
    assert summary(op) == [
        ("u", 0, 100, {"n": 2, "total": 3}, "early", 0),
        ("u", 0, 100, {"n": 2, "total": 12}, "early", 1),
    ]
    assert op.gauges().windows_open == 1  # the fifth element
    op.advance_watermark(1000)  # the count trigger ignores time; cleanup drops the rest
    assert summary(op) == []
    assert op.gauges().windows_open == 0


def test_continuous_trigger_fires_early_every_interval_then_on_time() -> None:
    op = build(tumbling(100, trigger={"type": "continuous", "interval_ms": 30}))
    feed(op, rec("u", 5, 1))
    op.advance_watermark(29)
    assert summary(op) == []
    op.advance_watermark(30)
    assert summary(op) == [("u", 0, 100, {"n": 1, "total": 1}, "early", 0)]
    feed(op, rec("u", 40, 2))
    op.advance_watermark(99)  # early at 60 and 90, then on time at 99
    assert summary(op) == [
        ("u", 0, 100, {"n": 2, "total": 3}, "early", 1),
        ("u", 0, 100, {"n": 2, "total": 3}, "early", 2),
        ("u", 0, 100, {"n": 2, "total": 3}, "on_time", 3),
    ]
    assert op.gauges().event_timers == 0


def test_purging_continuous_trigger_emits_only_new_elements() -> None:
    op = build(tumbling(100, trigger={"type": "continuous", "interval_ms": 50, "purge": True}))
    feed(op, rec("u", 5, 1), rec("u", 10, 2))
    op.advance_watermark(50)
    feed(op, rec("u", 60, 4))
    op.advance_watermark(99)
    assert summary(op) == [
        ("u", 0, 100, {"n": 2, "total": 3}, "early", 0),
        ("u", 0, 100, {"n": 1, "total": 4}, "on_time", 1),
    ]


def test_processing_time_windows_follow_the_manual_clock() -> None:
    clock = ManualClock(1_000)
    op = build(tumbling(100, time="processing"), clock=clock)
    feed(op, rec("u", 5, 1))  # the event timestamp does not matter
    clock.set(1_050)
    feed(op, rec("u", 999_999, 2))
    assert op.next_processing_time() == 1_099
    op.advance_processing_time(1_098)
    assert summary(op) == []
    clock.set(1_100)
    feed(op, rec("u", 7, 4))
    op.advance_processing_time(1_100)
    assert summary(op) == [("u", 1_000, 1_100, {"n": 2, "total": 3}, "on_time", 0)]
    assert op.gauges().processing_timers == 1  # the window [1100, 1200)
    assert op.collector.dropped_late == 0


def test_processing_time_trigger_on_event_windows_fires_early() -> None:
    clock = ManualClock(0)
    op = build(tumbling(100, trigger={"type": "processing_time"}), clock=clock)
    feed(op, rec("u", 5, 1))
    op.advance_processing_time(99)  # processing timer at the window's max_ts
    assert summary(op) == [("u", 0, 100, {"n": 1, "total": 1}, "early", 0)]
    op.advance_watermark(99)  # cleanup only: the trigger ignores event time
    assert summary(op) == []
    assert op.gauges().windows_open == 0


def test_continuous_processing_trigger_fires_each_interval_and_at_the_end() -> None:
    clock = ManualClock(0)
    op = build(
        tumbling(100, time="processing", trigger={"type": "continuous", "interval_ms": 40}),
        clock=clock,
    )
    feed(op, rec("u", 0, 1))
    op.advance_processing_time(40)
    feed(op, rec("u", 0, 2))
    op.advance_processing_time(200)
    assert summary(op) == [
        ("u", 0, 100, {"n": 1, "total": 1}, "early", 0),
        ("u", 0, 100, {"n": 2, "total": 3}, "early", 1),
        ("u", 0, 100, {"n": 2, "total": 3}, "on_time", 2),
    ]
    assert op.gauges().processing_timers == 0


def test_global_window_never_fires_by_default() -> None:
    op = build(spec({"type": "global"}))
    feed(op, rec("u", 5), rec("u", 10**12))
    op.advance_watermark(2**62)
    assert summary(op) == []
    assert op.gauges().event_timers == 0
    assert op.gauges().windows_open == 1


def test_global_window_with_count_trigger_fires_every_n() -> None:
    op = build(spec({"type": "global"}, trigger={"type": "count", "count": 2, "purge": True}))
    feed(op, rec("u", 5, 1), rec("u", 7, 2), rec("u", 1, 3))
    (result,) = op.collector.drain()[0]
    assert (result.result, result.fire.value, result.seq) == ({"n": 2, "total": 3}, "early", 0)
    assert result.id == f"p|u|{-(2**63)}|{2**63 - 1}"
