"""Small helpers to drive a keyed process operator in tests (no Kafka, manual clock)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from service.core.time import ManualClock
from service.operators.base import InputRecord, KeyedOutput
from service.operators.process import KeyedProcessFunction, KeyedProcessOperator


def rec(key: str, ts: int, value: Any = None, pos: int = 0) -> InputRecord:
    """A record at offset ``pos`` whose opaque source is ``("src", pos)``."""
    return (key, ts, value, pos, ("src", pos))


def records(items: Iterable[tuple[str, int, Any]], start: int = 0) -> list[InputRecord]:
    """Records with consecutive offsets from ``start``."""
    return [rec(k, ts, v, start + i) for i, (k, ts, v) in enumerate(items)]


def make(
    fn: KeyedProcessFunction, clock: ManualClock | None = None, pipeline: str = "p"
) -> KeyedProcessOperator:
    return KeyedProcessOperator(pipeline, fn, clock if clock is not None else ManualClock(0))


def outputs(op: KeyedProcessOperator) -> list[KeyedOutput]:
    """Drain and return the keyed outputs emitted so far."""
    results, _, _ = op.collector.drain()
    out: list[KeyedOutput] = []
    for r in results:
        if not isinstance(r, KeyedOutput):
            raise TypeError(f"unexpected result {r!r}")
        out.append(r)
    return out


def values(op: KeyedProcessOperator) -> list[tuple[str, int | None, Any]]:
    """Drain and return ``(key, timestamp, value)`` of the outputs."""
    return [(o.key, o.timestamp, o.value) for o in outputs(op)]
