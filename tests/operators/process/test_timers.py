"""Timers of a process function: domains, firing, re-registration, output timestamps."""

from __future__ import annotations

from typing import Any

from service.core.time import ManualClock, TimeDomain
from service.functions import Context, KeyedProcessFunction, Out
from tests.operators.process.harness import make, rec, values


class EchoTimers(KeyedProcessFunction):
    """Registers an event timer at ``value["event"]`` and/or a processing timer at
    ``value["processing"]``; on a timer, emits what the context says."""

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        if "event" in value:
            ctx.timer_service.register_event_time_timer(value["event"])
        if "processing" in value:
            ctx.timer_service.register_processing_time_timer(value["processing"])
        if "delete_event" in value:
            ctx.timer_service.delete_event_time_timer(value["delete_event"])
        out.collect("element")

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        out.collect(
            {
                "fired": timestamp,
                "domain": ctx.time_domain,
                "ts": ctx.timestamp,
                "watermark": ctx.current_watermark,
                "now": ctx.current_processing_time,
            }
        )


def test_event_timer_fires_when_watermark_reaches_it_with_key_and_timestamp() -> None:
    op = make(EchoTimers())
    op.process_batch([rec("a", 5, {"event": 100})])
    values(op)
    op.advance_watermark(99)
    assert values(op) == []
    op.advance_watermark(150)
    assert values(op) == [
        (
            "a",
            100,
            {"fired": 100, "domain": TimeDomain.EVENT_TIME, "ts": 100, "watermark": 150, "now": 0},
        )
    ]


def test_processing_timer_fires_on_processing_time_with_no_timestamp() -> None:
    clock = ManualClock(1_000)
    op = make(EchoTimers(), clock)
    op.process_batch([rec("a", 5, {"processing": 2_000})])
    values(op)
    assert op.next_processing_time() == 2_000
    op.advance_watermark(10_000)  # event time does not fire processing timers
    assert values(op) == []
    clock.set(2_000)
    op.advance_processing_time(2_000)
    assert values(op) == [
        (
            "a",
            None,
            {
                "fired": 2_000,
                "domain": TimeDomain.PROCESSING_TIME,
                "ts": None,
                "watermark": 10_000,
                "now": 2_000,
            },
        )
    ]
    assert op.next_processing_time() is None


def test_element_output_is_stamped_with_record_timestamp() -> None:
    op = make(EchoTimers())
    op.process_batch([rec("a", 42, {})])
    assert values(op) == [("a", 42, "element")]


def test_context_has_no_time_domain_in_process_element() -> None:
    seen: list[Any] = []

    class Probe(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context, out: Out) -> None:
            seen.append((ctx.key, ctx.timestamp, ctx.time_domain))

    op = make(Probe())
    op.process_batch([rec("k", 7, None)])
    assert seen == [("k", 7, None)]


def test_deleted_timer_does_not_fire() -> None:
    op = make(EchoTimers())
    op.process_batch([rec("a", 1, {"event": 100}), rec("a", 2, {"delete_event": 100})])
    values(op)
    op.advance_watermark(1_000)
    assert values(op) == []
    assert op.gauges().event_timers == 0


def test_duplicate_registration_fires_once() -> None:
    op = make(EchoTimers())
    op.process_batch([rec("a", 1, {"event": 100}), rec("a", 2, {"event": 100})])
    values(op)
    assert op.gauges().event_timers == 1
    op.advance_watermark(100)
    assert len(values(op)) == 1


def test_same_time_timers_of_different_keys_fire_for_their_own_key() -> None:
    op = make(EchoTimers())
    op.process_batch([rec("b", 1, {"event": 100}), rec("a", 1, {"event": 100})])
    values(op)
    op.advance_watermark(100)
    assert [k for k, _, _ in values(op)] == ["b", "a"]


class Chain(KeyedProcessFunction):
    """On each event timer: emit it, register the next one 10 ms later (up to 130), and
    delete the pending timer at 200 when the 120 one fires."""

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        ctx.timer_service.register_event_time_timer(100)
        ctx.timer_service.register_event_time_timer(200)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        out.collect(timestamp)
        if timestamp < 130:
            ctx.timer_service.register_event_time_timer(timestamp + 10)
        if timestamp == 120:
            ctx.timer_service.delete_event_time_timer(200)


def test_timers_registered_in_on_timer_fire_in_the_same_advance() -> None:
    op = make(Chain())
    op.process_batch([rec("a", 1, None)])
    op.advance_watermark(125)
    assert [v for _, _, v in values(op)] == [100, 110, 120]
    assert op.gauges().event_timers == 1  # 130; 200 was deleted by the 120 timer
    op.advance_watermark(1_000)
    assert [v for _, _, v in values(op)] == [130]
    assert op.gauges().event_timers == 0


def test_timer_deleted_inside_on_timer_never_fires() -> None:
    op = make(Chain())
    op.process_batch([rec("a", 1, None)])
    op.advance_watermark(10_000)
    assert 200 not in [v for _, _, v in values(op)]


def test_processing_timer_registered_in_on_timer_fires_when_due() -> None:
    class Tick(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context, out: Out) -> None:
            ctx.timer_service.register_processing_time_timer(10)

        def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
            out.collect(timestamp)
            ctx.timer_service.register_processing_time_timer(timestamp + 10)

    clock = ManualClock(0)
    op = make(Tick(), clock)
    op.process_batch([rec("a", 1, None)])
    clock.set(35)
    op.advance_processing_time(35)
    assert [v for _, _, v in values(op)] == [10, 20, 30]
    assert op.next_processing_time() == 40


def test_watermark_never_goes_back() -> None:
    op = make(EchoTimers())
    op.advance_watermark(100)
    op.advance_watermark(50)
    assert op.current_watermark == 100


def test_gauges_count_timers_per_domain_and_keys_with_state() -> None:
    class Both(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            self.v = ctx.value_state("v")
            self.m = ctx.map_state("m")

        def process_element(self, value: Any, ctx: Context, out: Out) -> None:
            ctx.timer_service.register_event_time_timer(100)
            ctx.timer_service.register_processing_time_timer(100)
            if value == "v":
                self.v.update(1)
            else:
                self.m.put("x", 1)

    op = make(Both())
    op.process_batch([rec("a", 1, "v"), rec("a", 1, "m"), rec("b", 1, "m"), rec("c", 1, "v")])
    gauges = op.gauges()
    assert (gauges.event_timers, gauges.processing_timers, gauges.keys) == (3, 3, 3)
