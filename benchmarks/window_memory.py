"""A window's memory per key, and its timers' share of it (issue 53: do timers dominate?).

Run: ``python -m benchmarks.window_memory [--keys N] [--timers N]``.

**Timers.** ``--timers`` (default 1M) event-time timers in a
:class:`~service.core.timers.TimerService`, as a window operator registers them (a key
and a window ``(start, end)`` per timer, made beforehand and not counted: they are the
state's anyway), traced with ``tracemalloc``: the bytes per timer of the queue (its
buckets, entries, sequence numbers, heap and timestamps), in two layouts: every timer at
one instant (tumbling windows: every key's window ends together) and every timer at an
instant of its own (sessions).

**Windows.** ``--keys`` keys (default 200,000), one record each, count and sum, nothing
fired (the watermark never moves): what a window holds per key while it is open, traced
from before the records are made (so each key's string, which the state keeps, is
counted) to after the input is dropped. Tumbling 60 s through the fast operator (W1's)
and through the general one (any window with a trigger, an evictor or a function), and
a session (gap 30 s, the general operator), each on the memory backend and on the
rocksdb backend with a 1 MiB cache (what stays on the Python heap whatever the key
count: RocksDB's own memory, C++ and not traced, is bounded by its block cache). Per
key: the bytes in all, and the part allocated by the timer service
(``service/core/timers.py``: the timers' entries, their sequence numbers and the heap;
a session's own timestamp is allocated by the operator, so the timers' part of a
session is the standalone figure above). The fast operator has no timer per key: its
timers are per window start, and what it keeps per key for them is the start's key set
(with rocksdb, ``{key: None}``: the part allocated by its generated loop).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

from service.core.state_cache import StateMaps
from service.core.time import ManualClock
from service.core.timers import TimerService
from service.operators.window import GeneralWindowOperator, WindowOperator, build_window_operator

BASE = 1_700_000_000_000 - 1_700_000_000_000 % 60_000
AGGREGATIONS = {"orders": {"fn": "count"}, "revenue": {"fn": "sum", "field": "amount"}}
TUMBLING = {"type": "tumbling", "size_ms": 60_000}
SESSION = {"type": "session", "gap_ms": 30_000}
BATCH = 10_000
TIMERS_FILE = "service/core/timers.py"
LOOP_FILE = "<fast-window-batch>"
_directories: list[tempfile.TemporaryDirectory[str]] = []


def state_maps(backend: str) -> StateMaps | None:
    """None for memory; for rocksdb, a fresh store's maps behind a 1 MiB cache."""
    if backend == "memory":
        return None
    from service.runtime.consumer_group.local_state import LocalPartition, process_memory
    from service.runtime.partition.rocksdb_store import open_store

    directory = tempfile.TemporaryDirectory(prefix="bench-window-memory-")
    _directories.append(directory)  # removed at exit
    store, checkpoint = open_store(Path(directory.name) / "store", process_memory())
    return LocalPartition(store, checkpoint, 1024 * 1024).state_map


def operator(assigner: dict[str, Any], general: bool, backend: str) -> WindowOperator:
    spec = {"type": "window", "assigner": assigner, "aggregations": AGGREGATIONS}
    if general:
        config = build_window_operator("bench", spec, ManualClock(), False, track_keys=True).config
        return GeneralWindowOperator(replace(config, state_maps=state_maps(backend)))
    return build_window_operator(
        "bench", spec, ManualClock(), False, track_keys=True, state_maps=state_maps(backend)
    )


def timer_bytes(count: int, distinct: bool) -> float:
    """Bytes per queued event-time timer (keys and windows made beforehand)."""
    keys = [f"user-{i}" for i in range(count)]
    shared = (BASE, BASE + 60_000)
    windows = [(BASE + i, BASE + i + 30_000) if distinct else shared for i in range(count)]
    gc.collect()
    tracemalloc.start()
    service: TimerService[str, tuple[int, int]] = TimerService(_ignore, _ignore)
    before = tracemalloc.get_traced_memory()[0]
    for key, window in zip(keys, windows, strict=True):
        service.register_event_time_timer(window[1] - 1, key, window)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert service.event_timers == count
    return held / count


def _ignore(timestamp: int, key: str, window: tuple[int, int]) -> None:
    return None


def window_bytes(op: WindowOperator, keys: int, spread: int) -> tuple[float, float, float, int]:
    """Bytes per key in all, by the timer service, by the generated loop; timers queued.
    Key ``i``'s record is at ``BASE + i % spread`` (ms)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for first in range(0, keys, BATCH):
        batch = [
            (f"user-{i}", BASE + i % spread, {"amount": i % 100}, i, None)
            for i in range(first, min(keys, first + BATCH))
        ]
        op.process_batch(batch)
        op.collector.drain()
        del batch
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    by_file = after.compare_to(before, "filename")
    total = sum(s.size_diff for s in by_file)
    timers = sum(s.size_diff for s in by_file if s.traceback[0].filename.endswith(TIMERS_FILE))
    loop = sum(s.size_diff for s in by_file if s.traceback[0].filename == LOOP_FILE)
    return total / keys, timers / keys, loop / keys, op.gauges().event_timers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--timers", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    for distinct in (False, True):
        layout = "each at its own instant" if distinct else "all at one instant"
        per_timer = timer_bytes(args.timers, distinct)
        print(f"{args.timers:,} event-time timers, {layout}: {per_timer:.0f} B per timer")
    print(f"{args.keys:,} keys, one open window each (bytes per key):")
    scenarios = [
        ("tumbling 60 s", TUMBLING, False),
        ("tumbling 60 s", TUMBLING, True),
        ("session gap 30 s", SESSION, True),
    ]
    for name, assigner, general in scenarios:
        for backend in ("memory", "rocksdb"):
            op = operator(assigner, general, backend)
            spread = 60_000 if assigner is TUMBLING else args.keys  # in one window; apart
            total, timers, loop, queued = window_bytes(op, args.keys, spread)
            label = "general" if general else "fast"
            part = (
                f"timer service {timers:4.0f} B ({timers / total:4.0%}), {queued:,} timers"
                if general
                else f"generated loop {loop:4.0f} B ({loop / total:4.0%}), timers per start"
            )
            print(f"  {name:17s} {label:7s} {backend:7s} {total:5.0f} B/key  {part}")
            del op


if __name__ == "__main__":
    main()
