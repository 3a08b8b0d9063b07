"""Sliding windows: a record belongs to every window with start > ts - size."""

from __future__ import annotations

from service.operators.window import FastWindowOperator, SlidingAssigner

from .helpers import build, feed, rec, spec, summary


def sliding(size: int, slide: int, **extra: object) -> dict[str, object]:
    return spec({"type": "sliding", "size_ms": size, "slide_ms": slide}, **extra)


def test_sliding_assigner_lists_every_window_newest_first() -> None:
    assert SlidingAssigner(10, 5).assign(12) == [(10, 20), (5, 15)]
    assert SlidingAssigner(10, 5).assign(10) == [(10, 20), (5, 15)]
    assert SlidingAssigner(10, 5).assign(9) == [(5, 15), (0, 10)]
    assert SlidingAssigner(10, 3, offset=1).assign(7) == [(7, 17), (4, 14), (1, 11), (-2, 8)]


def test_factory_picks_the_fast_path_for_sliding() -> None:
    assert isinstance(build(sliding(10, 5)), FastWindowOperator)


def test_record_counts_in_each_overlapping_window(general: bool) -> None:
    op = build(sliding(10, 5), general=general)
    feed(op, rec("u", 7, 1), rec("u", 12, 10))
    op.advance_watermark(30)
    assert summary(op) == [
        ("u", 0, 10, {"n": 1, "total": 1}, "on_time", 0),
        ("u", 5, 15, {"n": 2, "total": 11}, "on_time", 0),
        ("u", 10, 20, {"n": 1, "total": 10}, "on_time", 0),
    ]


def test_record_whose_oldest_window_is_late_still_counts_in_the_newer(general: bool) -> None:
    op = build(sliding(10, 5), general=general)
    op.advance_watermark(10)  # window [0, 10) is done
    feed(op, rec("u", 7, 3))
    op.advance_watermark(14)
    assert summary(op) == [("u", 5, 15, {"n": 1, "total": 3}, "on_time", 0)]
    assert op.collector.dropped_late == 0


def test_record_late_for_every_sliding_window_is_dropped(general: bool) -> None:
    op = build(sliding(10, 5), general=general)
    op.advance_watermark(14)
    feed(op, rec("u", 4))
    assert summary(op) == []
    assert op.collector.dropped_late == 1
