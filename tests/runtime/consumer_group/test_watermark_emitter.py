"""What one emission delivers, what the other parts tell and ask the emitter, and when it
ticks (watermark_emitter.py). The emission is synchronous: no loop runs here, and the clock
is the test's."""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, ManualClock
from service.runtime.consumer_group.watermark_emitter import IDLE_TICK_MS, WatermarkEmitter
from service.runtime.partition.state_hold import StateHold

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
        made.assign(tp, 0, MIN_TIMESTAMP, MIN_TIMESTAMP)
    return made, flushed


def test_an_emission_delivers_the_minimum_to_every_partition() -> None:
    parts = {A: Part(), B: Part()}
    made, flushed = emitter(parts)
    made.partition_active(A, 100, 0)
    made.partition_active(B, 40, 0)
    made.emit(0)
    assert (parts[A].delivered, parts[B].delivered) == ([40], [40])
    assert flushed == ["flush"]
    assert made.current == 40


def test_an_emission_that_moves_nothing_delivers_nothing_and_flushes_nothing() -> None:
    parts = {A: Part()}
    made, flushed = emitter(parts)
    made.partition_active(A, 100, 0)
    made.emit(0)
    made.emit(1)
    assert parts[A].delivered == [100]
    assert flushed == ["flush"]


def test_a_finished_partition_gets_max_and_leaves_the_minimum() -> None:
    parts = {A: Part(), B: Part()}
    made, _ = emitter(parts)
    made.partition_active(A, 100, 0)
    made.partition_active(B, 40, 0)
    made.finish(B)
    made.emit(0)
    assert (parts[A].delivered, parts[B].delivered) == ([100], [MAX_TIMESTAMP])


def test_a_delivery_to_a_partition_the_session_no_longer_holds_is_dropped() -> None:
    made, flushed = emitter({})
    made.assign(A, 0, MIN_TIMESTAMP, MIN_TIMESTAMP)
    made.partition_active(A, 100, 0)
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


def test_a_revoked_partition_no_longer_holds_the_others_back() -> None:
    parts = {A: Part(), B: Part()}
    made, _ = emitter(parts)
    made.partition_active(A, 100, 0)
    made.partition_active(B, 40, 0)
    made.revoke(B)
    made.emit(0)
    assert parts[A].delivered == [100]
    assert made.partition_watermarks() == {A: 100}


def test_the_minimum_excluding_a_partition_is_the_others() -> None:
    made, _ = emitter({A: Part(), B: Part()})
    made.partition_active(A, 100, 0)
    made.partition_active(B, 40, 0)
    assert (made.minimum_excluding(A, 0), made.minimum_excluding(B, 0)) == (40, 100)
    assert made.partition_watermarks() == {A: 100, B: 40}


def test_idleness_as_the_reporter_and_the_markers_see_it() -> None:
    made, _ = emitter({A: Part(), B: Part()}, idle_timeout_ms=1_000)
    made.partition_active(A, 100, 500)
    assert (made.is_idle(A, 1_000), made.is_idle(B, 1_000)) == (False, True)
    made.emit(1_000)
    snapshot = made.snapshot(1_000)
    assert snapshot.current == 100
    assert snapshot.idle == (B,)  # what status shows: a partition not held is not idle
    assert snapshot.idle_advancing is False
    assert made.idle_advanced() is None


def test_idle_advance_is_what_the_markers_announce_while_it_runs() -> None:
    made, _ = emitter({A: Part()}, idle_timeout_ms=1_000, idle_advance=True)
    made.partition_active(A, 10_000, 0)
    made.emit(0)
    assert made.idle_advanced() is None
    made.emit(1_500)
    assert made.idle_advanced() == 11_500 == made.current
    assert made.snapshot(1_500).idle_advancing


def test_a_tick_while_a_snapshot_holds_the_state_delivers_nothing() -> None:
    """A checkpoint's snapshot holds the state (state_hold.py): the tick is skipped, the
    next one delivers what the partitions reached meanwhile."""
    parts = {A: Part()}
    hold = StateHold()
    ticks: list[int] = []
    made, flushed = emitter(parts, hold=hold, on_tick=ticks.append)
    made.partition_active(A, 100, 0)
    with hold.holding():
        made.tick(10)
    assert (parts[A].delivered, flushed, ticks) == ([], [], [])
    made.tick(20)
    assert (parts[A].delivered, flushed, ticks) == ([100], ["flush"], [20])
