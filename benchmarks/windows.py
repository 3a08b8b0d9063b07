"""Window operator throughput, in process: decoded dicts in, window results out.

1M records over 10k keys, timestamps ~1 ms apart with up to 2 s of out-of-orderness
(seeded), watermark = max_ts - 2000 - 1 advanced every 1000 records (bounded
out-of-orderness, so no record is late), then the final watermark. Each scenario checks
its totals against the input, so a fast wrong answer cannot pass.

Incremental checkpoints (``--checkpoints``): the same input through operators built with
``track_keys`` (as the runtime builds them), with ``snapshot_changes()`` taken every
``CHECKPOINT_EVERY`` records (with 10k keys nearly every key is dirty at each); prints the
CPU time per checkpoint and the record rate including the checkpoints.

The garbage collector runs as in the service (see :func:`gc_like_the_service`;
``--default-gc`` for Python's defaults).

``--state-backend rocksdb`` (issue 53): the operators keep their keys in a
:class:`~service.core.state_cache.StateCache` of ``--cache-bytes`` (default 64 MiB, the
spec's default) in front of a RocksDB in a temporary directory, as the runtime builds
them; with ``--checkpoints`` each checkpoint also flushes the caches (timed with it).

Run: ``python -m benchmarks.windows [--records N] [--profile NAME] [--checkpoints]
[--default-gc] [--state-backend memory|rocksdb] [--cache-bytes N]``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.inprocess import BOUND_MS, gc_like_the_service, make_records
from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.base import InputRecord, WindowResult
from service.operators.window import WindowOperator, build_window_operator

BATCH = 1000
CHECKPOINT_EVERY = 100_000
AGGREGATIONS = {"orders": {"fn": "count"}, "revenue": {"fn": "sum", "field": "amount"}}

SCENARIOS: dict[str, tuple[dict[str, Any], int]] = {
    # name: (assigner, windows per record)
    "tumbling 60s": ({"type": "tumbling", "size_ms": 60_000}, 1),
    "sliding 60s/10s": ({"type": "sliding", "size_ms": 60_000, "slide_ms": 10_000}, 6),
    "session gap 30s": ({"type": "session", "gap_ms": 30_000}, 1),
}


_directories: list[tempfile.TemporaryDirectory[str]] = []


@dataclass(frozen=True, slots=True)
class Backend:
    """Where the operators keep their keys: ``memory``, or ``rocksdb`` behind a cache."""

    name: str = "memory"
    cache_bytes: int = 64 * 1024 * 1024


def build(spec: dict[str, Any], backend: Backend, track_keys: bool) -> WindowOperator:
    """The operator as the runtime builds it on ``backend`` (a fresh store per call)."""
    if backend.name == "memory":
        return build_window_operator(
            "bench", spec, ManualClock(), late_output=False, track_keys=track_keys
        )
    from service.runtime.consumer_group.local_state import LocalPartition, process_memory
    from service.runtime.partition.rocksdb_store import open_store

    directory = tempfile.TemporaryDirectory(prefix="bench-windows-")
    _directories.append(directory)  # removed at exit
    store, checkpoint = open_store(Path(directory.name) / "store", process_memory())
    local = LocalPartition(store, checkpoint, backend.cache_bytes)
    return build_window_operator(
        "bench",
        spec,
        ManualClock(),
        late_output=False,
        track_keys=track_keys,
        state_maps=local.state_map,
    )


@dataclass(slots=True)
class Outcome:
    cpu: float
    wall: float
    emitted: int
    orders: int
    revenue: float


def batches_and_marks(records: list[InputRecord]) -> tuple[list[list[InputRecord]], list[int]]:
    """The input in batches of ``BATCH``, each with the watermark after it."""
    batches = [records[i : i + BATCH] for i in range(0, len(records), BATCH)]
    marks: list[int] = []
    max_ts = -(2**63)
    for batch in batches:
        max_ts = max(max_ts, max(r[1] for r in batch))
        marks.append(max_ts - BOUND_MS - 1)
    return batches, marks


def run(
    assigner: dict[str, Any], records: list[InputRecord], backend: Backend = Backend()
) -> Outcome:
    """CPU and wall seconds, results emitted, summed counts and revenue of the final results.

    CPU time of this process (``time.process_time``), not wall time: on a shared machine
    the wall clock also measures the other processes; single-threaded, the two are equal
    on an idle core (the wall time is printed too).
    """
    spec = {"type": "window", "assigner": assigner, "aggregations": AGGREGATIONS}
    op = build(spec, backend, track_keys=False)
    # Batches and their watermarks are made before the clock starts (the watermark
    # generator is the runtime's work, not the operator's), results are read after.
    batches, marks = batches_and_marks(records)
    drained: list[list[Any]] = []
    start = time.process_time()
    wall = time.perf_counter()
    for batch, mark in zip(batches, marks, strict=True):
        op.process_batch(batch)
        op.advance_watermark(mark)
        drained.append(op.collector.drain()[0])
    op.advance_watermark(MAX_TIMESTAMP)
    drained.append(op.collector.drain()[0])
    elapsed = time.process_time() - start
    wall = time.perf_counter() - wall
    latest: dict[str, WindowResult] = {}
    emitted = 0
    for out in drained:
        emitted += len(out)
        for result in out:
            if isinstance(result, WindowResult):
                latest[result.id] = result
    if op.collector.dropped_late:
        raise RuntimeError(f"{op.collector.dropped_late} records were late")
    orders = sum(r.result["orders"] for r in latest.values())
    revenue = sum(r.result["revenue"] for r in latest.values())
    return Outcome(elapsed, wall, emitted, orders, revenue)


@dataclass(slots=True)
class CheckpointOutcome:
    cpu: float
    """All CPU seconds: records, watermarks and checkpoints."""
    snapshot_cpu: list[float]
    """CPU seconds of each ``snapshot_changes()``."""
    entries: list[int]
    """Entries written by each (dirty keys plus the meta entry)."""


def run_checkpoints(
    assigner: dict[str, Any], records: list[InputRecord], backend: Backend = Backend()
) -> CheckpointOutcome:
    """Like :func:`run`, with ``track_keys`` and a checkpoint every ``CHECKPOINT_EVERY``
    (with rocksdb, the caches flushed in it)."""
    spec = {"type": "window", "assigner": assigner, "aggregations": AGGREGATIONS}
    op = build(spec, backend, track_keys=True)
    snapshots: list[float] = []
    entries: list[int] = []
    batches, marks = batches_and_marks(records)
    clock = time.process_time
    start = clock()
    for i, (batch, mark) in enumerate(zip(batches, marks, strict=True)):
        op.process_batch(batch)
        op.advance_watermark(mark)
        op.collector.drain()
        if (i + 1) * BATCH % CHECKPOINT_EVERY == 0:
            before = clock()
            changes = op.snapshot_changes()
            for cache in op.state_maps():
                cache.flush()
            snapshots.append(clock() - before)
            entries.append(len(changes))
    op.advance_watermark(MAX_TIMESTAMP)
    op.collector.drain()
    return CheckpointOutcome(clock() - start, snapshots, entries)


def main_checkpoints(records: list[InputRecord], backend: Backend) -> None:
    for name, (assigner, _) in SCENARIOS.items():
        if not name.startswith("tumbling"):
            continue  # the others are dominated by per-window work, not checkpoints
        outcome = run_checkpoints(assigner, records, backend)
        per = sorted(outcome.snapshot_cpu)
        median = per[len(per) // 2] if per else 0.0
        dirty = sorted(outcome.entries)[len(per) // 2] - 1 if per else 0
        print(
            f"{name:16s} {len(records) / outcome.cpu:>10,.0f} records/s with track_keys  "
            f"snapshot_changes: {median * 1000:7.1f} ms median, {min(per) * 1000:7.1f} ms best "
            f"per checkpoint ({dirty:,} dirty keys, {len(per)} checkpoints)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--profile", help="profile this scenario (a name prefix)")
    parser.add_argument(
        "--checkpoints", action="store_true", help="measure incremental checkpoints instead"
    )
    parser.add_argument(
        "--default-gc", action="store_true", help="Python's GC thresholds, input not frozen"
    )
    parser.add_argument("--state-backend", choices=["memory", "rocksdb"], default="memory")
    parser.add_argument(
        "--cache-bytes", type=int, default=64 * 1024 * 1024, help="rocksdb: the cache's bound"
    )
    args = parser.parse_args(argv)
    backend = Backend(args.state_backend, args.cache_bytes)
    records = make_records(args.records, amounts=True)
    if not args.default_gc:
        gc_like_the_service()
    if args.checkpoints:
        main_checkpoints(records, backend)
        return
    expected_revenue = sum(r[2]["amount"] for r in records)
    for name, (assigner, per_record) in SCENARIOS.items():
        if args.profile and not name.startswith(args.profile):
            continue
        if args.profile:
            profiler = cProfile.Profile(time.process_time)
            outcome = profiler.runcall(run, assigner, records, backend)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        else:
            outcome = run(assigner, records, backend)
        orders, revenue = outcome.orders, outcome.revenue
        if orders != per_record * len(records):
            raise RuntimeError(f"{name}: counted {orders} records, expected {per_record}x")
        if abs(revenue - per_record * expected_revenue) > 1e-6 * per_record * expected_revenue:
            raise RuntimeError(f"{name}: revenue {revenue} != {per_record * expected_revenue}")
        print(
            f"{name:16s} {len(records) / outcome.cpu:>10,.0f} records/s  "
            f"cpu {outcome.cpu:6.2f} s  wall {outcome.wall:6.2f} s  {outcome.emitted:>9,} results"
        )


if __name__ == "__main__":
    main()
