"""User-code exceptions go to the failed output and the operator keeps going."""

from __future__ import annotations

from typing import Any

from service.core.time import ManualClock
from service.functions import Context, KeyedProcessFunction, Out
from tests.operators.process.harness import make, rec, values


class Fragile(KeyedProcessFunction):
    def open(self, ctx: Context) -> None:
        self.seen = ctx.value_state("seen")

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        self.seen.update((self.seen.value() or 0) + 1)
        if value == "boom":
            raise ValueError("bad value")
        if value == "timer":
            ctx.timer_service.register_event_time_timer(10)
            ctx.timer_service.register_processing_time_timer(20)
        out.collect(self.seen.value())

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        raise RuntimeError(f"timer {timestamp} broke")


def test_exception_in_process_element_goes_to_failed_with_source_and_summary() -> None:
    op = make(Fragile())
    op.process_batch([rec("a", 1, "ok", 0), rec("a", 2, "boom", 1), rec("a", 3, "ok", 2)])
    [failed] = op.collector.failed
    assert failed.source == ("src", 1)
    assert failed.key == "a"
    assert failed.reason == "user_function_error"
    assert "ValueError: bad value" in failed.detail
    assert "offset 1" in failed.detail
    assert "test_failures.py" in failed.detail and "process_element" in failed.detail
    assert op.counters.failed == 1


def test_operator_continues_after_a_failure_and_keeps_earlier_state_changes() -> None:
    op = make(Fragile())
    op.process_batch([rec("a", 1, "ok", 0), rec("a", 2, "boom", 1), rec("a", 3, "ok", 2)])
    # The failing call's increment stayed: the third record sees 3.
    assert [v for _, _, v in values(op)] == [1, 3]


def test_exception_in_on_timer_goes_to_failed_with_no_source_and_names_the_timer() -> None:
    clock = ManualClock(0)
    op = make(Fragile(), clock)
    op.process_batch([rec("a", 1, "timer", 0)])
    op.advance_watermark(100)
    clock.set(100)
    op.advance_processing_time(100)
    event, processing = op.collector.failed
    assert (event.source, event.key, event.reason) == (None, "a", "user_function_error")
    assert "event-time timer at 10" in event.detail
    assert "RuntimeError: timer 10 broke" in event.detail
    assert "processing-time timer at 20" in processing.detail
    assert op.gauges().event_timers == 0  # a failed timer is not retried


def test_processing_continues_after_a_failed_timer() -> None:
    op = make(Fragile())
    op.process_batch([rec("a", 1, "timer", 0)])
    op.advance_watermark(100)
    values(op)
    op.process_batch([rec("a", 101, "ok", 1)])
    assert values(op) == [("a", 101, 2)]
