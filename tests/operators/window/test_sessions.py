"""Session windows: merging with contents, trigger state and timers (Flink's MergingWindowSet)."""

from __future__ import annotations

from service.core.time import TimeDomain
from service.operators.window import GeneralWindowOperator, SessionAssigner

from .helpers import build, feed, rec, spec, summary


def session(gap: int = 10, **extra: object) -> dict[str, object]:
    return spec({"type": "session", "gap_ms": gap}, **extra)


def event_timers(op: GeneralWindowOperator) -> list[tuple[int, str, object]]:
    return list(op._timers.timers(TimeDomain.EVENT_TIME))


def test_merge_windows_reports_only_groups_of_overlapping_windows() -> None:
    merged = SessionAssigner.merge_windows([(0, 10), (10, 20), (30, 40), (5, 8)])
    assert merged == [((0, 20), [(0, 10), (5, 8), (10, 20)])]


def test_separate_sessions_fire_separately() -> None:
    op = build(session(10))
    feed(op, rec("u", 0, 1), rec("u", 20, 2))
    op.advance_watermark(100)
    assert summary(op) == [
        ("u", 0, 10, {"n": 1, "total": 1}, "on_time", 0),
        ("u", 20, 30, {"n": 1, "total": 2}, "on_time", 0),
    ]


def test_record_bridging_two_sessions_merges_them_with_one_timer() -> None:
    op = build(session(10))
    assert isinstance(op, GeneralWindowOperator)
    feed(op, rec("u", 0, 1), rec("u", 15, 2))
    assert [t[0] for t in event_timers(op)] == [9, 24]
    feed(op, rec("u", 8, 4))  # [8, 18) touches both: one session [0, 25)
    assert event_timers(op) == [(24, "u", (0, 25))]
    assert op.gauges().windows_open == 1
    op.advance_watermark(24)
    assert summary(op) == [("u", 0, 25, {"n": 3, "total": 7}, "on_time", 0)]
    assert op.gauges().keys == 0


def test_record_inside_a_session_does_not_change_it() -> None:
    op = build(session(10))
    feed(op, rec("u", 0), rec("u", 5))
    feed(op, rec("u", 2))  # [2, 12) merges into [0, 15)
    op.advance_watermark(100)
    assert summary(op) == [("u", 0, 15, {"n": 3, "total": 3}, "on_time", 0)]


def test_late_record_whose_session_is_late_is_skipped_and_dropped() -> None:
    op = build(session(10), late_output=True)
    feed(op, rec("u", 50))
    op.advance_watermark(30)
    feed(op, rec("u", 5))  # [5, 15): max_ts 14 <= 30, merges with nothing: retired
    assert [r.timestamp for r in op.collector.late] == [5]
    assert summary(op) == []
    op.advance_watermark(100)
    assert summary(op) == [("u", 50, 60, {"n": 1, "total": 1}, "on_time", 0)]


def test_late_record_merging_into_a_live_session_is_kept() -> None:
    op = build(session(10))
    feed(op, rec("u", 30, 1))
    op.advance_watermark(25)
    feed(op, rec("u", 20, 2))  # [20, 30) is late alone, but merges into [20, 40)
    op.advance_watermark(100)
    assert summary(op) == [("u", 20, 40, {"n": 2, "total": 3}, "on_time", 0)]
    assert op.collector.dropped_late == 0


def test_allowed_lateness_gives_late_firings_of_merged_sessions() -> None:
    op = build(session(10, allowed_lateness_ms=20))
    feed(op, rec("u", 0, 1), rec("u", 5, 1))
    op.advance_watermark(14)
    assert summary(op) == [("u", 0, 15, {"n": 2, "total": 2}, "on_time", 0)]
    feed(op, rec("u", 2, 2))  # [2, 12) is inside [0, 15): a late firing
    assert summary(op) == [("u", 0, 15, {"n": 3, "total": 4}, "late", 1)]
    feed(op, rec("u", 12, 4))  # extends it to [0, 22): a new window, so a new id and seq
    op.advance_watermark(21)
    assert summary(op) == [("u", 0, 22, {"n": 4, "total": 8}, "on_time", 0)]


def test_count_trigger_state_is_merged_with_the_sessions() -> None:
    op = build(session(10, trigger={"type": "count", "count": 3}))
    feed(op, rec("u", 0), rec("u", 15))
    assert summary(op) == []
    feed(op, rec("u", 8))  # counts 1 + 1 merged, + 1 = 3
    assert summary(op) == [("u", 0, 25, {"n": 3, "total": 3}, "early", 0)]


def test_full_window_function_sees_the_merged_elements() -> None:
    seen: list[list[int]] = []

    def amounts(key: str, window: tuple[int, int], values: list[dict[str, int]]) -> int:
        seen.append([v["amount"] for v in values])
        return len(values)

    op = build(
        spec({"type": "session", "gap_ms": 10}, aggregations=None, function="m:f"),
        function=amounts,
    )
    feed(op, rec("u", 0, 1), rec("u", 15, 2), rec("u", 8, 3))
    op.advance_watermark(100)
    assert summary(op) == [("u", 0, 25, 3, "on_time", 0)]
    assert seen == [[1, 2, 3]]  # merged contents first, then the bridging record
