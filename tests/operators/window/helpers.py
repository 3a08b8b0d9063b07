"""Builders shared by the window operator tests."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from service.core.state_cache import StateMaps
from service.core.time import ManualClock
from service.operators.base import AppliesChanges, InputRecord, WindowResult
from service.operators.window import (
    GeneralWindowOperator,
    WindowOperator,
    WindowOperatorConfig,
    build_window_operator,
    create_window_operator,
)
from service.runtime.consumer_group.local_state import LocalPartition
from service.runtime.partition.rocksdb_store import RocksMemory, open_store

COUNT_SUM = {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}}

BACKENDS = ("memory", "rocksdb")
"""The state backends every window test parametrized on them runs on, same oracle."""
STREAMED = "rocksdb-streamed"
"""The rocksdb backend restored as the runtime restores an operator that
:class:`~service.operators.base.AppliesChanges`: the changelog streamed onto it in
batches of :data:`STREAM_BATCH` (the general operator; the fast one has no such restore)."""
RESTORES = (*BACKENDS, STREAMED)
STREAM_BATCH = 3
"""Entries per streamed batch: small, so a key's entries span batches."""
SMALL_CACHE_BYTES = 700
"""A partition's cache of a few entries (shared by its maps): most reads and writes of
the rocksdb backend's tests go through RocksDB."""
_STORES = tempfile.TemporaryDirectory(prefix="window-rocksdb-")
ROCKS_MEMORY = RocksMemory(cache_bytes=8 * 1024 * 1024, write_buffer_bytes=1024 * 1024)
_opened = [0]


def store_directory() -> Path:
    """A fresh directory for one partition's RocksDB."""
    _opened[0] += 1
    return Path(_STORES.name) / str(_opened[0])


def local_partition(directory: Path | None = None) -> LocalPartition:
    """A partition's store as the runtime opens it (``directory``: again, after a
    restart on the same disk; None: a fresh, empty one), its maps' caches small."""
    store, checkpoint = open_store(directory or store_directory(), ROCKS_MEMORY)
    return LocalPartition(store, checkpoint, SMALL_CACHE_BYTES)


def state_maps(backend: str) -> StateMaps | None:
    """None for memory; for rocksdb (streamed or not), the maps of a fresh partition store."""
    return None if backend == "memory" else local_partition().state_map


def restore(operator: WindowOperator, entries: Sequence[tuple[str, Any]], backend: str) -> None:
    """Restore ``operator`` (just built) from changelog entries, in order: with
    :data:`STREAMED` in batches through ``apply_changes`` (skipping the test for an
    operator without it), else ``restore_changes``."""
    if backend != STREAMED:
        operator.restore_changes(entries)
        return
    if not isinstance(operator, AppliesChanges):
        pytest.skip("the fast operator's restore is not streamed")
    for start in range(0, len(entries), STREAM_BATCH):
        operator.apply_changes(list(entries[start : start + STREAM_BATCH]))


def spec(assigner: dict[str, Any], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "window", "assigner": assigner}
    out.setdefault("aggregations", COUNT_SUM)
    out.update(extra)
    return out


def tumbling(size: int = 10, **extra: Any) -> dict[str, Any]:
    return spec({"type": "tumbling", "size_ms": size}, **extra)


def build(
    operator_spec: dict[str, Any],
    *,
    general: bool = False,
    clock: ManualClock | None = None,
    late_output: bool = False,
    track_keys: bool = False,
    function: Any = None,
    backend: str = "memory",
    maps: StateMaps | None = None,
) -> WindowOperator:
    """The operator the factory builds, or (``general``) the general path for the same
    spec; its keys in a dict (``backend`` memory) or in a fresh RocksDB behind a small
    cache (rocksdb), or in the caches ``maps`` makes."""
    op = build_window_operator(
        "p",
        operator_spec,
        clock or ManualClock(),
        late_output,
        function=function,
        track_keys=track_keys,
        state_maps=None if general else maps or state_maps(backend),
    )
    if general:
        config: WindowOperatorConfig = op.config
        return GeneralWindowOperator(replace(config, state_maps=maps or state_maps(backend)))
    return op


def rec(key: str, ts: int, amount: Any = 1, position: int = 0) -> InputRecord:
    return (key, ts, {"amount": amount}, position, ("src", key, ts))


def feed(op: WindowOperator, *records: InputRecord) -> None:
    op.process_batch(list(records))


def results(op: WindowOperator) -> list[WindowResult]:
    out, _, _ = op.collector.drain()
    return [r for r in out if isinstance(r, WindowResult)]


def summary(op: WindowOperator) -> list[tuple[str, int, int, Any, str, int]]:
    """``(key, start, end, result, fire, seq)`` of every result since the last drain."""
    return [(r.key, r.start, r.end, r.result, r.fire.value, r.seq) for r in results(op)]


__all__ = ["create_window_operator"]
