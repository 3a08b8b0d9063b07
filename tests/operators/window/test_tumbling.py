"""Tumbling event-time windows with the default trigger: semantics.md section 5."""

from __future__ import annotations

from service.operators.base import FireKind
from service.operators.window import FastWindowOperator

from .helpers import build, feed, rec, results, spec, summary, tumbling


def test_factory_picks_the_fast_path_for_tumbling_count_sum() -> None:
    assert isinstance(build(tumbling()), FastWindowOperator)


def test_element_exactly_at_max_ts_belongs_to_the_window(general: bool) -> None:
    op = build(tumbling(10), general=general)
    feed(op, rec("u", 9, 5), rec("u", 10, 7))
    op.advance_watermark(9)
    assert summary(op) == [("u", 0, 10, {"n": 1, "total": 5}, "on_time", 0)]


def test_window_fires_when_watermark_reaches_max_ts_not_before(general: bool) -> None:
    op = build(tumbling(10), general=general)
    feed(op, rec("u", 3))
    op.advance_watermark(8)
    assert summary(op) == []
    op.advance_watermark(9)
    assert summary(op) == [("u", 0, 10, {"n": 1, "total": 1}, "on_time", 0)]


def test_window_whose_end_equals_the_watermark_is_late_for_new_records(general: bool) -> None:
    op = build(tumbling(10), general=general)
    op.advance_watermark(10)
    feed(op, rec("u", 9), rec("u", 10))
    op.advance_watermark(19)
    assert summary(op) == [("u", 10, 20, {"n": 1, "total": 1}, "on_time", 0)]
    assert op.collector.dropped_late == 1


def test_result_carries_id_watermark_and_end_minus_one_timestamp(general: bool) -> None:
    op = build(tumbling(10), general=general)
    feed(op, rec("u", 3))
    op.advance_watermark(25)
    (result,) = results(op)
    assert result.id == "p|u|0|10"
    assert result.watermark == 25
    assert result.timestamp == 9
    assert result.fire is FireKind.ON_TIME


def test_record_is_late_when_cleanup_time_equals_watermark(general: bool) -> None:
    op = build(tumbling(10, allowed_lateness_ms=5), general=general)
    feed(op, rec("u", 1))
    op.advance_watermark(14)  # cleanup_time = 9 + 5 = 14
    assert len(results(op)) == 1
    feed(op, rec("u", 2))
    assert summary(op) == []
    assert op.collector.dropped_late == 1
    assert op.counters.late_dropped == 1


def test_record_one_ms_before_cleanup_time_fires_late_with_seq_one(general: bool) -> None:
    op = build(tumbling(10, allowed_lateness_ms=5), general=general)
    feed(op, rec("u", 1, 2))
    op.advance_watermark(13)
    assert summary(op) == [("u", 0, 10, {"n": 1, "total": 2}, "on_time", 0)]
    feed(op, rec("u", 2, 3))
    assert summary(op) == [("u", 0, 10, {"n": 2, "total": 5}, "late", 1)]
    assert op.collector.dropped_late == 0


def test_allowed_late_record_into_a_window_that_had_no_data_fires_late_seq_zero(
    general: bool,
) -> None:
    op = build(tumbling(10, allowed_lateness_ms=5), general=general)
    op.advance_watermark(12)
    feed(op, rec("u", 4, 6))
    assert summary(op) == [("u", 0, 10, {"n": 1, "total": 6}, "late", 0)]


def test_window_state_is_cleared_at_cleanup_time(general: bool) -> None:
    op = build(tumbling(10, allowed_lateness_ms=5), general=general)
    feed(op, rec("u", 1))
    op.advance_watermark(9)
    assert op.gauges().windows_open == 1
    assert op.gauges().event_timers == 1  # the cleanup timer at 14
    op.advance_watermark(14)
    gauges = op.gauges()
    assert (gauges.windows_open, gauges.event_timers, gauges.keys) == (0, 0, 0)


def test_late_record_goes_to_late_output_with_watermark(general: bool) -> None:
    op = build(tumbling(10), general=general, late_output=True)
    op.advance_watermark(30)
    feed(op, rec("u", 5))
    _, late, _ = op.collector.drain()
    assert [(r.key, r.timestamp, r.watermark, r.source) for r in late] == [
        ("u", 5, 30, ("src", "u", 5))
    ]
    assert op.collector.dropped_late == 0
    assert op.counters.late_emitted == 1


def test_tumbling_offset_gives_time_zone_day_windows(general: bool) -> None:
    day, hour = 86_400_000, 3_600_000
    # Days in UTC+8 start at 16:00 UTC the previous day: offset -8 h.
    op = build(_day_spec(day, -8 * hour), general=general)
    feed(op, rec("u", 15 * hour), rec("u", 17 * hour))
    op.advance_watermark(2 * day)
    windows = [(r.start, r.end) for r in results(op)]
    assert windows == [(-8 * hour, 16 * hour), (16 * hour, day + 16 * hour)]


def _day_spec(day: int, offset: int) -> dict[str, object]:
    return spec({"type": "tumbling", "size_ms": day, "offset_ms": offset})


def test_negative_timestamps_use_a_non_negative_modulo(general: bool) -> None:
    op = build(tumbling(10), general=general)
    feed(op, rec("u", -1), rec("u", -10), rec("u", -11))
    op.advance_watermark(0)
    assert [(r.start, r.end, r.result["n"]) for r in results(op)] == [(-20, -10, 1), (-10, 0, 2)]


def test_keys_have_separate_windows(general: bool) -> None:
    op = build(tumbling(10), general=general)
    feed(op, rec("a", 1, 1), rec("b", 2, 10), rec("a", 3, 100))
    op.advance_watermark(9)
    assert sorted(summary(op)) == [
        ("a", 0, 10, {"n": 2, "total": 101}, "on_time", 0),
        ("b", 0, 10, {"n": 1, "total": 10}, "on_time", 0),
    ]


def test_watermark_that_does_not_advance_changes_nothing(general: bool) -> None:
    op = build(tumbling(10), general=general)
    op.advance_watermark(20)
    op.advance_watermark(5)
    assert op.current_watermark == 20


def test_cleanup_time_saturates_at_max_and_then_has_no_timer(general: bool) -> None:
    op = build(tumbling(10, allowed_lateness_ms=2**63 - 5), general=general)
    feed(op, rec("u", 1))
    op.advance_watermark(9)
    assert len(results(op)) == 1
    gauges = op.gauges()
    assert (gauges.event_timers, gauges.windows_open) == (0, 1)  # kept: never cleaned up
    feed(op, rec("u", 2))
    assert summary(op) == [("u", 0, 10, {"n": 2, "total": 2}, "late", 1)]
