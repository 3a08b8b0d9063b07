"""Join operator throughput, in process, beside the window operator on the same records.

``--records N`` left rows (orders) over 10k keys, ~1 ms apart and up to 2 s out of order,
and as many right rows (payments): for 90% of the keys a payment follows its order
within the interval (0 to 60 s later), for the rest it belongs to a key with no order.
Both inputs are interleaved in arrival order; the join's watermark is the minimum of the
two inputs' bounded-out-of-orderness watermarks, advanced every 1000 rows, then the
final one. No row is late.

Scenarios: an inner interval join (0 s to 60 s), an inner tumbling 60 s window join, a
left temporal join of the orders with the payments as versions, and the W1 window
pipeline (a tumbling 60 s count) over the same 2N records. Each checks its output (the
interval join's pairs against a sort-merge count, ids unique, the state empty at the
end; the window count's total), so a fast wrong answer cannot pass.

Run: ``python -m benchmarks.joins [--records N]``.
"""

from __future__ import annotations

import argparse
import random
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks.inprocess import BOUND_MS, gc_like_the_service
from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.base import InputRecord
from service.operators.join.interval import IntervalJoinOperator
from service.operators.join.rows import How, Side
from service.operators.join.temporal import TemporalJoinOperator
from service.operators.join.window import WindowJoinOperator
from service.operators.window import build_window_operator
from service.operators.window.assigners import TumblingAssigner

KEYS = 10_000
UPPER_MS = 60_000
BATCH = 1000

Tagged = tuple[int, InputRecord]


def make_inputs(count: int, seed: int = 11) -> list[Tagged]:
    """Orders and payments, tagged with their side, in arrival order."""
    rng = random.Random(seed)
    base = 1_700_000_000_000
    arrivals: list[tuple[int, int, InputRecord]] = []
    for i in range(count):
        key = f"user-{rng.randrange(KEYS)}"
        ts = base + i - rng.randrange(BOUND_MS)
        arrivals.append((base + i, Side.LEFT, (key, ts, {"user": key, "ts": ts}, i, None)))
        if rng.random() < 0.9:
            paid = ts + rng.randrange(UPPER_MS)
        else:
            key = f"nobody-{rng.randrange(KEYS)}"
            paid = base + i
        due = paid + rng.randrange(BOUND_MS)  # arrives up to 2 s after its time
        arrivals.append((due, Side.RIGHT, (key, paid, {"user": key, "paid": paid}, i, None)))
    arrivals.sort(key=lambda a: a[0])
    return [(side, record) for _, side, record in arrivals]


def expected_pairs(inputs: list[Tagged]) -> int:
    lefts: dict[str, list[int]] = defaultdict(list)
    for side, (key, ts, *_) in inputs:
        if side == Side.LEFT:
            lefts[key].append(ts)
    for times in lefts.values():
        times.sort()
    pairs = 0
    for side, (key, ts, *_) in inputs:
        times = lefts.get(key)
        if side == Side.RIGHT and times:
            pairs += bisect_right(times, ts) - bisect_left(times, ts - UPPER_MS)
    return pairs


def run_join(operator: Any, inputs: list[Tagged]) -> tuple[float, int, set[str]]:
    """CPU seconds, rows emitted, their ids (gathered outside the timed loop)."""
    max_ts: list[int | None] = [None, None]
    out: list[Any] = []
    chunks = [inputs[at : at + BATCH] for at in range(0, len(inputs), BATCH)]
    started = time.process_time()
    for chunk in chunks:
        run: list[InputRecord] = []
        side_of_run = chunk[0][0]
        for side, record in chunk:
            if side != side_of_run:
                (operator.process_left if side_of_run == 0 else operator.process_right)(run)
                run, side_of_run = [], side
            run.append(record)
            top = max_ts[side]
            if top is None or record[1] > top:
                max_ts[side] = record[1]
        (operator.process_left if side_of_run == 0 else operator.process_right)(run)
        left, right = max_ts
        if left is not None and right is not None:
            operator.advance_watermark(min(left, right) - BOUND_MS - 1)
        out.extend(operator.collector.results)
        operator.collector.results.clear()
    operator.advance_watermark(MAX_TIMESTAMP)
    out.extend(operator.collector.results)
    cpu = time.process_time() - started
    return cpu, len(out), {row.id for row in out}


def run_window(inputs: list[Tagged]) -> tuple[float, int]:
    spec = {
        "type": "window",
        "assigner": {"type": "tumbling", "size_ms": 60_000},
        "aggregations": {"n": {"fn": "count"}},
    }
    operator = build_window_operator("bench", spec, ManualClock(), late_output=False)
    records = [record for _, record in inputs]
    max_ts = None
    counted = 0
    started = time.process_time()
    for at in range(0, len(records), BATCH):
        batch = records[at : at + BATCH]
        operator.process_batch(batch)
        top = max(r[1] for r in batch)
        max_ts = top if max_ts is None else max(max_ts, top)
        operator.advance_watermark(max_ts - BOUND_MS - 1)
        counted += sum(r.result["n"] for r in operator.collector.results)
        operator.collector.results.clear()
    operator.advance_watermark(MAX_TIMESTAMP)
    counted += sum(r.result["n"] for r in operator.collector.results)
    return time.process_time() - started, counted


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=500_000, help="rows per input")
    args = parser.parse_args(argv)
    inputs = make_inputs(args.records)
    total = len(inputs)
    gc_like_the_service()
    cpu, counted = run_window(inputs)
    assert counted == total, (counted, total)
    window_rate = total / cpu
    print(f"{'scenario':<34}{'rows/s':>12}{'vs window':>11}{'rows out':>11}")
    print(f"{'window W1 (tumbling 60 s count)':<34}{window_rate:>12,.0f}{1.0:>11.2f}{'':>11}")
    scenarios: list[tuple[str, Callable[[], Any], Callable[[Any, int, set[str]], None]]] = []

    def check_interval(op: Any, emitted: int, ids: set[str]) -> None:
        assert emitted == len(ids) == expected_pairs(inputs), (emitted, len(ids))
        assert op.rows_held(Side.LEFT) == op.rows_held(Side.RIGHT) == 0

    def check_window(op: Any, emitted: int, ids: set[str]) -> None:
        assert emitted == len(ids) and op.gauges().windows_open == 0

    def check_temporal(op: Any, emitted: int, ids: set[str]) -> None:
        assert emitted == len(ids) == args.records  # left: one row per order
        assert op.rows_held(Side.LEFT) == 0

    scenarios.append(
        (
            "interval inner 0..60 s",
            lambda: IntervalJoinOperator("b", How.INNER, 0, UPPER_MS),
            check_interval,
        )
    )
    scenarios.append(
        (
            "window inner tumbling 60 s",
            lambda: WindowJoinOperator("b", How.INNER, TumblingAssigner(60_000)),
            check_window,
        )
    )
    scenarios.append(("temporal left", lambda: TemporalJoinOperator("b", How.LEFT), check_temporal))
    for name, make, check in scenarios:
        operator = make()
        cpu, emitted, ids = run_join(operator, inputs)
        check(operator, emitted, ids)
        rate = total / cpu
        print(f"{name:<34}{rate:>12,.0f}{rate / window_rate:>11.2f}{emitted:>11,}")


if __name__ == "__main__":
    main()
