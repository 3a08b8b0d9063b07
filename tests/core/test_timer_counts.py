"""TimerService.counts(): registered, fired and deleted per domain, for metrics."""

from __future__ import annotations

from service.core.timers import TimerService


def service() -> tuple[TimerService[str, None], list[int]]:
    fired: list[int] = []
    return TimerService(lambda t, k, n: fired.append(t), lambda t, k, n: None), fired


def test_counts_follow_register_delete_move_and_fire() -> None:
    timers, fired = service()
    for ts in range(10):
        timers.register_event_time_timer(ts, "k", None)
    timers.register_event_time_timer(3, "k", None)  # already queued: not a registration
    timers.delete_event_time_timer(5, "k", None)
    timers.delete_event_time_timer(50, "k", None)  # not queued: not a delete
    timers.move_event_time_timer(6, 60, "k", None)  # one delete and one registration
    timers.register_processing_time_timer(1, "a", None)
    assert timers.counts() == {"event": (11, 0, 2), "processing": (1, 0, 0)}
    timers.advance_watermark(7)
    assert fired == [0, 1, 2, 3, 4, 7]
    assert timers.counts() == {"event": (11, 6, 2), "processing": (1, 0, 0)}
    timers.advance_processing_time(5)
    assert timers.counts()["processing"] == (1, 1, 0)


def test_reading_the_counts_does_not_change_tie_order() -> None:
    timers, _ = service()
    order: list[str] = []
    timers = TimerService(lambda t, k, n: order.append(k), lambda t, k, n: None)
    timers.register_event_time_timer(1, "first", None)
    timers.counts()
    timers.register_event_time_timer(1, "second", None)
    timers.advance_watermark(1)
    assert order == ["first", "second"]
    assert timers.counts()["event"] == (2, 2, 0)


def test_a_restore_starts_the_counts_afresh() -> None:
    timers, _ = service()
    for ts in range(4):
        timers.register_event_time_timer(ts, "k", None)
    timers.advance_watermark(1)
    restored, fired = service()
    restored.restore(timers.snapshot())
    assert restored.counts() == {"event": (0, 0, 0), "processing": (0, 0, 0)}
    restored.register_event_time_timer(100, "z", None)
    restored.advance_watermark(1000)
    assert fired == [2, 3, 100]
    assert restored.counts()["event"] == (1, 3, 0)
