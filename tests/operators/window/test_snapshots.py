"""Snapshots: restore-then-continue equals an uninterrupted run; incremental changes add up."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from service.core.state_cache import StateMaps
from service.core.time import ManualClock
from service.operators.base import InputRecord
from service.operators.window import WindowOperator, WindowStateError
from service.runtime.consumer_group.local_state import LocalPartition

from .helpers import (
    BACKENDS,
    RESTORES,
    build,
    local_partition,
    restore,
    spec,
    store_directory,
    summary,
)

SPECS: dict[str, dict[str, Any]] = {
    "tumbling": spec({"type": "tumbling", "size_ms": 50}, allowed_lateness_ms=20),
    "sliding": spec({"type": "sliding", "size_ms": 50, "slide_ms": 20}),
    "session": spec({"type": "session", "gap_ms": 15}, allowed_lateness_ms=10),
    "count-purge": spec(
        {"type": "tumbling", "size_ms": 80}, trigger={"type": "count", "count": 3, "purge": True}
    ),
    "continuous": spec(
        {"type": "sliding", "size_ms": 60, "slide_ms": 30},
        trigger={"type": "continuous", "interval_ms": 7},
    ),
    "evictor": spec(
        {"type": "session", "gap_ms": 20}, evictor={"type": "count", "max_count": 2, "after": True}
    ),
    "processing": spec({"type": "tumbling", "size_ms": 40}, time="processing"),
    "distinct": spec(
        {"type": "tumbling", "size_ms": 50},
        aggregations={
            "d": {"fn": "count_distinct", "field": "amount"},
            "c": {"fn": "collect", "field": "amount"},
            "f": {"fn": "first", "field": "amount"},
            "a": {"fn": "avg", "field": "amount"},
        },
    ),
}

Step = tuple[str, Any]


def workload(seed: int, steps: int = 60) -> list[Step]:
    """Batches of records (some late), watermarks and processing-time moves."""
    rng = random.Random(seed)
    out: list[Step] = []
    now = 0
    for i in range(steps):
        batch: list[InputRecord] = []
        for j in range(rng.randrange(1, 6)):
            ts = max(0, now + rng.randrange(-40, 30))
            batch.append((rng.choice("abc"), ts, {"amount": rng.randrange(5)}, i * 10 + j, None))
        out.append(("records", batch))
        now += rng.randrange(0, 12)
        out.append(("watermark", now - 10))
        out.append(("processing", now))
    out.append(("watermark", 10**9))
    out.append(("processing", 10**9))
    return out


def make(
    name: str,
    clock: ManualClock,
    track_keys: bool = False,
    backend: str = "memory",
    maps: StateMaps | None = None,
) -> WindowOperator:
    return build(
        SPECS[name],
        clock=clock,
        late_output=True,
        track_keys=track_keys,
        backend=backend,
        maps=maps,
    )


def apply(op: WindowOperator, clock: ManualClock, step: Step) -> list[Any]:
    kind, arg = step
    if kind == "records":
        op.process_batch(arg)
    elif kind == "watermark":
        op.advance_watermark(arg)
    else:
        clock.set(max(arg, clock.now_ms()))
        op.advance_processing_time(arg)
    late = [(r.key, r.timestamp, r.watermark) for r in op.collector.late]
    return [*summary(op), *late]


def uninterrupted(name: str, steps: list[Step]) -> tuple[list[Any], WindowOperator]:
    clock = ManualClock()
    op = make(name, clock)
    out = [apply(op, clock, step) for step in steps]
    return out, op


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("cut", [5, 37, 90])
def test_restore_then_continue_equals_an_uninterrupted_run(
    name: str, cut: int, backend: str
) -> None:
    steps = workload(seed=cut)
    expected, original = uninterrupted(name, steps)
    clock = ManualClock()
    first = make(name, clock, backend=backend)
    out = [apply(first, clock, step) for step in steps[:cut]]
    snapshot = orjson.loads(orjson.dumps(first.snapshot()))
    second = make(name, clock, backend=backend)
    second.restore(snapshot)
    out += [apply(second, clock, step) for step in steps[cut:]]
    assert out == expected
    assert second.stats() == original.stats()
    assert any(out), "the workload produced nothing to compare"


@pytest.mark.parametrize("backend", RESTORES)
@pytest.mark.parametrize("name", sorted(SPECS))
def test_incremental_changes_applied_in_order_equal_the_full_state(name: str, backend: str) -> None:
    steps = workload(seed=11)
    clock = ManualClock()
    op = make(name, clock, track_keys=True, backend=backend)
    changes: list[tuple[str, Any]] = []
    for i, step in enumerate(steps):
        apply(op, clock, step)
        if i % 7 == 3 or i == 40:
            changes.extend(orjson.loads(orjson.dumps(op.snapshot_changes())).items())
            rebuilt = make(name, ManualClock(clock.now_ms()), track_keys=True, backend=backend)
            restore(rebuilt, changes, backend)
            assert rebuilt.snapshot() == op.snapshot()
            assert rebuilt.gauges() == op.gauges()


@pytest.mark.parametrize("backend", RESTORES)
@pytest.mark.parametrize("name", ["tumbling", "session", "processing", "continuous"])
def test_restore_from_changes_then_continue_equals_an_uninterrupted_run(
    name: str, backend: str
) -> None:
    steps = workload(seed=3)
    expected, _ = uninterrupted(name, steps)
    clock = ManualClock()
    first = make(name, clock, track_keys=True, backend=backend)
    changes: list[tuple[str, Any]] = []
    out: list[Any] = []
    for step in steps[:50]:
        out.append(apply(first, clock, step))
        changes.extend(first.snapshot_changes().items())
    second = make(name, clock, track_keys=True, backend=backend)
    restore(second, orjson.loads(orjson.dumps(changes)), backend)
    out += [apply(second, clock, step) for step in steps[50:]]
    assert out == expected


def flush(local: LocalPartition) -> None:
    for cache in local.caches.values():
        cache.flush()


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("cut", [25, 90])
def test_a_restore_onto_the_local_store_then_continue_equals_an_uninterrupted_run(
    name: str, cut: int
) -> None:
    """The rocksdb backend restarted on the same disk: each checkpoint as the runtime
    makes it (the changes, the caches flushed, the local checkpoint file), the store
    closed after the checkpoint at ``cut`` and opened again, and only that checkpoint's
    entries (the changelog after the position the file names) applied onto it. The
    state is what the memory backend restores from the whole changelog, and the results
    from there on are those of an uninterrupted run."""
    steps = workload(seed=cut)
    expected, _ = uninterrupted(name, steps)
    clock = ManualClock()
    directory = store_directory()
    local = local_partition(directory)
    first = make(name, clock, track_keys=True, maps=local.state_map)
    out: list[Any] = []
    changelog: list[tuple[str, Any]] = []
    tail: list[tuple[str, Any]] = []
    for i, step in enumerate(steps[:cut]):
        out.append(apply(first, clock, step))
        if i % 5 == 4 or i == cut - 1:
            tail = list(orjson.loads(orjson.dumps(first.snapshot_changes())).items())
            changelog += tail
            flush(local)
            assert local.store.commit(i, local.counts())
    local.store.close()
    local = local_partition(directory)
    assert local.checkpoint is not None and local.checkpoint.position == cut - 1
    second = make(name, clock, track_keys=True, maps=local.state_map)
    second.restore_changes(tail)
    flush(local)
    whole = make(name, clock, track_keys=True)
    whole.restore_changes(changelog)
    ours, theirs = second.snapshot(), whole.snapshot()
    assert (ours["keys"], ours["timers"]) == (theirs["keys"], theirs["timers"])
    assert second.gauges() == whole.gauges()
    out += [apply(second, clock, step) for step in steps[cut:]]
    assert out == expected


def test_a_key_with_nothing_left_becomes_a_tombstone() -> None:
    op = make("tumbling", ManualClock(), track_keys=True)
    op.process_batch([("a", 1, {"amount": 1}, 0, None)])
    assert op.snapshot_changes()["ka"] is not None
    op.advance_watermark(1000)
    changes = op.snapshot_changes()
    assert changes["ka"] is None
    assert changes["\u0000meta"]["watermark"] == 1000


def test_snapshot_changes_without_key_tracking_is_an_error() -> None:
    op = make("tumbling", ManualClock())
    with pytest.raises(WindowStateError):
        op.snapshot_changes()


def test_snapshot_of_another_version_is_refused() -> None:
    op = make("tumbling", ManualClock())
    with pytest.raises(WindowStateError):
        op.restore({"version": 99})


@pytest.mark.parametrize("backend", BACKENDS)
def test_restored_windows_fire_in_the_order_they_were_opened(backend: str) -> None:
    """The fast operator rebuilds each window start's windows in creation (``opened``)
    order on restore: they fire in that order, even across keys checkpointed at
    different times."""
    clock = ManualClock()
    lateness = spec({"type": "tumbling", "size_ms": 50}, allowed_lateness_ms=50)
    first = build(lateness, clock=clock, track_keys=True, backend=backend)
    changes: list[tuple[str, Any]] = []
    for key, ts in (("c", 1), ("a", 2), ("b", 60), ("c", 70), ("a", 55)):
        first.process_batch([(key, ts, {"amount": 1}, ts, None)])
        changes.extend(orjson.loads(orjson.dumps(first.snapshot_changes())).items())
    second = build(lateness, clock=clock, track_keys=True, backend=backend)
    second.restore_changes(changes)
    for op in (first, second):
        op.advance_watermark(49)
        op.process_batch([("b", 40, {"amount": 1}, 99, None)])  # allowed-late: fires at once
        op.advance_watermark(99)
    expected = summary(first)
    assert summary(second) == expected
    assert [r[0] for r in expected] == ["c", "a", "b", "b", "c", "a"]
