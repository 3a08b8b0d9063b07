"""Checkpoints: full and incremental snapshots restore to an operator that continues
exactly as an uninterrupted one would (same outputs, ids, failures and state)."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from service.core.state_cache import StateMaps
from service.core.time import ManualClock, TimeDomain
from service.functions import Context, KeyedProcessFunction, Out
from service.operators.base import InputRecord
from service.operators.process import KeyedProcessOperator
from service.runtime.consumer_group.local_state import LocalPartition
from tests.operators.process.harness import make
from tests.operators.rocksdb_maps import BACKENDS, flush, local_partition, restarted

Step = tuple[str, int, list[InputRecord]]


class Workload(KeyedProcessFunction):
    """Uses every kind of state (some with TTL) and both timer domains."""

    def open(self, ctx: Context) -> None:
        self.count = ctx.value_state("count")
        self.hist = ctx.list_state("hist", ttl_ms=500)
        self.m = ctx.map_state("m")
        self.last = ctx.value_state("last", ttl_ms=300)

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        ts: int = ctx.timestamp  # type: ignore[assignment]
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.hist.add(value)
        self.m.put(str(value % 3), n)
        ctx.timer_service.register_event_time_timer(ts + 50)
        if value % 4 == 0:
            ctx.timer_service.register_processing_time_timer(ctx.current_processing_time + 100)
        if value % 7 == 0:
            ctx.timer_service.delete_event_time_timer(ts + 50)
        if value % 13 == 0:
            raise ValueError("thirteen")
        out.collect({"n": n, "hist": self.hist.get(), "last": self.last.value()})
        self.last.update(value)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        n = self.count.value() or 0
        out.collect({"timer": timestamp, "domain": str(ctx.time_domain), "n": n})
        if ctx.time_domain is TimeDomain.EVENT_TIME and n % 2 and timestamp < 5_000:
            ctx.timer_service.register_event_time_timer(timestamp + 30)
        if ctx.time_domain is TimeDomain.PROCESSING_TIME:
            self.m.clear()
            out.collect({"m": self.m.items()})


def workload(seed: int = 7, steps: int = 120) -> list[Step]:
    rnd = random.Random(seed)
    plan: list[Step] = []
    now, ts, offset = 0, 1_000, 0
    for _ in range(steps):
        now += rnd.randint(0, 60)
        kind = rnd.choice(["batch", "batch", "batch", "wm", "pt"])
        if kind == "batch":
            batch: list[InputRecord] = []
            for _ in range(rnd.randint(1, 6)):
                ts += rnd.randint(-20, 40)
                key = f"k{rnd.randint(0, 9)}"
                batch.append((key, ts, rnd.randint(0, 100), offset, ("src", offset)))
                offset += 1
            plan.append(("batch", now, batch))
        elif kind == "wm":
            plan.append(("wm", now, [(str(ts - rnd.randint(0, 100)), 0, None, 0, None)]))
        else:
            plan.append(("pt", now, []))
    return plan


def apply(op: KeyedProcessOperator, clock: ManualClock, step: Step) -> None:
    kind, now, payload = step
    clock.set(max(now, clock.now_ms()))
    if kind == "batch":
        op.process_batch(payload)
    elif kind == "wm":
        op.advance_watermark(int(payload[0][0]))
    else:
        op.advance_processing_time(now)


def drain(op: KeyedProcessOperator) -> list[Any]:
    results, _, failed = op.collector.drain()
    return [("out", r) for r in results] + [("failed", f.key, f.source, f.detail) for f in failed]


def through_json(data: Any) -> Any:
    return orjson.loads(orjson.dumps(data))


def comparable(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A snapshot with timer sequence numbers dropped: only their order matters (entries
    are listed in firing order), and a restore renumbers them."""
    timers = snapshot["timers"]
    return {
        **snapshot,
        "timers": {
            "watermark": timers["watermark"],
            "event": [t[:3] for t in timers["event"]],
            "processing": [t[:3] for t in timers["processing"]],
        },
    }


def run_uninterrupted(plan: list[Step]) -> tuple[list[Any], dict[str, Any]]:
    clock = ManualClock(0)
    op = make(Workload(), clock)
    emitted: list[Any] = []
    for step in plan:
        apply(op, clock, step)
        emitted += drain(op)
    op.advance_watermark(10**9)
    emitted += drain(op)
    return emitted, comparable(op.snapshot())


