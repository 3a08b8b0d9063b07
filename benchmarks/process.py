"""Keyed process operator throughput, in process: decoded dicts in, keyed outputs out.

1M records over 10k keys, timestamps ~1 ms apart with up to 2 s of out-of-orderness
(seeded), in batches of 1000, the watermark (max_ts - 2000 - 1) advanced after each
batch, then the final watermark. Scenarios:

- ``inactivity_timeout`` (built-in, event time, timeout 10 min, longer than any gap:
  every record deletes its key's timer and registers a new one; the final watermark
  fires one alert per key);
- ``user value+timer``: a user function that keeps a count in value state and re-registers
  an event-time timer per record (delete old + register new), emitting on every timer.

Each scenario checks its totals against the input, so a fast wrong answer cannot pass.
CPU time of this process is reported (``time.process_time``), with the wall time.

Incremental checkpoints (``--checkpoints``): ``snapshot_changes()`` every
``CHECKPOINT_EVERY`` records (with 10k keys nearly every key is dirty at each); prints
the CPU time per checkpoint.

The garbage collector runs as in the service (see :func:`gc_like_the_service`;
``--default-gc`` for Python's defaults).

``--partitions N`` runs one operator per partition with the keys spread by Kafka's
partitioner (see :func:`plan`), as the service does with an N-partition topic: each
operator then holds ~10k/N keys, a smaller working set. The default, one operator with
all 10k keys, is the harder case and the one the numbers in docs/performance.md use
unless they say otherwise.

Run: ``python -m benchmarks.process [--records N] [--scenario NAME] [--repeat N]
[--partitions N] [--profile NAME] [--checkpoints] [--default-gc]``. CPU time still
moves by +-20% between runs on a shared 2-core VM, so compare medians of several runs
(``--repeat``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.inprocess import BOUND_MS, KEYS, gc_like_the_service, make_records
from benchmarks.workload import kafka_partition
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, ManualClock
from service.functions import Context, KeyedProcessFunction, Out
from service.operators.base import InputRecord
from service.operators.process import KeyedProcessOperator, build_process_operator

BATCH = 1000
TIMEOUT_MS = 600_000
CHECKPOINT_EVERY = 100_000


class CountWithTimer(KeyedProcessFunction):
    """Value state + one event-time timer per key, moved on every record.

    Written as a user would (state handles made in ``open``, as Flink's descriptors are;
    the timer service reached through ``ctx`` per call, no bound methods cached).
    """

    def open(self, ctx: Context) -> None:
        self.count = ctx.value_state("count")
        self.deadline = ctx.value_state("deadline")

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        count = self.count.value()
        self.count.update(1 if count is None else count + 1)
        old = self.deadline.value()
        deadline: int = ctx.timestamp + TIMEOUT_MS  # type: ignore[operator]
        if old != deadline:
            timers = ctx.timer_service
            if old is not None:
                timers.delete_event_time_timer(old)
            timers.register_event_time_timer(deadline)
            self.deadline.update(deadline)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        out.collect(self.count.value())
        self.count.clear()
        self.deadline.clear()


def build_inactivity() -> KeyedProcessOperator:
    return build_process_operator(
        "bench", "inactivity_timeout", {"timeout_ms": TIMEOUT_MS}, ManualClock(), []
    )


def build_user() -> KeyedProcessOperator:
    return KeyedProcessOperator("bench", CountWithTimer(), ManualClock())


SCENARIOS: dict[str, Callable[[], KeyedProcessOperator]] = {
    "inactivity_timeout": build_inactivity,
    "user value+timer": build_user,
}


Round = tuple[list[tuple[int, list[InputRecord]]], int]
"""One batch per partition, as ``(partition, batch)``, then the watermark for them all."""


def plan(records: list[InputRecord], partitions: int) -> list[Round]:
    """The input as the runtime would hand it to ``partitions`` operators.

    Records go to partitions by Kafka's default partitioner on the key (as the standard
    workload's producer sends them), in batches of BATCH per partition, one batch of each
    partition per round. One partition: a round is one batch and its watermark is the
    batch's largest timestamp less the bound (what the benchmark always did). Several: the
    watermark is the smallest of the partitions' (each the largest timestamp it has seen
    less the bound), as the runtime's emitter combines them; a partition with no batch
    left no longer holds it back.
    """
    if partitions == 1:
        return [
            ([(0, batch)], max(r[1] for r in batch) - BOUND_MS - 1)
            for batch in (records[i : i + BATCH] for i in range(0, len(records), BATCH))
        ]
    split: list[list[InputRecord]] = [[] for _ in range(partitions)]
    for record in records:
        split[kafka_partition(record[0].encode(), partitions)].append(record)
    per_partition = [[part[i : i + BATCH] for i in range(0, len(part), BATCH)] for part in split]
    seen = [MIN_TIMESTAMP] * partitions
    rounds: list[Round] = []
    for j in range(max(len(batches) for batches in per_partition)):
        batches = [(p, b[j]) for p, b in enumerate(per_partition) if j < len(b)]
        for p, batch in batches:
            seen[p] = max(seen[p], max(r[1] for r in batch))
        rounds.append((batches, min(seen[p] for p, _ in batches) - BOUND_MS - 1))
    return rounds


def run(
    build: Callable[[], KeyedProcessOperator], rounds: list[Round], partitions: int
) -> tuple[float, float, list[Any]]:
    """CPU seconds, wall seconds and the values of every output (one operator per
    partition; the clock runs over the operators' calls only)."""
    ops = [build() for _ in range(partitions)]
    emitted: list[Any] = []
    wall = time.perf_counter()
    cpu = time.process_time()
    for batches, mark in rounds:
        for p, batch in batches:
            ops[p].process_batch(batch)
        for op in ops:
            op.advance_watermark(mark)
            results, _, failed = op.collector.drain()
            if failed:
                raise SystemExit(f"unexpected failures: {failed[:3]}")
            emitted.extend(r.value for r in results)  # type: ignore[union-attr]
    for op in ops:
        op.advance_watermark(MAX_TIMESTAMP)
        results, _, _ = op.collector.drain()
        emitted.extend(r.value for r in results)  # type: ignore[union-attr]
    return time.process_time() - cpu, time.perf_counter() - wall, emitted


def run_checkpoints(
    build: Callable[[], KeyedProcessOperator], records: list[InputRecord]
) -> tuple[list[float], list[int]]:
    """CPU seconds and entries of each ``snapshot_changes()``, one every CHECKPOINT_EVERY."""
    op = build()
    batches = [records[i : i + BATCH] for i in range(0, len(records), BATCH)]
    seconds: list[float] = []
    entries: list[int] = []
    max_ts = -(2**63)
    for i, batch in enumerate(batches):
        op.process_batch(batch)
        max_ts = max(max_ts, max(r[1] for r in batch))
        op.advance_watermark(max_ts - BOUND_MS - 1)
        op.collector.drain()
        if (i + 1) * BATCH % CHECKPOINT_EVERY == 0:
            before = time.process_time()
            changes = op.snapshot_changes()
            seconds.append(time.process_time() - before)
            entries.append(len(changes))
    return seconds, entries


def check(name: str, records: list[InputRecord], emitted: list[Any]) -> None:
    keys = {r[0] for r in records}
    if name == "inactivity_timeout":
        # Keys recur every ~10 s, far below the timeout: one alert per key, at the final watermark.
        last_seen: dict[str, int] = {}
        for key, ts, _, _, _ in records:
            last_seen[key] = max(ts, last_seen.get(key, ts))
        got = {v["key"]: v["last_seen"] for v in emitted}
        if got != last_seen or len(emitted) != len(keys):
            raise SystemExit("inactivity_timeout: wrong alerts")
    elif sum(emitted) != len(records) or len(emitted) != len(keys):
        raise SystemExit(f"{name}: counts {sum(emitted)} != {len(records)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--profile", choices=sorted(SCENARIOS), default=None)
    parser.add_argument(
        "--checkpoints", action="store_true", help="measure incremental checkpoints instead"
    )
    parser.add_argument(
        "--default-gc", action="store_true", help="Python's GC thresholds, input not frozen"
    )
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), help="run only this one")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per scenario, round robin (one input, one start-up); prints median and range",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="operators, one per partition, the keys spread by Kafka's partitioner "
        "(default 1: all 10k keys in one operator)",
    )
    args = parser.parse_args()
    if args.partitions < 1:
        parser.error("--partitions must be at least 1")
    if args.checkpoints and args.partitions != 1:
        parser.error("--checkpoints measures one operator: leave --partitions at 1")
    records = make_records(args.records)
    rounds = plan(records, args.partitions)
    if not args.default_gc:
        gc_like_the_service()
    print(
        f"{args.records:,} records, {KEYS:,} keys, batches of {BATCH}, "
        f"{args.partitions} partition{'s' if args.partitions > 1 else ''}"
    )
    if args.checkpoints:
        for name, build in SCENARIOS.items():
            seconds, entries = run_checkpoints(build, records)
            per = sorted(seconds)
            print(
                f"{name:<20} snapshot_changes: {per[len(per) // 2] * 1000:7.1f} ms median, "
                f"{per[0] * 1000:7.1f} ms best per checkpoint "
                f"({sorted(entries)[len(entries) // 2] - 1:,} dirty keys, {len(per)} checkpoints)"
            )
        return
    if args.profile is not None:
        profiler = cProfile.Profile()
        profiler.enable()
        run(SCENARIOS[args.profile], rounds, args.partitions)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        return
    names = [args.scenario] if args.scenario is not None else list(SCENARIOS)
    rates: dict[str, list[float]] = {name: [] for name in names}
    # Round robin rather than all runs of one scenario in a row: a burst of load from
    # other work then spreads over the scenarios instead of landing on one.
    for _ in range(args.repeat):
        for name in names:
            cpu, wall, emitted = run(SCENARIOS[name], rounds, args.partitions)
            check(name, records, emitted)
            rates[name].append(len(records) / cpu)
            print(
                f"{name:<20} {len(records) / cpu:>12,.0f} records/s (cpu {cpu:.2f}s, "
                f"wall {wall:.2f}s, {len(emitted):,} outputs)"
            )
    if args.repeat > 1:
        for name, per in rates.items():
            print(
                f"{name:<20} median {statistics.median(per):>10,.0f} records/s, "
                f"range {min(per):,.0f}-{max(per):,.0f} ({len(per)} runs)"
            )


if __name__ == "__main__":
    main()
