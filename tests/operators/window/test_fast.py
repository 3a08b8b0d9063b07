"""The fast path's windows-per-start firing: timer metrics, order after restores, cleanup.

The fast operator queues no timers; its windows of one start fire and go together
(fast.py). These pin what that must keep: the timer metrics of the logical timers
(which the general operator's real timers give too), the firing order across keys
after a restore, and a cleanup that drops a whole start.
"""

from __future__ import annotations

from typing import Any

import orjson

from service.core.time import ManualClock
from service.operators.base import FireKind, WindowResult
from service.operators.window import FastWindowOperator, WindowOperator

from .helpers import build, feed, rec, results, spec, summary, tumbling


def timers(op: WindowOperator) -> tuple[tuple[int, int, int], int]:
    """``(registered, fired, deleted)`` of event timers, and how many are pending."""
    counts = op.timer_counts()
    assert counts["processing"] == (0, 0, 0)
    return counts["event"], op.gauges().event_timers


def test_timer_metrics_count_trigger_and_cleanup_timers_per_window(general: bool) -> None:
    op = build(tumbling(10, allowed_lateness_ms=5), general=general)
    assert timers(op) == ((0, 0, 0), 0)
    feed(op, rec("a", 1), rec("b", 2), rec("a", 3), rec("c", 12))
    # (a, 0), (b, 0): trigger at 9 and cleanup at 14 each; (c, 10): 19 and 24
    assert timers(op) == ((6, 0, 0), 6)
    op.advance_watermark(9)
    assert [r[0] for r in summary(op)] == ["a", "b"]
    assert timers(op) == ((6, 2, 0), 4)
    feed(op, rec("b", 4))  # allowed-late into an open window: fires, no new timer
    feed(op, rec("d", 5))  # a new window past max_ts: fires, its cleanup timer only
    assert [r[4] for r in summary(op)] == ["late", "late"]
    assert timers(op) == ((7, 2, 0), 5)
    op.advance_watermark(14)  # the cleanup of a, b and d
    assert timers(op) == ((7, 5, 0), 2)
    op.advance_watermark(30)
    assert timers(op) == ((7, 7, 0), 0)
    assert summary(op) == [("c", 10, 20, {"n": 1, "total": 1}, "on_time", 0)]


def test_timer_metrics_without_lateness_have_one_timer_per_window(general: bool) -> None:
    op = build(spec({"type": "sliding", "size_ms": 10, "slide_ms": 5}), general=general)
    feed(op, rec("a", 7), rec("b", 12))  # a: [0, 10), [5, 15); b: [5, 15), [10, 20)
    assert timers(op) == ((4, 0, 0), 4)
    op.advance_watermark(14)
    assert timers(op) == ((4, 3, 0), 1)
    assert op.gauges().windows_open == 1
    op.advance_watermark(19)
    assert timers(op) == ((4, 4, 0), 0)


def test_timer_counts_start_afresh_at_a_restore(general: bool) -> None:
    operator_spec = tumbling(10, allowed_lateness_ms=5)
    op = build(operator_spec, general=general)
    feed(op, rec("a", 1), rec("b", 12))
    op.advance_watermark(9)
    restored = build(operator_spec, general=general)
    restored.restore(orjson.loads(orjson.dumps(op.snapshot())))
    # pending: a's cleanup at 14, b's trigger at 19 and cleanup at 24
    assert timers(restored) == ((0, 0, 0), 3)
    feed(restored, rec("c", 25))
    restored.advance_watermark(100)
    assert timers(restored) == ((2, 5, 0), 0)


def test_cleanup_drops_every_window_of_the_start() -> None:
    op = build(tumbling(10, allowed_lateness_ms=5), track_keys=True)
    keys = [f"k{i}" for i in range(50)]
    feed(op, *(rec(key, i % 10) for i, key in enumerate(keys)), rec("z", 15))
    op.advance_watermark(13)
    assert len(results(op)) == 50
    gauges = op.gauges()
    assert (gauges.windows_open, gauges.keys, gauges.event_timers) == (51, 51, 52)
    op.snapshot_changes()
    op.advance_watermark(14)  # the cleanup time of start 0
    gauges = op.gauges()
    assert (gauges.windows_open, gauges.keys, gauges.event_timers) == (1, 1, 2)
    assert op.snapshot()["keys"] == {"z": [[10, 0, 50, 1, 1]]}
    changes = op.snapshot_changes()
    assert all(changes["k" + key] is None for key in keys)
    assert "kz" not in changes
    feed(op, rec("k3", 3))  # the start is gone for good: a late record
    assert op.collector.dropped_late == 1
    assert op.gauges().windows_open == 1


