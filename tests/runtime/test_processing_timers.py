"""The processing-time scheduler keeps exactly one event-loop handle per timer service."""

from __future__ import annotations

import asyncio

from service.core.time import ManualClock
from service.core.timers import TimerService
from service.runtime.partition.processing_timers import ProcessingTimeScheduler
from service.runtime.partition.state_hold import StateHold


class CountingLoop:
    """Wraps the running loop and counts ``call_at`` calls (the handles made)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.handles: list[asyncio.TimerHandle] = []

    def time(self) -> float:
        return self._loop.time()

    def call_at(self, when: float, callback: object) -> asyncio.TimerHandle:
        handle = self._loop.call_at(when, callback)  # type: ignore[arg-type]
        self.handles.append(handle)
        return handle


async def test_one_handle_for_many_timers_and_firing_in_order() -> None:
    clock = ManualClock(1_000)
    fired: list[tuple[int, str]] = []
    service: TimerService[str, str] = TimerService(
        lambda ts, k, ns: None, lambda ts, k, ns: fired.append((ts, k))
    )
    loop = CountingLoop(asyncio.get_running_loop())
    done = asyncio.Event()

    def fire(now: int, head: int) -> None:
        service.advance_processing_time(now)
        if len(fired) == 101:
            done.set()

    scheduler = ProcessingTimeScheduler(loop, clock, service.next_processing_time, fire)  # type: ignore[arg-type]
    for i in range(100):
        service.register_processing_time_timer(5_000 + i, f"k{i}", "")
    scheduler.reschedule()
    scheduler.reschedule()  # same head: the handle is kept
    assert len(loop.handles) == 1
    assert scheduler.scheduled_for == 5_000

    service.register_processing_time_timer(1_000, "early", "")
    scheduler.reschedule()  # an earlier head replaces the handle
    assert len(loop.handles) == 2
    assert loop.handles[0].cancelled()
    assert scheduler.scheduled_for == 1_000

    clock.set(10_000)  # everything is due: fires as soon as possible, in order
    scheduler.reschedule()  # unchanged head, still one live handle
    await asyncio.wait_for(done.wait(), timeout=5)
    assert [k for _, k in fired] == ["early"] + [f"k{i}" for i in range(100)]
    assert sum(1 for h in loop.handles if not h.cancelled()) <= 1
    assert scheduler.wakeups == 1  # one wake-up fired all 101 timers
    assert not scheduler.has_handle


async def test_no_handle_without_timers() -> None:
    clock = ManualClock(0)
    service: TimerService[str, str] = TimerService(lambda *a: None, lambda *a: None)
    loop = CountingLoop(asyncio.get_running_loop())
    scheduler = ProcessingTimeScheduler(
        loop,  # type: ignore[arg-type]
        clock,
        service.next_processing_time,
        lambda now, head: None,
    )
    scheduler.reschedule()
    assert loop.handles == []
    service.register_processing_time_timer(10, "k", "")
    scheduler.reschedule()
    service.delete_processing_time_timer(10, "k", "")
    scheduler.reschedule()  # the queue is empty again: the handle goes
    assert loop.handles[0].cancelled()
    assert not scheduler.has_handle


async def test_a_wake_up_during_a_hold_fires_nothing_until_the_hold_ends() -> None:
    """A checkpoint's snapshot holds the state (state_hold.py): a timer due meanwhile
    fires right after the hold, and no handle is armed while it lasts (no busy loop)."""
    clock = ManualClock(1_000)
    fired: list[str] = []
    service: TimerService[str, str] = TimerService(
        lambda ts, k, ns: None, lambda ts, k, ns: fired.append(k)
    )
    loop = CountingLoop(asyncio.get_running_loop())
    hold = StateHold()
    done = asyncio.Event()

    def fire(now: int, head: int) -> None:
        service.advance_processing_time(now)
        done.set()

    scheduler = ProcessingTimeScheduler(
        loop,  # type: ignore[arg-type]
        clock,
        service.next_processing_time,
        fire,
        hold,
    )
    service.register_processing_time_timer(1_000, "due", "")
    with hold.holding():
        scheduler.reschedule()
        for _ in range(5):  # the handle's turn comes and goes
            await asyncio.sleep(0)
        assert fired == [] and not scheduler.has_handle
        assert len(loop.handles) == 1 and scheduler.wakeups == 0
    assert scheduler.has_handle  # armed again by the hold's end
    await asyncio.wait_for(done.wait(), timeout=5)
    assert fired == ["due"] and scheduler.wakeups == 1
