"""The rocksdb state backend for the operators' tests: a fresh RocksDB per operator, its
named maps made by the runtime's own :class:`~service.runtime.consumer_group.local_state.
LocalPartition`, behind a cache of a few entries, so that most reads and writes go through
RocksDB and its evictions."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.operators.base import AppliesChanges, Operator
from service.runtime.consumer_group.local_state import LocalPartition
from service.runtime.partition.rocksdb_store import LocalCheckpoint, RocksMemory, open_store

__all__ = ["BACKENDS", "RESTORES", "STREAMED", "flush", "local_partition", "restarted", "restore"]

BACKENDS = ("memory", "rocksdb")
STREAMED = "rocksdb-streamed"
"""The rocksdb backend restored as the runtime restores an operator that
:class:`~service.operators.base.AppliesChanges`: the changelog streamed onto it in batches."""
RESTORES = (*BACKENDS, STREAMED)
"""The backends, and for an operator with a streamed restore, that restore too."""
STREAM_BATCH = 3
"""Entries per streamed batch: small, so a key's entries span batches."""
SMALL_CACHE_BYTES = 2400
"""A partition's cache, shared by its maps: a few entries each."""

_STORES = tempfile.TemporaryDirectory(prefix="operators-rocksdb-")
_MEMORY = RocksMemory(cache_bytes=8 * 1024 * 1024, write_buffer_bytes=1024 * 1024)
_opened = [0]


def local_partition(backend: str, cache_bytes: int = SMALL_CACHE_BYTES) -> LocalPartition | None:
    """None for memory; for rocksdb, a new, empty store's partition (its ``state_map`` is
    the operator's :class:`~service.core.state_cache.StateMaps`)."""
    if backend == "memory":
        return None
    _opened[0] += 1
    store, checkpoint = open_store(Path(_STORES.name) / str(_opened[0]), _MEMORY)
    return LocalPartition(store, checkpoint, cache_bytes)


def flush(partition: LocalPartition | None) -> None:
    """A checkpoint's flush of every map of the partition (as the runtime does)."""
    if partition is not None:
        for cache in partition.caches.values():
            cache.flush()


def restarted(partition: LocalPartition) -> LocalPartition:
    """The same store opened again after a checkpoint's flush, as a restart on the same
    disk finds it (its local checkpoint names each map's key count); the old partition's
    caches are dropped unflushed, as a crash drops them."""
    checkpoint = LocalCheckpoint(0, partition.counts())
    return LocalPartition(partition.store, checkpoint, partition.cache_bytes)


def restore(operator: Operator, entries: Sequence[tuple[str, Any]], backend: str) -> None:
    """Restore ``operator`` (just built) from changelog entries, in order: with
    :data:`STREAMED` in batches through ``apply_changes``, else ``restore_changes``."""
    if backend != STREAMED:
        operator.restore_changes(entries)
        return
    assert isinstance(operator, AppliesChanges)
    for start in range(0, len(entries), STREAM_BATCH):
        operator.apply_changes(list(entries[start : start + STREAM_BATCH]))
