"""Running aggregate throughput, in process, beside the tumbling window on the same input
(#50): W1's count and sum per user with no window, emitted every second of processing
time, and the windowed W1 (tumbling 60 s).

The input is :func:`benchmarks.inprocess.make_records`' (1M records over 10k keys by
default, ~1 ms apart in event time). Processing time is a manual clock that moves
``--ms-per-batch`` per batch of ``BATCH`` records (default 10 ms: 100k records/s of
input, so 10 s and 10 ticks for 1M records),
and the running aggregate's tick fires whenever it is due, as the runtime's one
scheduler per partition would. Prints the records per CPU second of each, and the
running aggregate's upserts: at most one per key changed per interval, so their number
is bounded by the keys changed per interval, not by the input rate. The two run
interleaved ``--rounds`` times and the best of each is printed (the machine is shared).
Each run checks its totals against the input, so a fast wrong answer cannot pass.

Run: ``python -m benchmarks.running [--records N] [--ms-per-batch M] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.inprocess import gc_like_the_service, make_records
from benchmarks.windows import AGGREGATIONS, batches_and_marks
from benchmarks.windows import run as run_window
from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.base import InputRecord, Upsert
from service.operators.table import build_running_aggregate

EMIT_INTERVAL_MS = 1000


def run_running(
    records: list[InputRecord], ms_per_batch: int
) -> tuple[float, int, int, dict[str, Any]]:
    """CPU seconds, upserts, ticks, and each key's final result."""
    clock = ManualClock(0)
    spec = {"type": "aggregate", "aggregations": AGGREGATIONS, "emit_interval_ms": EMIT_INTERVAL_MS}
    op = build_running_aggregate("bench", spec, clock)
    batches, marks = batches_and_marks(records)
    drained: list[list[Any]] = []
    ticks = 0
    start = time.process_time()
    for batch, mark in zip(batches, marks, strict=True):
        op.process_batch(batch)
        op.advance_watermark(mark)
        now = clock.advance(ms_per_batch)
        due = op.next_processing_time()
        if due is not None and due <= now:
            op.advance_processing_time(now)
            ticks += 1
        drained.append(op.collector.drain()[0])
    op.advance_watermark(MAX_TIMESTAMP)
    drained.append(op.collector.drain()[0])
    elapsed = time.process_time() - start
    latest: dict[str, Any] = {}
    emitted = 0
    for out in drained:
        emitted += len(out)
        for result in out:
            if isinstance(result, Upsert):
                latest[result.key] = result.result
    return elapsed, emitted, ticks, latest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--ms-per-batch", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    records = make_records(args.records, amounts=True)
    gc_like_the_service()
    orders = len(records)
    revenue = sum(r[2]["amount"] for r in records)
    window_cpu = cpu = float("inf")
    for _ in range(args.rounds):
        window = run_window({"type": "tumbling", "size_ms": 60_000}, records)
        if window.orders != orders:
            raise RuntimeError(f"tumbling: counted {window.orders}, expected {orders}")
        window_cpu = min(window_cpu, window.cpu)
        took, upserts, ticks, latest = run_running(records, args.ms_per_batch)
        got_orders = sum(r["orders"] for r in latest.values())
        got_revenue = sum(r["revenue"] for r in latest.values())
        if got_orders != orders or abs(got_revenue - revenue) > 1e-6 * revenue:
            raise RuntimeError(f"running: {got_orders} orders, {got_revenue} revenue")
        cpu = min(cpu, took)
    window_rate = len(records) / window_cpu
    running_rate = len(records) / cpu
    print(f"tumbling 60s      {window_rate:>10,.0f} records/s  {window.emitted:>9,} results")
    print(
        f"running, 1 s      {running_rate:>10,.0f} records/s  {upserts:>9,} upserts over "
        f"{ticks} ticks ({upserts / max(1, ticks + 1):,.0f} per interval, "
        f"{len(latest):,} keys; {running_rate / window_rate:.2f}x the window's rate)"
    )


if __name__ == "__main__":
    main()
