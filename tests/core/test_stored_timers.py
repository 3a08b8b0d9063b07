"""Event-time timers in an ordered store (service/core/stored_timers.py, issue #53),
against the heap's timer service: the same firings in the same order (ties included),
snapshots and counts; deletes, the buffer's writes and restores."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from service.core.state_cache import MemoryStore, NamespacedStore, StateCache
from service.core.stored_timers import (
    META_KEY,
    TIMER_ENTRY_CODEC,
    StoredTimerQueue,
    StoredTimerService,
    timer_key,
)
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from service.core.timers import LONE_SEQ, TimerService

Window = tuple[int, int]


class CountingStore(MemoryStore):
    """A MemoryStore that counts the keys read one by one (``load``)."""

    __slots__ = ("loaded",)

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []

    def load(self, key: str) -> tuple[Any, int] | None:
        self.loaded.append(key)
        return super().load(key)


class Stored:
    """A stored timer service on ``store`` (a fresh MemoryStore by default), its buffer
    and head small, its firings recorded (a hook may run in a callback)."""

    def __init__(
        self, store: MemoryStore | None = None, buffer: int = 3, head: int = 2, cache: int = 2000
    ) -> None:
        self.store = store if store is not None else MemoryStore()
        self.fired: list[tuple[str, int, str, Any]] = []
        self.hooks: dict[tuple[int, str], Any] = {}
        self.per_key = StateCache(
            NamespacedStore(self.store, "timers"), cache, codec=TIMER_ENTRY_CODEC
        )
        self.queue = StoredTimerQueue(
            NamespacedStore(self.store, "timerq"), lambda: buffer, head=head
        )
        self.service: StoredTimerService[Window] = StoredTimerService(
            self._event, self._processing, self.per_key, self.queue
        )

    def _event(self, ts: int, key: str, ns: Window) -> None:
        self.fired.append(("event", ts, key, ns))
        hook = self.hooks.pop((ts, key), None)
        if hook is not None:
            hook(self.service)

    def _processing(self, ts: int, key: str, ns: Window) -> None:
        self.fired.append(("processing", ts, key, ns))

    def flush(self) -> None:
        self.service.flush()
        self.per_key.flush()


class Heap:
    """The heap's timer service, recording its firings the same way."""

    def __init__(self) -> None:
        self.fired: list[tuple[str, int, str, Any]] = []
        self.hooks: dict[tuple[int, str], Any] = {}
        self.service: TimerService[str, Window] = TimerService(self._event, self._processing)

    def _event(self, ts: int, key: str, ns: Window) -> None:
        self.fired.append(("event", ts, key, ns))
        hook = self.hooks.pop((ts, key), None)
        if hook is not None:
            hook(self.service)

    def _processing(self, ts: int, key: str, ns: Window) -> None:
        self.fired.append(("processing", ts, key, ns))


