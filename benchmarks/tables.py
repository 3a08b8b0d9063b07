"""The running aggregate over a table source (#50), in process: versions of 10k orders
(200k records, count and sum per group), grouped by the order (its primary key) and by
its customer (1k groups), beside the stream's running aggregate over the same values
keyed by customer. Each version replaces one (the table aggregate takes the old row back
first), so this is the retraction path's cost per row, not the stream's.

    python -m benchmarks.tables [--records N] [--repeat R]

Prints records/s per operator (best of ``--repeat``), the batch loop only: no ticks, no
emission, no checkpoint.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from service.core.time import ManualClock
from service.operators.table import TableAggregateOperator, build_running_aggregate
from service.operators.table.running import RunningAggregateConfig

AGGREGATIONS = {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}}
BATCH = 500


def versions(count: int) -> list[Any]:
    rng = random.Random(50)
    return [
        (
            f"o{rng.randrange(10_000)}",
            i,
            {"customer": f"c{rng.randrange(1_000)}", "amount": rng.randrange(100)},
            i,
            None,
        )
        for i in range(count)
    ]


def rate(make: Callable[[], Any], records: Sequence[Any], repeat: int) -> float:
    best = 0.0
    for _ in range(repeat):
        op = make()
        gc.collect()
        start = time.perf_counter()
        for i in range(0, len(records), BATCH):
            op.process_batch(records[i : i + BATCH])
        best = max(best, len(records) / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    table = versions(args.records)
    stream = [(v["customer"], ts, v, at, s) for _, ts, v, at, s in table]
    spec = {"type": "aggregate", "aggregations": AGGREGATIONS}

    def config() -> RunningAggregateConfig:
        return RunningAggregateConfig("bench", AGGREGATIONS, clock=ManualClock(0))

    cases: list[tuple[str, Callable[[], Any], Sequence[Any]]] = [
        (
            "stream, by customer",
            lambda: build_running_aggregate("bench", spec, ManualClock(0)),
            stream,
        ),
        ("table, by primary key", lambda: TableAggregateOperator(config()), table),
        (
            "table, by customer",
            lambda: TableAggregateOperator(config(), group_field="customer"),
            table,
        ),
    ]
    for name, make, records in cases:
        print(f"{name:24} {rate(make, records, args.repeat) / 1e6:.2f}M records/s")


if __name__ == "__main__":
    main()
