"""Small helpers to drive a keyed process operator in tests (no Kafka, manual clock)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from service.core.state_cache import StateMaps
from service.core.time import ManualClock
from service.operators.base import InputRecord, KeyedOutput
from service.operators.process import KeyedProcessFunction, KeyedProcessOperator
from tests.operators.rocksdb_maps import local_partition


def rec(key: str, ts: int, value: Any = None, pos: int = 0) -> InputRecord:
    """A record at offset ``pos`` whose opaque source is ``("src", pos)``."""
    return (key, ts, value, pos, ("src", pos))


def records(items: Iterable[tuple[str, int, Any]], start: int = 0) -> list[InputRecord]:
    """Records with consecutive offsets from ``start``."""
    return [rec(k, ts, v, start + i) for i, (k, ts, v) in enumerate(items)]


BACKEND = ["memory"]
"""The state backend :func:`make` uses unless given maps (a module's tests run on both
with :func:`on_both_backends`)."""


def make(
    fn: KeyedProcessFunction,
    clock: ManualClock | None = None,
    pipeline: str = "p",
    maps: StateMaps | None = None,
) -> KeyedProcessOperator:
    """The operator of ``fn``; ``maps``: its states in those named maps (the rocksdb
    backend, ``tests/operators/rocksdb_maps.py``); else on :data:`BACKEND`."""
    if maps is None:
        partition = local_partition(BACKEND[0])
        maps = None if partition is None else partition.state_map
    return KeyedProcessOperator(pipeline, fn, clock if clock is not None else ManualClock(0), maps)


def on_both_backends(request: pytest.FixtureRequest) -> Iterator[str]:
    """The body of a module's autouse fixture, parametrized on ``BACKENDS``: every test
    of the module runs once per state backend (its :func:`make` on that one)."""
    BACKEND[0] = request.param
    try:
        yield request.param
    finally:
        BACKEND[0] = "memory"


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
