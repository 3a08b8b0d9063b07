"""What one emission delivers, and when the emitter ticks (watermark_emitter.py). The
emission is synchronous: no loop runs here, and the clock is the test's."""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, ManualClock
from service.runtime.consumer_group.watermark_emitter import IDLE_TICK_MS, WatermarkEmitter

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class Part:
    """What the emitter calls of a partition task."""

    def __init__(self) -> None:
        self.delivered: list[int] = []

    def advance_watermark(self, watermark: int) -> None:
        self.delivered.append(watermark)


def emitter(
    parts: dict[TopicPartition, Any],
    *,
    interval_ms: int = 200,
    idle_timeout_ms: int | None = None,
    **options: Any,
) -> tuple[WatermarkEmitter, list[str]]:
    flushed: list[str] = []
    made = WatermarkEmitter(
        parts,
        ManualClock(0),
        interval_ms,
        idle_timeout_ms,
        lambda: flushed.append("flush"),
        **options,
    )
    for tp in parts:
        made.combiner.assign(tp, 0, MIN_TIMESTAMP, MIN_TIMESTAMP)
    return made, flushed


def test_an_emission_delivers_the_minimum_to_every_partition() -> None:
    parts = {A: Part(), B: Part()}
    made, flushed = emitter(parts)
    made.combiner.update(A, 100, 0)
    made.combiner.update(B, 40, 0)
    made.emit(0)
    assert (parts[A].delivered, parts[B].delivered) == ([40], [40])
    assert flushed == ["flush"]
    assert made.current == 40


def test_an_emission_that_moves_nothing_delivers_nothing_and_flushes_nothing() -> None:
    parts = {A: Part()}
    made, flushed = emitter(parts)
    made.combiner.update(A, 100, 0)
    made.emit(0)
    made.emit(1)
    assert parts[A].delivered == [100]
    assert flushed == ["flush"]


def test_a_finished_partition_gets_max_and_leaves_the_minimum() -> None:
    parts = {A: Part(), B: Part()}
    made, _ = emitter(parts)
    made.combiner.update(A, 100, 0)
    made.combiner.update(B, 40, 0)
    made.combiner.finish(B)
    made.emit(0)
    assert (parts[A].delivered, parts[B].delivered) == ([100], [MAX_TIMESTAMP])


def test_a_delivery_to_a_partition_the_session_no_longer_holds_is_dropped() -> None:
    made, flushed = emitter({})
    made.combiner.assign(A, 0, MIN_TIMESTAMP, MIN_TIMESTAMP)
    made.combiner.update(A, 100, 0)
    made.emit(0)  # nothing to deliver to: no error
    assert flushed == ["flush"]


def test_what_on_emit_writes_is_flushed_even_without_a_delivery() -> None:
    flushed_by_hook: list[int] = []

    def on_emit(now: int) -> bool:
        flushed_by_hook.append(now)
        return True

    made, flushed = emitter({}, on_emit=on_emit)
    made.emit(7)
    assert flushed_by_hook == [7] and flushed == ["flush"]


def test_the_tick_is_the_interval() -> None:
    assert emitter({}, interval_ms=250)[0].tick_ms == 250


def test_per_record_emission_has_no_tick() -> None:
    assert emitter({}, interval_ms=0)[0].tick_ms == 0


def test_per_record_emission_ticks_for_idle_advance_or_alignment() -> None:
    advancing = emitter({}, interval_ms=0, idle_timeout_ms=1_000, idle_advance=True)[0]
    assert advancing.tick_ms == IDLE_TICK_MS
    assert emitter({}, interval_ms=0, on_tick=lambda now: None)[0].tick_ms == IDLE_TICK_MS
