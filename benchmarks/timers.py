"""Timer-service benchmark: registrations, deletes and fires per second, bytes per timer.

Run: ``python -m benchmarks.timers [--repeat N] [--timers N]``.

Two workloads of 1M event-time timers each, with and without ``track_keys``:

- ``window-ends``: 20,000 keys x 50 distinct timestamps, registered timestamp by
  timestamp as a tumbling-window operator does (each key's window ends at the same
  instant); the namespace is the window ``(start, end)``, one shared tuple per window.
- ``distinct``: 1M timers with all-distinct timestamps in shuffled order (e.g. per-key
  processing-time timeouts), keys cycling over 20,000.

Each phase is timed separately on a fresh service: register all; fire all with one
``advance_watermark(MAX)`` (a no-op callback); register all again and delete all one by
one. Bytes per queued timer are measured apart (tracemalloc slows everything down): the
traced memory held by a service with all timers queued, divided by their number (the
keys and namespaces themselves are allocated beforehand and not counted). The garbage
collector stays enabled, as in the service. Rates are per CPU second of this process
(``time.process_time``), not wall time: the machine is shared, so each workload is run
``--repeat`` times and the best and median are printed.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

from service.core.time import MAX_TIMESTAMP
from service.core.timers import TimerService

Timer = tuple[int, str, tuple[int, int]]
KEYS = 20_000


@dataclass(slots=True)
class Workload:
    name: str
    timers: list[Timer]


def window_ends(total: int) -> Workload:
    keys = [f"user-{i}" for i in range(KEYS)]
    size = 60_000
    windows = [(start, start + size) for start in range(0, size * (total // KEYS), size)]
    timers = [(end - 1, key, (start, end)) for start, end in windows for key in keys]
    return Workload(f"window-ends ({KEYS} keys x {len(windows)} timestamps)", timers)


def distinct(total: int) -> Workload:
    keys = [f"user-{i}" for i in range(KEYS)]
    namespace = (0, 0)
    stamps = list(range(1_700_000_000_000, 1_700_000_000_000 + total))
    random.Random(7).shuffle(stamps)
    timers = [(ts, keys[i % KEYS], namespace) for i, ts in enumerate(stamps)]
    return Workload(f"distinct ({total} timestamps)", timers)


def _noop(timestamp: int, key: str, namespace: tuple[int, int]) -> None:
    return None


def _service(track: bool) -> TimerService[str, tuple[int, int]]:
    return TimerService(_noop, _noop, track_keys=track)


def _timed(action: Callable[[], object]) -> float:
    """CPU seconds of ``action``: the machine is shared, so wall time measures the
    neighbours as much as the timer service."""
    start = time.process_time()
    action()
    return time.process_time() - start


def run_once(work: Workload, track: bool) -> dict[str, float]:
    """Rates (per second) of one pass over ``work``."""
    timers = work.timers
    n = len(timers)

    service = _service(track)
    register = service.register_event_time_timer

    def register_all() -> None:
        for ts, key, ns in timers:
            register(ts, key, ns)

    reg = _timed(register_all)
    if service.event_timers != n:
        raise RuntimeError(f"expected {n} queued timers, found {service.event_timers}")
    fire = _timed(lambda: service.advance_watermark(MAX_TIMESTAMP))
    if service.event_timers != 0:
        raise RuntimeError("timers left after advancing to MAX")

    service = _service(track)
    register = service.register_event_time_timer
    register_all()
    delete = service.delete_event_time_timer

    def delete_all() -> None:
        for ts, key, ns in timers:
            delete(ts, key, ns)

    dele = _timed(delete_all)
    if service.event_timers != 0:
        raise RuntimeError("timers left after deleting all")
    return {"register": n / reg, "fire": n / fire, "delete": n / dele}


def bytes_per_timer(work: Workload, track: bool) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        service = _service(track)
        for ts, key, ns in work.timers:
            service.register_event_time_timer(ts, key, ns)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return held / len(work.timers)


def _fmt(rates: list[float]) -> str:
    return f"{max(rates):>12,.0f} {statistics.median(rates):>12,.0f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5, help="passes per workload")
    parser.add_argument("--timers", type=int, default=1_000_000, help="timers per workload")
    args = parser.parse_args(argv)

    header = f"{'workload':<42} {'track':<6} {'metric':<14} {'best':>12} {'median':>12}"
    print(header)
    print("-" * len(header))
    for work in (window_ends(args.timers), distinct(args.timers)):
        for track in (False, True):
            runs = [run_once(work, track) for _ in range(args.repeat)]
            for metric in ("register", "fire", "delete"):
                rates = [r[metric] for r in runs]
                print(f"{work.name:<42} {track!s:<6} {metric + '/s':<14} {_fmt(rates)}")
            size = bytes_per_timer(work, track)
            print(f"{work.name:<42} {track!s:<6} {'bytes/timer':<14} {size:>12,.0f}")


if __name__ == "__main__":
    main()