def test_restored_windows_of_one_end_fire_in_opened_order_across_keys() -> None:
    """A full snapshot lists keys in its own order; the restored firing order is the
    order the windows were opened, as in an uninterrupted run."""
    operator_spec = spec({"type": "sliding", "size_ms": 30, "slide_ms": 10})
    arrivals = [("m", 25), ("c", 21), ("x", 5), ("a", 29), ("c", 3), ("b", 12), ("m", 8)]
    whole = build(operator_spec)
    first = build(operator_spec)
    for key, ts in arrivals:
        for op in (whole, first):
            feed(op, rec(key, ts))
    snapshot: dict[str, Any] = orjson.loads(orjson.dumps(first.snapshot()))
    # the keys in reverse order, to show the order comes from ``opened``, not the listing
    snapshot["keys"] = dict(reversed(list(snapshot["keys"].items())))
    second = build(operator_spec)
    second.restore(snapshot)
    for op in (whole, second):
        op.advance_watermark(100)
    expected = summary(whole)
    assert summary(second) == expected
    ends = {end: [r[0] for r in expected if r[2] == end] for end in (10, 20, 30, 40, 50)}
    assert ends == {
        10: ["x", "c", "m"],
        20: ["x", "c", "b", "m"],
        30: ["m", "c", "x", "a", "b"],
        40: ["m", "c", "a", "b"],
        50: ["m", "c", "a"],
    }


def test_a_window_opened_late_waits_for_its_start_and_fires_no_more() -> None:
    op = build(tumbling(10, allowed_lateness_ms=20))
    feed(op, rec("a", 1))
    op.advance_watermark(9)
    feed(op, rec("b", 2))  # max_ts <= W: fires at once, then waits for cleanup at 29
    assert [(r[0], r[4]) for r in summary(op)] == [("a", "on_time"), ("b", "late")]
    op.advance_watermark(28)
    assert summary(op) == []
    assert op.gauges().windows_open == 2
    op.advance_watermark(29)
    assert op.gauges().windows_open == 0


def test_the_firing_loop_makes_the_results_its_init_would() -> None:
    """With and without the slot-store construction (fast.PLAIN_RESULT)."""
    op = build(tumbling(10))
    assert isinstance(op, FastWindowOperator)
    made: list[list[Any]] = []
    for plain in (True, False):
        fire = op._compile_fire(plain)
        out: list[Any] = []
        fire({"a": [0, 0, 2, 5], "b": [3, 1, 1, 7.5]}, 10, out, 25)
        made.append(out)
    on_time = FireKind.ON_TIME
    assert made[0] == [
        WindowResult("p|a|10|20", "a", 10, 20, {"n": 2, "total": 5}, on_time, 0, 25),
        WindowResult("p|b|10|20", "b", 10, 20, {"n": 1, "total": 7.5}, on_time, 3, 25),
    ]
    assert made[1] == made[0]


def test_a_full_run_matches_the_general_operator_with_a_manual_clock() -> None:
    operator_spec = tumbling(10, allowed_lateness_ms=7)
    ops = [build(operator_spec, clock=ManualClock()), build(operator_spec, general=True)]
    outputs: list[list[WindowResult]] = [[], []]
    for step in range(40):
        batch = [rec(f"k{(step * 7 + j) % 5}", step * 3 - j * 4, j) for j in range(4)]
        for op, out in zip(ops, outputs, strict=True):
            op.process_batch(batch)
            op.advance_watermark(step * 3 - 6)
            out += results(op)
            assert op.gauges() == ops[0].gauges()
            assert op.timer_counts() == ops[0].timer_counts()
    assert outputs[0] == outputs[1]
    assert any(r.fire.value == "late" for r in outputs[0])