def maps_of(partition: LocalPartition | None) -> StateMaps | None:
    return None if partition is None else partition.state_map


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cut", [0, 1, 17, 60, 119])
def test_full_snapshot_restore_then_continue_equals_uninterrupted_run(
    cut: int, backend: str
) -> None:
    plan = workload()
    expected, expected_state = run_uninterrupted(plan)

    clock = ManualClock(0)
    first = make(Workload(), clock, maps=maps_of(local_partition(backend)))
    emitted: list[Any] = []
    for step in plan[:cut]:
        apply(first, clock, step)
        emitted += drain(first)
    saved = through_json(first.snapshot())

    second = make(Workload(), ManualClock(clock.now_ms()), maps=maps_of(local_partition(backend)))
    second.restore(saved)
    clock2 = second._clock
    assert isinstance(clock2, ManualClock)
    for step in plan[cut:]:
        apply(second, clock2, step)
        emitted += drain(second)
    second.advance_watermark(10**9)
    emitted += drain(second)

    assert emitted == expected
    assert comparable(second.snapshot()) == expected_state


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cuts", [[30], [10, 50, 90], list(range(0, 120, 7))])
def test_incremental_snapshot_restore_then_continue_equals_uninterrupted_run(
    cuts: list[int], backend: str
) -> None:
    plan = workload()
    expected, expected_state = run_uninterrupted(plan)

    clock = ManualClock(0)
    op = make(Workload(), clock, maps=maps_of(local_partition(backend)))
    changelog: list[tuple[str, Any]] = []
    emitted: list[Any] = []
    for i, step in enumerate(plan):
        if i in cuts:
            # Checkpoint, then "crash" and come back from the changelog alone (with
            # rocksdb: into a new, empty store).
            changelog += through_json(list(op.snapshot_changes().items()))
            clock = ManualClock(clock.now_ms())
            op = make(Workload(), clock, maps=maps_of(local_partition(backend)))
            op.restore_changes(changelog)
        apply(op, clock, step)
        emitted += drain(op)
    op.advance_watermark(10**9)
    emitted += drain(op)

    assert emitted == expected
    assert comparable(op.snapshot()) == expected_state


@pytest.mark.parametrize("cuts", [[30], [10, 50, 90], list(range(0, 120, 7))])
def test_a_restart_on_the_same_store_replays_only_the_last_checkpoint_onward(
    cuts: list[int],
) -> None:
    """The rocksdb backend's local restore: the store as the last checkpoint's flush left
    it, and of the changelog only that checkpoint's entries (the runtime reads from the
    changelog's end before that checkpoint wrote them)."""
    plan = workload()
    expected, expected_state = run_uninterrupted(plan)

    clock = ManualClock(0)
    partition = local_partition("rocksdb")
    assert partition is not None
    op = make(Workload(), clock, maps=partition.state_map)
    emitted: list[Any] = []
    evictions = 0
    for i, step in enumerate(plan):
        if i in cuts:
            tail = through_json(list(op.snapshot_changes().items()))
            flush(partition)
            evictions += sum(cache.evictions for cache in partition.caches.values())
            partition = restarted(partition)
            clock = ManualClock(clock.now_ms())
            op = make(Workload(), clock, maps=partition.state_map)
            op.restore_changes(tail)
        apply(op, clock, step)
        emitted += drain(op)
    op.advance_watermark(10**9)
    emitted += drain(op)

    assert emitted == expected
    assert comparable(op.snapshot()) == expected_state
    assert evictions > 0  # the store, not the cache, held most of the state


def test_incremental_snapshot_writes_only_changed_keys_and_tombstones() -> None:
    clock = ManualClock(0)
    op = make(Workload(), clock)
    op.process_batch([("a", 1_000, 1, 0, None), ("b", 1_000, 2, 1, None)])
    assert set(op.snapshot_changes()) == {"a", "b", "\x00meta"}
    op.process_batch([("a", 1_001, 5, 2, None)])
    assert set(op.snapshot_changes()) == {"a", "\x00meta"}
    assert set(op.snapshot_changes()) == {"\x00meta"}

    class Forget(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            self.v = ctx.value_state("v")

        def process_element(self, value: Any, ctx: Context, out: Out) -> None:
            self.v.update(value)

    forgetful = make(Forget())
    forgetful.process_batch([("a", 0, 1, 0, None)])
    assert forgetful.snapshot_changes()["a"] == {
        "state": {"v": 1},
        "expiry": {},
        "timers": {"event": [], "processing": []},
    }
    forgetful.process_batch([("a", 0, None, 1, None)])
    assert forgetful.snapshot_changes()["a"] is None


def test_key_starting_with_nul_cannot_collide_with_meta_entry() -> None:
    op = make(Workload())
    op.process_batch([("\x00meta", 1_000, 1, 0, None)])
    changes = through_json(list(op.snapshot_changes().items()))
    restored = make(Workload())
    restored.restore_changes(changes)
    assert restored.snapshot() == op.snapshot()


def test_full_snapshot_is_plain_json_data() -> None:
    op = make(Workload())
    op.process_batch([("a", 1_000, 1, 0, None), ("b", 1_000, 4, 1, None)])
    snapshot = op.snapshot()
    assert through_json(snapshot) == snapshot


def test_restore_replaces_existing_state() -> None:
    empty = make(Workload()).snapshot()
    op = make(Workload())
    op.process_batch([("a", 1_000, 4, 0, None)])
    op.restore(through_json(empty))
    assert op.gauges().keys == 0
    assert (op.gauges().event_timers, op.gauges().processing_timers) == (0, 0)
