"""How fast the user-function scenario of ``benchmarks.process`` could get in pure Python.

The scenario's function (``CountWithTimer``) makes seven calls into the API per record:
four value-state reads and writes, the timer service, a delete and a register. This runs
the same function and input with less work behind those calls, to bound what a faster
pure-Python timer view could give. None of the reduced variants is a product path:

- ``real``: the service's own timer view (``ctx.timer_service``);
- ``no checks``: the real view's queue operations and nothing else: no argument checks,
  no counters (the registered and queued numbers the metrics read), no key tracking. Its
  outputs are still right on this input. The gap to ``real`` is the most that trimming
  the view could save; fewer queue operations per move would take another queue design;
- ``no heap``: only the bucket dictionaries' operations (which key has a timer at which
  timestamp): no heap, no checks, no counters. Nothing ever fires, so it has no outputs.
  Any queue that deletes a timer in O(1) does at least a dict lookup and a store or
  delete per operation, so this is about the least any design could cost;
- ``no timers``: the same function with its two timer calls removed (state only).

``real`` and ``no checks`` also fire every key's timer at the end (10k alerts), which
the other two skip: 1-2% of a run at the default 1M records, far more in a short run.

Every rate is per CPU second (``time.process_time``) of the operator's calls, the median
of ``--repeat`` runs taken round robin. For the instructions, which do not move with the
host's load, run one variant under cachegrind and subtract ``--variant none`` (input and
start-up only)::

    valgrind --tool=cachegrind --cache-sim=no \\
        python -m benchmarks.process_floor --records 200000 --variant "no checks"

Run: ``python -m benchmarks.process_floor [--records N] [--repeat N] [--variant NAME]``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from heapq import heappush
from typing import Any

from benchmarks.inprocess import KEYS, gc_like_the_service, make_records
from benchmarks.process import TIMEOUT_MS, CountWithTimer, build_user, check, plan, run
from service.core.time import ManualClock
from service.core.timers import _ABSENT, _REBUILD_SLACK, _rebuild
from service.functions import Context, Out
from service.operators.process import KeyedProcessOperator
from service.operators.process.context import TimerServiceView


class NoChecks(TimerServiceView):
    """The real view's event-time methods less the checks, the counters and tracking."""

    __slots__ = ()

    def register_event_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        buckets = self._buckets
        slot = buckets.get(timestamp)
        if slot is None:
            buckets[timestamp] = key
            heappush(self._heap, timestamp)
        elif type(slot) is dict:
            if key not in slot:
                slot[key] = next(self._queue._seq)
        elif slot != key:
            seq = next(self._queue._seq)
            buckets[timestamp] = {slot: seq - 1, key: seq}

    def delete_event_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        buckets = self._buckets
        slot = buckets.get(timestamp)
        if type(slot) is dict:
            if slot.pop(key, _ABSENT) is _ABSENT or slot:
                return
        elif slot is None or slot != key:
            return
        del buckets[timestamp]
        heap = self._heap
        if len(heap) > 2 * len(buckets) + _REBUILD_SLACK:
            _rebuild(heap, buckets)


class NoHeap(NoChecks):
    """:class:`NoChecks` without the heap (or the sequence numbers): nothing can fire."""

    __slots__ = ()

    def register_event_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        buckets = self._buckets
        slot = buckets.get(timestamp)
        if slot is None:
            buckets[timestamp] = key
        elif type(slot) is dict:
            if key not in slot:
                slot[key] = 0
        elif slot != key:
            buckets[timestamp] = {slot: 0, key: 0}

    def delete_event_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        buckets = self._buckets
        slot = buckets.get(timestamp)
        if type(slot) is dict:
            if slot.pop(key, _ABSENT) is _ABSENT or slot:
                return
        elif slot is None or slot != key:
            return
        del buckets[timestamp]


class NoTimers(CountWithTimer):
    """The scenario's function without its two timer calls (it emits nothing)."""

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        count = self.count.value()
        self.count.update(1 if count is None else count + 1)
        old = self.deadline.value()
        deadline: int = ctx.timestamp + TIMEOUT_MS  # type: ignore[operator]
        if old != deadline:
            self.deadline.update(deadline)


def with_view(view: type[TimerServiceView]) -> Callable[[], KeyedProcessOperator]:
    """The benchmark's user-function operator (``build_user``) with ``view`` as its
    ``ctx.timer_service``."""

    def build() -> KeyedProcessOperator:
        operator = build_user()
        ctx = operator._ctx
        ctx.timer_service = view(ctx, operator._timers)
        return operator

    return build


VARIANTS: dict[str, Callable[[], KeyedProcessOperator]] = {
    "real": build_user,
    "no checks": with_view(NoChecks),
    "no heap": with_view(NoHeap),
    "no timers": lambda: KeyedProcessOperator("bench", NoTimers(), ManualClock()),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant, round robin")
    parser.add_argument(
        "--variant",
        choices=[*VARIANTS, "none"],
        help="run only this one, once (none: input and start-up only, for cachegrind)",
    )
    args = parser.parse_args()
    records = make_records(args.records)
    rounds = plan(records, 1)
    gc_like_the_service()
    if args.variant == "none":
        return
    names = [args.variant] if args.variant else list(VARIANTS)
    repeat = 1 if args.variant else args.repeat
    print(f"{args.records:,} records, {KEYS:,} keys, one operator")
    per_record: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeat):
        for name in names:
            cpu, _, emitted = run(VARIANTS[name], rounds, 1)
            per_record[name].append(cpu / len(records) * 1e9)
            if name in ("no heap", "no timers"):
                verdict = "no outputs: a bound"
            else:
                check("user value+timer", records, emitted)
                verdict = "outputs checked"
            print(f"{name:<10} {len(records) / cpu:>10,.0f} records/s ({verdict})")
    base = statistics.median(per_record[names[0]])
    for name, samples in per_record.items():
        ns = statistics.median(samples)
        print(
            f"{name:<10} median {1e9 / ns:>10,.0f} records/s, {ns:6.0f} ns/record "
            f"({ns / base - 1:+.0%} against {names[0]})"
        )


if __name__ == "__main__":
    main()
