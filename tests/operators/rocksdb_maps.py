"""The rocksdb state backend for the operators' tests: a fresh RocksDB per operator, its
named maps made by the runtime's own :class:`~service.runtime.consumer_group.local_state.
LocalPartition`, behind a cache of a few entries, so that most reads and writes go through
RocksDB and its evictions."""

from __future__ import annotations

import tempfile
from pathlib import Path

from service.runtime.consumer_group.local_state import LocalPartition
from service.runtime.partition.rocksdb_store import LocalCheckpoint, RocksMemory, open_store

__all__ = ["BACKENDS", "flush", "local_partition", "restarted"]

BACKENDS = ("memory", "rocksdb")
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
