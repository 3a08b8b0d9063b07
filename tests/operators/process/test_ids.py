"""Output ids: deterministic, so reprocessing after a restart reproduces them."""

from __future__ import annotations

from typing import Any

import orjson

from service.core.time import ManualClock, TimeDomain
from service.functions import Context, KeyedProcessFunction, Out
from tests.operators.process.harness import make, outputs, rec


class Twice(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        out.collect(value)
        out.collect(value)
        ctx.timer_service.register_event_time_timer(100)
        ctx.timer_service.register_processing_time_timer(50)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        out.collect(timestamp)


def test_ids_name_pipeline_key_offset_or_timer_and_index() -> None:
    clock = ManualClock(0)
    op = make(Twice(), clock, pipeline="alerts")
    op.process_batch([rec("u1", 5, "x", 41)])
    op.advance_watermark(100)
    clock.set(50)
    op.advance_processing_time(50)
    assert [o.id for o in outputs(op)] == [
        "alerts|u1|41|0",
        "alerts|u1|41|1",
        "alerts|u1|te100|0",
        "alerts|u1|tp50|0",
    ]


def test_same_input_after_a_restart_gives_the_same_ids() -> None:
    clock = ManualClock(0)
    op = make(Twice(), clock)
    op.process_batch([rec("a", 5, "x", 0)])
    checkpoint = orjson.loads(orjson.dumps(op.snapshot()))
    op.process_batch([rec("b", 6, "y", 1), rec("a", 7, "z", 2)])
    op.advance_watermark(200)
    first_run = [o.id for o in outputs(op)][2:]  # what came after the checkpoint

    # Crash: a new operator restores the checkpoint and the input is replayed from offset 1.
    again = make(Twice(), ManualClock(0))
    again.restore(checkpoint)
    again.process_batch([rec("b", 6, "y", 1), rec("a", 7, "z", 2)])
    again.advance_watermark(200)
    assert [o.id for o in outputs(again)] == first_run
    assert len(set(first_run)) == len(first_run)


class Repeat(KeyedProcessFunction):
    """Fires at 100 (event) and 50 (processing) twice: on_timer registers its own time
    once more, so the timer is due again in the same advance."""

    def open(self, ctx: Context) -> None:
        self.repeated = ctx.value_state("repeated")

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        ctx.timer_service.register_event_time_timer(100)
        ctx.timer_service.register_processing_time_timer(50)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        out.collect(timestamp)
        if self.repeated.value() != timestamp:
            self.repeated.update(timestamp)
            if ctx.time_domain is TimeDomain.EVENT_TIME:
                ctx.timer_service.register_event_time_timer(timestamp)
            else:
                ctx.timer_service.register_processing_time_timer(timestamp)


def test_a_timer_firing_again_in_the_same_advance_gets_ids_of_its_own() -> None:
    clock = ManualClock(0)
    op = make(Repeat(), clock, pipeline="alerts")
    op.process_batch([rec("u1", 5, "x", 41), rec("u2", 6, "y", 42)])
    op.advance_watermark(100)
    clock.set(50)
    op.advance_processing_time(50)
    assert [o.id for o in outputs(op)] == [
        "alerts|u1|te100|0",
        "alerts|u2|te100|0",
        "alerts|u1|te100r1|0",
        "alerts|u2|te100r1|0",
        "alerts|u1|tp50|0",
        "alerts|u2|tp50|0",
        "alerts|u1|tp50r1|0",
        "alerts|u2|tp50r1|0",
    ]


def test_repeated_firings_get_the_same_ids_after_a_restart() -> None:
    clock = ManualClock(0)
    op = make(Repeat(), clock)
    op.process_batch([rec("a", 5, "x", 0)])
    checkpoint = orjson.loads(orjson.dumps(op.snapshot()))
    op.process_batch([rec("b", 6, "y", 1)])
    op.advance_watermark(100)
    op.advance_watermark(300)  # reaches 300 in two advances, the replay below in one
    first_run = [o.id for o in outputs(op)]

    again = make(Repeat(), ManualClock(0))
    again.restore(checkpoint)
    again.process_batch([rec("b", 6, "y", 1)])
    again.advance_watermark(300)  # one advance where the first run had two
    assert [o.id for o in outputs(again)] == first_run
    assert len(set(first_run)) == len(first_run)