def ranked(snapshot: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` with each timer's sequence number replaced by its rank among its
    instant's timers (a lone one's stays LONE_SEQ): the heap renumbers a lone timer when
    a second joins its instant, the store keeps registration numbers; the order is one."""
    out = dict(snapshot)
    for domain in ("event", "processing"):
        rows: list[list[Any]] = []
        rank = 0
        for i, (ts, key, ns, seq) in enumerate(snapshot[domain]):
            rank = 0 if i == 0 or snapshot[domain][i - 1][0] != ts else rank + 1
            rows.append([ts, key, ns, seq if seq == LONE_SEQ else rank])
        out[domain] = rows
    return out


def test_timer_keys_sort_as_time_then_sequence() -> None:
    pairs = [(MIN_TIMESTAMP, -1), (-5, 3), (-5, 10), (0, -1), (0, 0), (7, 2), (MAX_TIMESTAMP, 1)]
    keys = [timer_key(ts, seq) for ts, seq in pairs]
    assert keys == sorted(keys)
    assert len({len(key) for key in keys}) == 1


def test_ties_fire_in_registration_order_across_the_store_and_the_buffer() -> None:
    """Timers of one instant, some written to the store (past the buffer's bound) and
    some buffered: they fire in the order they were registered."""
    stored = Stored(buffer=3, head=2)
    keys = [f"k{i}" for i in range(10)]
    for key in reversed(keys):
        stored.service.register_event_time_timer(100, key, (0, 101))
    assert stored.queue.writes > 0 and stored.queue.buffered > 0
    stored.service.advance_watermark(100)
    assert [key for _, _, key, _ in stored.fired] == list(reversed(keys))
    assert stored.service.event_timers == 0


def test_a_deleted_timer_does_not_fire_whether_stored_or_buffered() -> None:
    stored = Stored(buffer=100)
    service = stored.service
    service.register_event_time_timer(10, "a", (0, 11))
    service.register_event_time_timer(20, "b", (0, 21))
    stored.flush()  # a and b in the store
    service.register_event_time_timer(15, "c", (0, 16))  # buffered
    service.delete_event_time_timer(10, "a", (0, 11))
    service.delete_event_time_timer(15, "c", (0, 16))
    service.delete_event_time_timer(99, "b", (0, 21))  # not queued: nothing happens
    assert service.event_timers == 1
    service.advance_watermark(100)
    assert stored.fired == [("event", 20, "b", (0, 21))]


def test_registering_a_queued_timer_again_changes_nothing() -> None:
    stored = Stored()
    for _ in range(3):
        stored.service.register_event_time_timer(5, "a", (0, 6))
    assert stored.service.event_timers == 1
    assert stored.service.counts()["event"] == (1, 0, 0)


def test_a_timer_registered_by_a_callback_before_the_rest_fires_first() -> None:
    """As on the heap: a callback's earlier timer pre-empts the timers still due."""
    stored, heap = Stored(buffer=2, head=1), Heap()
    for each in (stored, heap):
        for key, ts in (("a", 10), ("b", 10), ("c", 30)):
            each.service.register_event_time_timer(ts, key, (0, ts + 1))
        each.hooks[(10, "a")] = lambda s: s.register_event_time_timer(5, "z", (0, 6))
        each.hooks[(5, "z")] = lambda s: s.register_event_time_timer(10, "y", (0, 11))
    stored.flush()
    for each in (stored, heap):
        each.service.advance_watermark(20)
    assert stored.fired == heap.fired
    assert [key for _, _, key, _ in stored.fired] == ["a", "z", "b", "y"]


def test_a_flush_writes_the_buffer_in_one_checkpoint_batch() -> None:
    stored = Stored(buffer=1000, cache=10**6)
    for i in range(20):
        stored.service.register_event_time_timer(i, f"k{i}", (0, i + 1))
    assert stored.store.writes == []
    stored.service.flush()
    assert stored.store.writes == [True]
    assert stored.queue.buffered == 0
    queued = [k for k in stored.store.data if k.startswith("timerq\x00") and "!" not in k]
    assert len(queued) == 20
    meta = stored.store.data["timerq\x00" + META_KEY]
    assert meta == {"size": 20, "seq": 20, "processing": 0}


def test_a_store_with_no_timer_left_keeps_no_entry_of_them() -> None:
    stored = Stored(buffer=4)
    for i in range(10):
        stored.service.register_event_time_timer(i, f"k{i}", (0, i + 1))
    stored.flush()
    stored.service.advance_watermark(100)
    stored.flush()
    assert stored.store.data == {}


def test_a_queue_opened_on_a_flushed_store_continues_its_count_and_numbering() -> None:
    """Timers registered after a reopening order after the stored ones of their instant."""
    first = Stored(buffer=100)
    for key in ("a", "b"):
        first.service.register_event_time_timer(50, key, (0, 51))
    first.flush()
    second = Stored(store=first.store)
    assert second.service.event_timers == 2
    second.service.register_event_time_timer(50, "c", (0, 51))
    second.service.advance_watermark(50)
    assert [key for _, _, key, _ in second.fired] == ["a", "b", "c"]


def test_restoring_keys_onto_the_store_reads_only_those_keys() -> None:
    """A local restore: the store holds a checkpoint's 100 keys' timers; applying two
    keys' newer timers reads those two keys' entries and no other, and the queue then
    fires the stored timers and the applied ones in order."""
    store = CountingStore()
    first = Stored(store=store, buffer=1000)
    for i in range(100):
        first.service.register_event_time_timer(1000 + i, f"k{i}", (0, 1001 + i))
    first.flush()
    changed = {
        "k3": {"event": [[5, [0, 6], 500]], "processing": []},
        "k7": None,
    }
    second = Stored(store=store, buffer=1000)
    store.loaded.clear()
    second.service.restore_keys(999, list(changed.items()))
    assert sorted(store.loaded) == ["timers\x00k3", "timers\x00k7"]
    assert second.service.event_timers == 99
    second.service.advance_watermark(MAX_TIMESTAMP)
    fired = [(ts, key) for _, ts, key, _ in second.fired]
    expected = [(5, "k3")] + [(1000 + i, f"k{i}") for i in range(100) if i not in (3, 7)]
    assert fired == expected


def test_a_restored_key_s_timers_fire_once() -> None:
    """A tail key whose timers the store already holds (the checkpoint's own records):
    re-applied, each fires once."""
    first = Stored(buffer=1000)
    first.service.register_event_time_timer(10, "a", (0, 11))
    first.service.register_event_time_timer(20, "a", (10, 21))
    first.flush()
    timers = first.service.snapshot_keys({"a"})["a"]
    second = Stored(store=first.store, buffer=1000, head=1)
    second.service.restore_keys(0, [("a", timers)])
    second.service.advance_watermark(MAX_TIMESTAMP)
    assert [ts for _, ts, _, _ in second.fired] == [10, 20]


def operations(seed: int, steps: int) -> Iterator[tuple[str, Any]]:
    """Registrations (many sharing an instant), deletes, moves, watermarks and
    checkpoints, from ``random.Random(seed)``."""
    rng = random.Random(seed)
    watermark = 0
    for _ in range(steps):
        roll = rng.random()
        key = rng.choice("abcdefgh")
        ts = watermark + rng.choice([1, 2, 2, 5, 5, 5, rng.randrange(1, 40)])
        window = (ts - rng.randrange(3), ts + 1)
        if roll < 0.45:
            yield "register", (ts, key, window)
        elif roll < 0.6:
            yield "delete", (ts, key, window)
        elif roll < 0.7:
            yield "move", (ts, ts + rng.randrange(-1, 4), key, window)
        elif roll < 0.85:
            watermark += rng.randrange(0, 6)
            yield "watermark", watermark
        elif roll < 0.95:
            yield "checkpoint", None
        else:
            yield "hook", (ts, key, window)


def apply(service: Any, op: str, arg: Any, hooks: dict[tuple[int, str], Any]) -> None:
    if op == "register":
        service.register_event_time_timer(*arg)
    elif op == "delete":
        service.delete_event_time_timer(*arg)
    elif op == "move":
        old, new, key, window = arg
        service.move_event_time_timer(old, new, key, window)
    elif op == "watermark":
        service.advance_watermark(arg)
    elif op == "hook":  # when this timer fires, it registers one more at its own instant
        ts, key, window = arg
        hooks[(ts, key)] = lambda s: s.register_event_time_timer(ts, key + "!", window)
        service.register_event_time_timer(ts, key, window)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("buffer", "head"), [(2, 1), (5, 3), (1000, 1024)])
def test_random_operations_fire_snapshot_and_count_as_the_heap(
    seed: int, buffer: int, head: int
) -> None:
    """Random registrations, deletes, moves, callbacks registering timers and
    checkpoints (the stored service's flush, the heap's nothing): the same firings in
    the same order, the same full snapshots (up to the numbering of ties: ``ranked``),
    counts and queued timers throughout."""
    stored, heap = Stored(buffer=buffer, head=head), Heap()
    for op, arg in operations(seed, 400):
        if op == "checkpoint":
            stored.flush()
            continue
        apply(stored.service, op, arg, stored.hooks)
        apply(heap.service, op, arg, heap.hooks)
        assert stored.service.event_timers == heap.service.event_timers
    assert ranked(stored.service.snapshot()) == ranked(heap.service.snapshot())
    assert stored.service.counts() == heap.service.counts()
    assert stored.service.next_event_time() == heap.service.next_event_time()
    for each in (stored, heap):
        each.service.advance_watermark(MAX_TIMESTAMP)
    assert stored.fired == heap.fired
    assert stored.service.counts() == heap.service.counts()


@pytest.mark.parametrize("seed", range(8))
def test_a_restore_from_a_snapshot_or_the_changes_continues_as_the_heap(seed: int) -> None:
    """A stored service restored from the heap's full snapshot, and another from its
    own per-key changes onto an empty store, go on as the heap does: ties in the same
    order, new registrations after the restored ones of their instant."""
    heap, source = Heap(), Stored(buffer=4, head=2)
    steps = list(operations(seed, 300))
    cut = len(steps) // 2
    for op, arg in steps[:cut]:
        if op != "checkpoint":
            apply(heap.service, op, arg, heap.hooks)
            apply(source.service, op, arg, source.hooks)
    from_snapshot = Stored(buffer=4, head=2)
    from_snapshot.service.restore(heap.service.snapshot())
    keys = {key for _, key, _, _ in source.service.snapshot()["event"]}
    changes = source.service.snapshot_keys(keys)
    from_changes = Stored(buffer=4, head=2)
    from_changes.service.restore_keys(heap.service.current_watermark, list(changes.items()))
    restored = (from_snapshot, from_changes)
    for each in restored:
        each.hooks.update(heap.hooks)
        assert ranked(each.service.snapshot()) == ranked(heap.service.snapshot())
    for op, arg in steps[cut:]:
        if op == "checkpoint":
            for each in restored:
                each.flush()
            continue
        for service, hooks in (
            (heap.service, heap.hooks),
            (from_snapshot.service, from_snapshot.hooks),
            (from_changes.service, from_changes.hooks),
        ):
            apply(service, op, arg, hooks)
    for each in (heap, *restored):
        each.service.advance_watermark(MAX_TIMESTAMP)
    tail = len(heap.fired) - len(from_snapshot.fired)
    assert from_snapshot.fired == heap.fired[tail:]
    assert from_changes.fired == heap.fired[tail:]


def test_processing_time_timers_stay_on_the_heap_and_in_the_key_s_entry() -> None:
    stored = Stored(buffer=2)
    stored.service.register_processing_time_timer(30, "a", (0, 31))
    stored.service.register_processing_time_timer(20, "b", (0, 21))
    stored.service.register_event_time_timer(25, "a", (0, 26))
    assert stored.service.processing_timers == 2
    assert stored.service.snapshot_keys({"a"})["a"] == {
        "event": [[25, [0, 26], 0]],
        "processing": [[30, [0, 31], -1]],
    }
    stored.flush()
    reopened = Stored(store=stored.store)
    reopened.service.restore_keys(0, [])
    assert reopened.service.processing_timers == 2  # read back from every key's entry
    reopened.service.advance_processing_time(40)
    assert [(ts, key) for _, ts, key, _ in reopened.fired] == [(20, "b"), (30, "a")]
