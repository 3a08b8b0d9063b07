"""The timer service (semantics.md section 4)."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import pytest

from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, ManualClock, TimeDomain
from service.core.timers import LONE_SEQ, KeyTimers, ScopedTimers, TimerQueue, TimerService

EVENT = TimeDomain.EVENT_TIME
PROC = TimeDomain.PROCESSING_TIME

Fired = list[tuple[str, int, str, Any]]


class Harness:
    """A timer service whose callbacks record firings and may run hooks."""

    def __init__(self, track_keys: bool = False) -> None:
        self.fired: Fired = []
        self.hooks: dict[tuple[int, str], Any] = {}
        self.service: TimerService[str, Any] = TimerService(
            self._on_event, self._on_processing, track_keys=track_keys
        )

    def _on_event(self, ts: int, key: str, ns: Any) -> None:
        self.fired.append(("event", ts, key, ns))
        hook = self.hooks.pop((ts, key), None)
        if hook is not None:
            hook(self.service)

    def _on_processing(self, ts: int, key: str, ns: Any) -> None:
        self.fired.append(("processing", ts, key, ns))
        hook = self.hooks.pop((ts, key), None)
        if hook is not None:
            hook(self.service)

    def keys(self) -> list[tuple[int, str]]:
        return [(ts, key) for _, ts, key, _ in self.fired]


@pytest.fixture(params=[False, True], ids=["plain", "track_keys"])
def h(request: pytest.FixtureRequest) -> Harness:
    return Harness(track_keys=request.param)


def test_event_timer_fires_when_the_watermark_reaches_it(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    assert h.service.advance_watermark(9) == 0
    assert h.fired == []
    assert h.service.advance_watermark(10) == 1
    assert h.fired == [("event", 10, "a", "")]


def test_timers_fire_in_timestamp_order(h: Harness) -> None:
    for ts in (30, 10, 20):
        h.service.register_event_time_timer(ts, f"k{ts}", "")
    h.service.advance_watermark(100)
    assert h.keys() == [(10, "k10"), (20, "k20"), (30, "k30")]


def test_ties_fire_in_registration_order(h: Harness) -> None:
    for key in ("c", "a", "b"):
        h.service.register_event_time_timer(10, key, "")
    h.service.register_event_time_timer(5, "z", "")
    h.service.advance_watermark(10)
    assert h.keys() == [(5, "z"), (10, "c"), (10, "a"), (10, "b")]


def test_duplicate_registration_fires_once(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "w")
    h.service.register_event_time_timer(10, "a", "w")
    assert h.service.event_timers == 1
    h.service.advance_watermark(10)
    assert h.fired == [("event", 10, "a", "w")]


def test_duplicate_registration_keeps_the_first_position(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "b", "")
    h.service.register_event_time_timer(10, "a", "")
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "a"), (10, "b")]


def test_same_timestamp_other_key_or_namespace_is_another_timer(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "w1")
    h.service.register_event_time_timer(10, "a", "w2")
    h.service.register_event_time_timer(10, "b", "w1")
    assert h.service.event_timers == 3


def test_timer_without_namespace_is_another_timer_than_one_with_a_namespace(
    h: Harness,
) -> None:
    # A timer without a namespace is queued as its bare key: it must not merge with, or be
    # deleted by, the same key's timers that have one.
    for namespace in (None, "", ("w", 0, 10)):
        h.service.register_event_time_timer(10, "a", namespace)
    h.service.register_event_time_timer(10, "a", None)
    assert h.service.event_timers == 3
    h.service.delete_event_time_timer(10, "a", "")
    assert h.service.is_queued(EVENT, 10, "a", None)
    h.service.advance_watermark(10)
    assert h.fired == [("event", 10, "a", None), ("event", 10, "a", ("w", 0, 10))]


def test_timers_without_namespace_snapshot_and_restore_with_their_order(h: Harness) -> None:
    for key in ("b", "a", "c"):
        h.service.register_event_time_timer(10, key, None)
        h.service.register_processing_time_timer(7, key, None)
    h.service.delete_event_time_timer(10, "a", None)
    h.service.register_event_time_timer(10, "a", None)  # now last among the ties
    data = json.loads(json.dumps(h.service.snapshot()))
    twin = Harness(track_keys=h.service._track)
    twin.service.restore(data)
    assert twin.service.snapshot_keys({"a"}) == h.service.snapshot_keys({"a"})
    for harness in (h, twin):
        harness.service.advance_processing_time(7)
        harness.service.advance_watermark(10)
    assert twin.fired == h.fired
    assert h.keys() == [(7, "b"), (7, "a"), (7, "c"), (10, "b"), (10, "c"), (10, "a")]


def test_same_timer_in_both_domains_is_two_timers(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_processing_time_timer(10, "a", "")
    assert (h.service.event_timers, h.service.processing_timers) == (1, 1)
    h.service.delete_processing_time_timer(10, "a", "")
    assert (h.service.event_timers, h.service.processing_timers) == (1, 0)


def test_delete_of_an_absent_timer_is_a_no_op(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.delete_event_time_timer(10, "b", "")
    h.service.delete_event_time_timer(11, "a", "")
    h.service.delete_processing_time_timer(10, "a", "")
    assert h.service.event_timers == 1
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "a")]


def test_delete_of_a_queued_timer_prevents_firing(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "b", "")
    h.service.delete_event_time_timer(10, "a", "")
    assert h.service.event_timers == 1
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "b")]


def test_reregistering_a_deleted_timer_queues_it_last_among_ties(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "b", "")
    h.service.delete_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "a", "")
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "b"), (10, "a")]


def test_fired_timer_is_gone_and_can_be_registered_again(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.advance_watermark(10)
    assert h.service.event_timers == 0
    assert not h.service.is_queued(EVENT, 10, "a", "")
    h.service.register_event_time_timer(20, "a", "")
    h.service.advance_watermark(20)
    assert h.keys() == [(10, "a"), (20, "a")]


def test_timer_registered_during_firing_at_or_before_w_fires_in_the_same_advance(
    h: Harness,
) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.hooks[(10, "a")] = lambda s: s.register_event_time_timer(15, "b", "")
    assert h.service.advance_watermark(20) == 2
    assert h.keys() == [(10, "a"), (15, "b")]


def test_timer_registered_during_firing_after_w_waits(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.hooks[(10, "a")] = lambda s: s.register_event_time_timer(25, "b", "")
    h.service.advance_watermark(20)
    assert h.keys() == [(10, "a")]
    assert h.service.next_event_time() == 25


def test_timer_registered_during_firing_at_the_current_timestamp_fires_after_its_ties(
    h: Harness,
) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "b", "")
    h.hooks[(10, "a")] = lambda s: s.register_event_time_timer(10, "c", "")
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "a"), (10, "b"), (10, "c")]


def test_earlier_timer_registered_during_firing_preempts_the_current_timestamp(
    h: Harness,
) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "b", "")
    h.service.advance_watermark(5)
    h.hooks[(10, "a")] = lambda s: s.register_event_time_timer(7, "early", "")
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "a"), (7, "early"), (10, "b")]


def test_timer_registered_during_firing_below_the_old_watermark_fires_at_once(
    h: Harness,
) -> None:
    h.service.advance_watermark(50)
    h.service.register_event_time_timer(60, "a", "")
    h.hooks[(60, "a")] = lambda s: s.register_event_time_timer(40, "past", "")
    h.service.advance_watermark(60)
    assert h.keys() == [(60, "a"), (40, "past")]


def test_deleting_a_pending_tie_from_a_callback_prevents_it(h: Harness) -> None:
    for key in ("a", "b", "c"):
        h.service.register_event_time_timer(10, key, "")
    h.hooks[(10, "a")] = lambda s: s.delete_event_time_timer(10, "b", "")
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "a"), (10, "c")]
    assert h.service.event_timers == 0


def test_deleting_a_later_timer_from_a_callback_prevents_it(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(15, "b", "")
    h.hooks[(10, "a")] = lambda s: s.delete_event_time_timer(15, "b", "")
    assert h.service.advance_watermark(20) == 1
    assert h.keys() == [(10, "a")]


def test_deleting_the_last_pending_tie_then_reregistering_it_fires_once(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "b", "")

    def hook(s: TimerService[str, Any]) -> None:
        s.delete_event_time_timer(10, "b", "")
        s.register_event_time_timer(10, "b", "")

    h.hooks[(10, "a")] = hook
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "a"), (10, "b")]
    assert h.service.event_timers == 0


def test_callback_sees_the_new_watermark(h: Harness) -> None:
    seen: list[int] = []
    h.service.register_event_time_timer(10, "a", "")
    h.hooks[(10, "a")] = lambda s: seen.append(s.current_watermark)
    h.service.advance_watermark(30)
    assert seen == [30]


def test_watermark_never_goes_back(h: Harness) -> None:
    h.service.advance_watermark(100)
    h.service.register_event_time_timer(50, "a", "")
    assert h.service.advance_watermark(60) == 0
    assert h.service.current_watermark == 100
    assert h.fired == []


def test_service_starts_at_min(h: Harness) -> None:
    assert h.service.current_watermark == MIN_TIMESTAMP
    h.service.register_event_time_timer(MIN_TIMESTAMP, "a", "")
    assert h.service.advance_watermark(MIN_TIMESTAMP) == 0


def test_max_fires_everything(h: Harness) -> None:
    for i in range(100):
        h.service.register_event_time_timer(i * 1000, f"k{i}", "")
    h.service.register_event_time_timer(MAX_TIMESTAMP, "last", "")
    h.service.register_processing_time_timer(5, "proc", "")
    assert h.service.advance_watermark(MAX_TIMESTAMP) == 101
    assert h.service.event_timers == 0
    assert h.keys()[-1] == (MAX_TIMESTAMP, "last")
    assert h.service.processing_timers == 1  # processing time is not event time


def test_event_timers_do_not_fire_on_processing_time(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    assert h.service.advance_processing_time(100) == 0
    assert h.fired == []


# -- processing time ----------------------------------------------------------------------
def test_processing_timer_fires_when_the_clock_reaches_it(h: Harness) -> None:
    clock = ManualClock(0)
    h.service.register_processing_time_timer(100, "a", "")
    assert h.service.advance_processing_time(clock.advance(99)) == 0
    assert h.service.advance_processing_time(clock.advance(1)) == 1
    assert h.fired == [("processing", 100, "a", "")]
    assert h.service.current_processing_time == 100


def test_processing_timer_in_the_past_fires_on_the_next_advance(h: Harness) -> None:
    clock = ManualClock(1000)
    h.service.advance_processing_time(clock.now_ms())
    h.service.register_processing_time_timer(500, "late", "")
    assert h.service.next_processing_time() == 500
    assert h.service.advance_processing_time(clock.now_ms()) == 1
    assert h.keys() == [(500, "late")]


def test_next_processing_time_is_the_head(h: Harness) -> None:
    assert h.service.next_processing_time() is None
    h.service.register_processing_time_timer(300, "a", "")
    assert h.service.next_processing_time() == 300
    h.service.register_processing_time_timer(200, "b", "")
    assert h.service.next_processing_time() == 200
    h.service.register_processing_time_timer(400, "c", "")
    assert h.service.next_processing_time() == 200


def test_next_processing_time_follows_deletes(h: Harness) -> None:
    h.service.register_processing_time_timer(200, "a", "")
    h.service.register_processing_time_timer(200, "b", "")
    h.service.register_processing_time_timer(300, "c", "")
    h.service.delete_processing_time_timer(200, "a", "")
    assert h.service.next_processing_time() == 200
    h.service.delete_processing_time_timer(200, "b", "")
    assert h.service.next_processing_time() == 300
    h.service.delete_processing_time_timer(300, "c", "")
    assert h.service.next_processing_time() is None


def test_next_processing_time_after_firing_is_the_new_head(h: Harness) -> None:
    for ts in (100, 200, 300):
        h.service.register_processing_time_timer(ts, "a", "")
    h.service.advance_processing_time(250)
    assert h.service.next_processing_time() == 300


def test_processing_callback_may_register_the_next_timer(h: Harness) -> None:
    h.service.register_processing_time_timer(100, "a", "")
    h.hooks[(100, "a")] = lambda s: s.register_processing_time_timer(200, "a", "")
    h.service.advance_processing_time(150)
    assert h.service.next_processing_time() == 200
    assert h.keys() == [(100, "a")]


def test_processing_ties_fire_in_registration_order(h: Harness) -> None:
    for key in ("b", "a", "c"):
        h.service.register_processing_time_timer(10, key, "")
    h.service.advance_processing_time(10)
    assert h.keys() == [(10, "b"), (10, "a"), (10, "c")]


def test_processing_time_does_not_go_back(h: Harness) -> None:
    h.service.advance_processing_time(500)
    h.service.advance_processing_time(100)
    assert h.service.current_processing_time == 500


# -- counts, lookups ----------------------------------------------------------------------
def test_counts_are_per_domain(h: Harness) -> None:
    s = h.service
    s.register(EVENT, 10, "a", "")
    s.register(EVENT, 20, "a", "")
    s.register(PROC, 10, "a", "")
    assert (s.event_timers, s.processing_timers) == (2, 1)
    s.delete(EVENT, 10, "a", "")
    assert (s.event_timers, s.processing_timers) == (1, 1)
    s.advance_processing_time(10)
    assert (s.event_timers, s.processing_timers) == (1, 0)
    s.advance_watermark(20)
    assert (s.event_timers, s.processing_timers) == (0, 0)


def test_is_queued_and_timers_list_each_domain(h: Harness) -> None:
    s = h.service
    s.register(EVENT, 20, "b", ("w", 1))
    s.register(EVENT, 10, "a", ("w", 0))
    s.register(PROC, 5, "c", "")
    assert s.is_queued(EVENT, 10, "a", ("w", 0))
    assert not s.is_queued(PROC, 10, "a", ("w", 0))
    assert list(s.timers(EVENT)) == [(10, "a", ("w", 0)), (20, "b", ("w", 1))]
    assert list(s.timers(PROC)) == [(5, "c", "")]


def test_deletion_garbage_stays_bounded() -> None:
    queue: TimerQueue[str, str] = TimerQueue()
    queue.add(0, "keep", "")
    for ts in range(1, 1_000_001):
        queue.add(ts, "k", "")
        queue.remove(ts, "k", "")
    assert len(queue) == 1
    assert len(queue._heap) <= 2 * 1 + 64 + 1
    assert len(queue._buckets) == 1


def test_deleting_many_live_timestamps_shrinks_the_heap() -> None:
    queue: TimerQueue[str, str] = TimerQueue()
    for ts in range(10_000):
        queue.add(ts, "k", "")
    for ts in range(0, 10_000, 2):
        queue.remove(ts, "k", "")
    assert len(queue) == 5_000
    assert len(queue._heap) <= 2 * 5_000 + 64 + 1
    fired: list[int] = []
    queue.fire_until(MAX_TIMESTAMP, lambda ts, k, ns: fired.append(ts))
    assert fired == list(range(1, 10_000, 2))


def test_reregistering_a_deleted_timestamp_does_not_fire_twice() -> None:
    fired: list[int] = []
    queue: TimerQueue[str, str] = TimerQueue()
    for _ in range(3):
        queue.add(10, "k", "")
        queue.remove(10, "k", "")
    queue.add(10, "k", "")
    assert queue.peek() == 10
    assert queue.fire_until(10, lambda ts, k, ns: fired.append(ts)) == 1
    assert fired == [10]
    assert queue.peek() is None


# -- snapshots ----------------------------------------------------------------------------
def _populate(s: TimerService[str, Any]) -> None:
    s.register_event_time_timer(10, "b", ("w", 0, 10))
    s.register_event_time_timer(10, "a", ("w", 0, 10))
    s.register_event_time_timer(20, "a", ("w", 10, 20))
    s.register_event_time_timer(10, "c", ("w", 0, 10))
    s.register_processing_time_timer(7, "a", "")
    s.register_processing_time_timer(7, "z", "")
    s.delete_event_time_timer(10, "a", ("w", 0, 10))
    s.register_event_time_timer(10, "a", ("w", 0, 10))
    s.advance_watermark(5)


def _finish(h: Harness) -> Fired:
    h.service.register_event_time_timer(10, "d", ("w", 0, 10))
    h.service.register_event_time_timer(20, "b", ("w", 10, 20))
    h.service.advance_processing_time(100)
    h.service.advance_watermark(MAX_TIMESTAMP)
    return h.fired


def test_snapshot_is_plain_json_data() -> None:
    h = Harness()
    _populate(h.service)
    data = h.service.snapshot()
    assert json.loads(json.dumps(data)) == data
    assert data["watermark"] == 5


def test_snapshot_restore_mid_stream_equals_uninterrupted(h: Harness) -> None:
    _populate(h.service)
    data = json.loads(json.dumps(h.service.snapshot()))
    twin = Harness(track_keys=h.service._track)
    twin.service.restore(data)
    assert twin.service.current_watermark == 5
    assert (twin.service.event_timers, twin.service.processing_timers) == (4, 2)
    assert _finish(twin) == _finish(h)
    assert [ts for _, ts, _, _ in h.fired] == [7, 7, 10, 10, 10, 10, 20, 20]


def test_restore_replaces_existing_timers(h: Harness) -> None:
    source = Harness()
    source.service.register_event_time_timer(30, "x", "")
    h.service.register_event_time_timer(10, "old", "")
    h.service.restore(source.service.snapshot())
    h.service.advance_watermark(100)
    assert h.keys() == [(30, "x")]


def test_snapshot_key_restore_keys_equals_uninterrupted() -> None:
    h = Harness(track_keys=True)
    _populate(h.service)
    keys = sorted(h.service.take_dirty_keys())
    assert keys == ["a", "b", "c", "z"]
    per_key = [(k, json.loads(json.dumps(h.service.snapshot_key(k)))) for k in keys]
    twin = Harness(track_keys=True)
    twin.service.restore_keys(h.service.current_watermark, reversed(per_key))
    assert list(twin.service.timers(EVENT)) == list(h.service.timers(EVENT))
    assert _finish(twin) == _finish(h)


def test_incremental_key_snapshots_taken_at_different_times_keep_tie_order() -> None:
    h = Harness(track_keys=True)
    s = h.service
    s.register_event_time_timer(10, "a", "")
    s.register_event_time_timer(10, "b", "")
    stored = {k: s.snapshot_key(k) for k in s.take_dirty_keys()}
    s.register_event_time_timer(10, "c", "")
    s.delete_event_time_timer(10, "a", "")
    s.register_event_time_timer(10, "a", "")  # now after c
    stored.update({k: s.snapshot_key(k) for k in s.take_dirty_keys()})
    assert set(stored) == {"a", "c"} | {"b"}
    twin = Harness(track_keys=True)
    twin.service.restore_keys(MIN_TIMESTAMP, stored.items())
    twin.service.advance_watermark(10)
    assert twin.keys() == [(10, "b"), (10, "c"), (10, "a")]


def test_the_only_timer_of_a_timestamp_is_written_with_the_lone_seq() -> None:
    s = Harness().service
    s.register_event_time_timer(10, "a", None)
    assert s.snapshot()["event"] == [[10, "a", None, LONE_SEQ]]
    s.register_event_time_timer(10, "b", None)
    (_, _, _, first), (_, _, _, second) = s.snapshot()["event"]
    assert LONE_SEQ < first < second
    s.delete_event_time_timer(10, "b", None)
    assert s.snapshot()["event"] == [[10, "a", None, LONE_SEQ]]


def test_a_timer_joining_a_lone_restored_one_fires_after_it(h: Harness) -> None:
    h.service.register_event_time_timer(10, "first", ("w", 1))
    twin = Harness()
    twin.service.restore(json.loads(json.dumps(h.service.snapshot())))
    twin.service.register_event_time_timer(10, "second", ("w", 1))
    twin.service.register_event_time_timer(10, "third", None)
    twin.service.advance_watermark(10)
    assert twin.keys() == [(10, "first"), (10, "second"), (10, "third")]


def test_a_lone_timer_written_before_others_joined_keeps_its_place_in_a_key_restore() -> None:
    h = Harness(track_keys=True)
    s = h.service
    s.register_event_time_timer(10, "a", None)
    stored = {k: s.snapshot_key(k) for k in s.take_dirty_keys()}  # a, alone: LONE_SEQ
    s.register_event_time_timer(10, "b", None)
    s.register_event_time_timer(10, "c", None)
    stored.update({k: s.snapshot_key(k) for k in s.take_dirty_keys()})  # b and c only
    assert set(stored) == {"a", "b", "c"}
    twin = Harness(track_keys=True)
    twin.service.restore_keys(MIN_TIMESTAMP, stored.items())
    twin.service.advance_watermark(10)
    assert twin.keys() == [(10, "a"), (10, "b"), (10, "c")]


def test_dirty_keys_record_registration_deletion_and_firing() -> None:
    s = Harness(track_keys=True).service
    s.register_event_time_timer(10, "a", "")
    s.register_processing_time_timer(10, "b", "")
    assert s.take_dirty_keys() == {"a", "b"}
    assert s.take_dirty_keys() == set()
    s.delete_processing_time_timer(10, "b", "")
    s.advance_watermark(10)
    assert s.take_dirty_keys() == {"a", "b"}
    assert s.snapshot_key("a") == {"event": [], "processing": []}


def test_absent_timer_operations_do_not_dirty_keys() -> None:
    s = Harness(track_keys=True).service
    s.delete_event_time_timer(10, "a", "")
    assert s.take_dirty_keys() == set()


def test_snapshot_key_lists_both_domains_in_firing_order() -> None:
    s = Harness(track_keys=True).service
    s.register_event_time_timer(20, "a", ("w", 1))
    s.register_event_time_timer(10, "a", ("w", 0))
    s.register_processing_time_timer(5, "a", "")
    snap = s.snapshot_key("a")
    assert [t[:2] for t in snap["event"]] == [[10, ["w", 0]], [20, ["w", 1]]]
    assert [t[:2] for t in snap["processing"]] == [[5, ""]]


def test_restored_namespace_tuples_are_hashable_again() -> None:
    h = Harness()
    h.service.register_event_time_timer(10, "a", ("w", (0, 10)))
    data = json.loads(json.dumps(h.service.snapshot()))
    twin = Harness()
    twin.service.restore(data)
    assert twin.service.is_queued(EVENT, 10, "a", ("w", (0, 10)))
    twin.service.delete_event_time_timer(10, "a", ("w", (0, 10)))
    assert twin.service.event_timers == 0


def test_registration_after_restore_orders_after_restored_ties() -> None:
    h = Harness()
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "b", "")
    twin = Harness()
    twin.service.restore(h.service.snapshot())
    twin.service.register_event_time_timer(10, "c", "")
    twin.service.advance_watermark(10)
    assert twin.keys() == [(10, "a"), (10, "b"), (10, "c")]


# -- move (delete + register in one call) -------------------------------------------------
def test_move_fires_the_timer_at_its_new_time_only(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.move_event_time_timer(10, 20, "a", "")
    h.service.advance_watermark(15)
    assert h.fired == []
    h.service.advance_watermark(20)
    assert h.fired == [("event", 20, "a", "")]


def test_move_of_an_absent_timer_registers_the_new_one(h: Harness) -> None:
    h.service.move_event_time_timer(10, 20, "a", "")
    assert list(h.service.timers(EVENT)) == [(20, "a", "")]


def test_moved_timer_orders_after_those_already_at_its_new_time(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(20, "b", "")
    h.service.move_event_time_timer(10, 20, "a", "")
    h.service.advance_watermark(20)
    assert h.keys() == [(20, "b"), (20, "a")]


def test_move_to_the_same_time_requeues_it_last_among_ties(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(10, "b", "")
    h.service.move_event_time_timer(10, 10, "a", "")
    h.service.advance_watermark(10)
    assert h.keys() == [(10, "b"), (10, "a")]


def test_move_onto_a_queued_timer_leaves_one(h: Harness) -> None:
    h.service.register_event_time_timer(10, "a", "")
    h.service.register_event_time_timer(20, "a", "")
    h.service.move_event_time_timer(10, 20, "a", "")
    assert h.service.event_timers == 1
    assert list(h.service.timers(EVENT)) == [(20, "a", "")]


def test_move_processing_time_timer_fires_at_its_new_time_only(h: Harness) -> None:
    h.service.register_processing_time_timer(10, "a", "")
    h.service.move_processing_time_timer(10, 20, "a", "")
    h.service.advance_processing_time(15)
    assert h.fired == []
    h.service.advance_processing_time(20)
    assert h.fired == [("processing", 20, "a", "")]


def test_move_is_reflected_in_the_per_key_snapshot() -> None:
    s = Harness(track_keys=True).service
    s.register_event_time_timer(10, "a", "")
    s.take_dirty_keys()
    s.move_event_time_timer(10, 20, "a", "")
    assert s.take_dirty_keys() == {"a"}
    assert [t[0] for t in s.snapshot_key("a")["event"]] == [20]


# -- snapshot_keys (a scan instead of the key index) ---------------------------------------
def test_snapshot_keys_equals_snapshot_key_of_each_key_with_timers() -> None:
    s = Harness(track_keys=True).service
    _populate(s)
    assert s.snapshot_keys({"a", "b", "z", "absent"}) == {
        k: s.snapshot_key(k) for k in ("a", "b", "z")
    }


def test_snapshot_keys_needs_no_key_index() -> None:
    plain, tracked = Harness().service, Harness(track_keys=True).service
    _populate(plain)
    _populate(tracked)
    assert plain.snapshot_keys({"a", "c"}) == tracked.snapshot_keys({"a", "c"})


# -- ScopedTimers (the keyed view user functions get) ---------------------------------------
class _Scope:
    def __init__(self, key: str | None) -> None:
        self.key = key


class _Invalid(Exception):
    pass


def _raise_invalid(key: Any, timestamp: Any) -> NoReturn:
    raise _Invalid(key, timestamp)


class View:
    """Makes the keyed view of ``h``'s timers for a key: a :class:`ScopedTimers` of the
    namespace ``"ns"``, or a :class:`KeyTimers` (namespace ``None``, bare entries)."""

    def __init__(self, h: Harness, bare: bool) -> None:
        self.h = h
        self.bare = bare
        self.ns: Any = None if bare else "ns"

    def __call__(self, key: str | None) -> ScopedTimers[str, Any]:
        scope = _Scope(key)
        if self.bare:
            return KeyTimers(self.h.service, scope, _raise_invalid)
        return ScopedTimers(self.h.service, scope, "ns", _raise_invalid)


@pytest.fixture(params=[False, True], ids=["namespaced", "bare"])
def view(request: pytest.FixtureRequest, h: Harness) -> View:
    return View(h, request.param)


def test_scoped_timers_register_for_the_current_key(view: View) -> None:
    view("a").register_event_time_timer(10)
    view("b").register_processing_time_timer(5)
    assert list(view.h.service.timers(EVENT)) == [(10, "a", view.ns)]
    assert list(view.h.service.timers(PROC)) == [(5, "b", view.ns)]


def test_scoped_timers_delete_only_the_current_keys_timer(view: View) -> None:
    service = view.h.service
    for key in ("a", "b"):
        service.register_event_time_timer(10, key, view.ns)
        service.register_processing_time_timer(10, key, view.ns)
    view("a").delete_event_time_timer(10)
    view("a").delete_processing_time_timer(10)
    assert list(service.timers(EVENT)) == [(10, "b", view.ns)]
    assert list(service.timers(PROC)) == [(10, "b", view.ns)]


def test_scoped_timers_delete_a_lone_timer_and_one_among_ties(view: View) -> None:
    service = view.h.service
    view("a").register_event_time_timer(10)
    view("a").register_event_time_timer(20)
    view("b").register_event_time_timer(20)
    view("a").delete_event_time_timer(10)  # the only timer at 10
    view("a").delete_event_time_timer(20)  # one of two at 20
    view("c").delete_event_time_timer(20)  # not queued
    assert list(service.timers(EVENT)) == [(20, "b", view.ns)]
    assert service.event_timers == 1
    service.advance_watermark(30)
    assert view.h.keys() == [(20, "b")]


def test_scoped_timer_registration_is_deduplicated(view: View) -> None:
    scoped = view("a")
    scoped.register_event_time_timer(10)
    scoped.register_event_time_timer(10)
    view("b").register_event_time_timer(10)
    view("b").register_event_time_timer(10)
    assert view.h.service.event_timers == 2
    assert view.h.service.counts()["event"] == (2, 0, 0)


def test_scoped_ties_fire_in_registration_order(view: View) -> None:
    for key in ("c", "a", "b"):
        view(key).register_event_time_timer(10)
    view.h.service.advance_watermark(10)
    assert view.h.keys() == [(10, "c"), (10, "a"), (10, "b")]


def test_scoped_timers_without_a_current_key_call_invalid(view: View) -> None:
    scoped = view(None)
    for operation in (
        scoped.register_event_time_timer,
        scoped.delete_event_time_timer,
        scoped.register_processing_time_timer,
        scoped.delete_processing_time_timer,
    ):
        with pytest.raises(_Invalid):
            operation(10)
    assert (view.h.service.event_timers, view.h.service.processing_timers) == (0, 0)


def test_scoped_registration_of_a_non_int_timestamp_calls_invalid(view: View) -> None:
    scoped = view("a")
    with pytest.raises(_Invalid):
        scoped.register_event_time_timer(10.5)  # type: ignore[arg-type]
    with pytest.raises(_Invalid):
        scoped.register_processing_time_timer("10")  # type: ignore[arg-type]
    assert (view.h.service.event_timers, view.h.service.processing_timers) == (0, 0)


@pytest.mark.parametrize("bare", [False, True], ids=["namespaced", "bare"])
def test_scoped_changes_are_tracked_per_key(bare: bool) -> None:
    view = View(Harness(track_keys=True), bare)
    view("a").register_event_time_timer(10)
    assert view.h.service.take_dirty_keys() == {"a"}
    view("a").delete_event_time_timer(10)
    assert view.h.service.take_dirty_keys() == {"a"}
    assert view.h.service.snapshot_key("a") == {"event": [], "processing": []}
