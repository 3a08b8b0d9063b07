"""The rocksdb state backend's stores of one session (issue 53): one RocksDB per owned
partition and stage, under ``<SERVICE_STATE_DIR>/<changelog topic>/<topic>-<partition>``.

The checkpointer (:mod:`.checkpointing`) drives them:

- **restore**: :meth:`LocalStates.open` keeps a store whose local checkpoint file is
  there (:func:`~service.runtime.partition.rocksdb_store.open_store`), and the changelog
  is read from the position it names (the changelog's end before that checkpoint wrote
  its records), its tail replayed onto the store. A store without one was wiped: the
  whole changelog is replayed into it. Replaying from any offset at or before the
  position onto the store gives the committed state (each key ends at its newest
  record), so several partitions sharing a changelog partition read from the smallest.
- **checkpoint**: the cache is flushed (one WriteBatch) in the same synchronous step as
  the snapshot, so the store holds exactly what the checkpoint's changelog records
  hold; before the changelog is written, the next checkpoint file is written beside the
  file (naming the position read before the records are written), and after the
  changelog commit it is renamed over it, unless an eviction wrote to the store in
  between (then the store is ahead of that checkpoint, and the file stays deleted).
- **a disk that cannot be written** (full, or failing): the store's write raises
  :class:`~service.runtime.partition.rocksdb_store.StoreWriteError` (naming the store's
  directory and the disk) at an eviction, a flush or the next checkpoint file, so before
  the checkpoint commits; the session fails with it and its stage restarts after a
  backoff, from the last committed checkpoint, until the disk has room again.
- **revoke and stop**: the stores are closed (a rocksdb partition is never parked in
  memory: its local restore does that job), a stopping session's before it leaves the
  group.
- **a store another process holds** (a worker or replica sharing the state directory
  that the group already moved the partition from, and that has not closed it yet:
  one dropped from the group while its restore held the loop, or whose session is
  ending): :meth:`LocalStates.open_when_free` tries again every
  :data:`LOCK_POLL_S`, the loop running, until that one closes it or the bound passes
  (:data:`LOCK_WAIT_S`; the member heartbeats meanwhile, as through the whole restore:
  :mod:`~service.runtime.kafka.aiokafka_fixes`); then the session fails, saying so.

Memory: one :class:`~service.runtime.partition.rocksdb_store.RocksMemory` per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import TopicPartition

from service.core.state_cache import (
    BackingStore,
    NamespacedStore,
    StateCache,
    StateCodec,
    StateMaps,
)
from service.runtime.partition.rocksdb_store import (
    LocalCheckpoint,
    RocksMemory,
    RocksStore,
    StoreLockedError,
    in_use,
    open_store,
    wipe_store,
)

logger = logging.getLogger(__name__)

__all__ = [
    "LOCK_POLL_S",
    "LOCK_WAIT_S",
    "LocalPartition",
    "LocalStates",
    "remove_stores",
    "state_root",
]

FLUSH_STEP = 4000
"""Dirty entries a checkpoint's flush writes between two turns of the event loop (at
~7 us each, encoded and put into a RocksDB write batch: ~30 ms)."""

LOCK_WAIT_S = 30.0
"""How long a restore waits at most for a store another process holds."""
LOCK_POLL_S = 0.05
"""How often it tries again meanwhile."""

_memory: list[RocksMemory] = []
_open: dict[Path, RocksStore] = {}
"""Every store open in this process: a partition opened again (its previous session
ended without closing it) closes the old one first, as RocksDB allows one opening."""
_opened: dict[Path, set[Path]] = {}
"""Every store directory this process opened, by its changelog's directory (open now or
closed since, as a revoked partition's): what :func:`remove_stores` deletes."""


def state_root(state_dir: str) -> Path:
    """Where the stores live: ``SERVICE_STATE_DIR``, or ``clockwork-state`` in the
    system's temporary directory."""
    return Path(state_dir or os.path.join(tempfile.gettempdir(), "clockwork-state"))


def remove_stores(root: Path, changelog_topic: str) -> int:
    """Delete a pipeline's stores (it was deleted, or its state reset) under ``root``
    once its sessions here ended: those this process opened, and those left there by an
    earlier process that nobody holds open; then their directory, once empty (another
    process sharing ``root``, a worker, removes its own). Returns how many went."""
    directory = root / changelog_topic
    paths = _opened.pop(directory, set())
    with contextlib.suppress(OSError):
        paths.update(path for path in directory.iterdir() if path.is_dir())
    removed = 0
    for path in sorted(paths):
        store = _open.pop(path, None)
        if store is not None:
            store.close()  # a session of it that did not end (not expected): closed first
        elif in_use(path, process_memory()):
            continue  # another process holds it
        wipe_store(path)
        removed += 1
    with contextlib.suppress(OSError):
        directory.rmdir()
    if removed:
        logger.info("removed %d state stores of %s under %s", removed, changelog_topic, root)
    return removed


def process_memory() -> RocksMemory:
    """The process's RocksDB memory (made once)."""
    if not _memory:
        _memory.append(RocksMemory())
    return _memory[0]


@dataclass(slots=True)
class LocalPartition:
    """One partition's store, its checkpoint file when opened, its caches by name."""

    store: RocksStore
    checkpoint: LocalCheckpoint | None
    cache_bytes: int
    """Shared by the partition's maps (each gets an equal share)."""
    caches: dict[str, StateCache] = field(default_factory=dict)
    flushed: dict[str, int] = field(default_factory=dict)
    """Keys held by each map at the last flush (what that checkpoint's file records)."""

    def state_map(self, name: str = "", codec: StateCodec | None = None) -> StateCache:
        """A :class:`~service.core.state_cache.StateMaps`: the map ``name`` on this store."""
        if name in self.caches or (self.caches and "" in (name, *self.caches)):
            raise ValueError(
                f"state map {name!r}: a partition's maps have distinct names, and an "
                "unnamed map is the only one"
            )
        count = self.checkpoint.counts.get(name, 0) if self.checkpoint is not None else 0
        store: BackingStore = self.store if not name else NamespacedStore(self.store, name)
        cache = StateCache(store, self.cache_bytes, count, codec=codec)
        self.caches[name] = cache
        share = max(1, self.cache_bytes // len(self.caches))
        for each in self.caches.values():
            each.capacity_bytes = share
        return cache

    def flush(self) -> None:
        """A checkpoint's flush of every map: the store holds the state now."""
        for cache in self.caches.values():
            cache.flush()
        self.flushed = self.counts()

    async def flush_in_steps(self) -> None:
        """:meth:`flush`, :data:`FLUSH_STEP` entries at a time, the event loop let run
        between them: a checkpoint flushes every key changed since the last one (over a
        hundred thousand with new keys beyond the cache), seconds of work in one piece.
        The caller holds the state still (:mod:`~service.runtime.partition.state_hold`)."""
        for cache in self.caches.values():
            for _ in cache.flush_in_steps(FLUSH_STEP):
                await asyncio.sleep(0)
        self.flushed = self.counts()

    def over_bound(self) -> bool:
        """Whether the changes since the last checkpoint (the changed entries evictions
        wrote, and the dirty ones held) reach half the partition's cache size: the next
        checkpoint is due now, whatever its interval.

        A checkpoint encodes every key changed since the one before, the evicted ones read
        back from RocksDB, and holds their changelog records until they are written; with
        new keys arriving faster than a checkpoint is written, nothing else bounds that
        (10M new session keys: checkpoints of ~500k keys, each ~15 s of the loop and
        ~190 MB of records). Counting the evicted ones alone let a checkpoint take up to
        two caches' worth of entries (the evicted ones and the cache's dirty ones): at a
        checkpoint's peak its records and their copies in the producer's batches were
        ~0.74 GB of a 1.46 GB heap (memray, 1.5M new session keys, 4 partitions of 64
        MiB). Kafka Streams' caches bound it by forwarding each evicted entry to the
        changelog at once; here it waits for the checkpoint."""
        limit = self.cache_bytes // 2
        return sum(cache.changed_bytes for cache in self.caches.values()) >= limit

    def counts(self) -> dict[str, int]:
        """Keys held by each map (what the local checkpoint file records)."""
        return {name: len(cache) for name, cache in self.caches.items()}

    def keys(self) -> int:
        return sum(len(cache) for cache in self.caches.values())


class LocalStates:
    """The stores of one session's rocksdb partitions."""

    def __init__(self, root: Path, changelog_topic: str, cache_bytes: int) -> None:
        self.directory = root / changelog_topic
        self.cache_bytes = cache_bytes
        self.partitions: dict[TopicPartition, LocalPartition] = {}

    def _path(self, tp: TopicPartition) -> Path:
        return self.directory / f"{tp.topic}-{tp.partition}"

    def open(self, tp: TopicPartition) -> LocalPartition:
        self.close([tp])
        path = self._path(tp)
        stale = _open.pop(path, None)
        if stale is not None:
            stale.close()
        store, checkpoint = open_store(path, process_memory())
        _open[path] = store
        _opened.setdefault(self.directory, set()).add(path)
        local = LocalPartition(store, checkpoint, self.cache_bytes)
        self.partitions[tp] = local
        return local

    async def open_when_free(self, tp: TopicPartition, wait_s: float) -> LocalPartition:
        """:meth:`open`, trying again every :data:`LOCK_POLL_S` (the loop running) while
        another process holds the store, for up to ``wait_s``; then
        :class:`~service.runtime.partition.rocksdb_store.StoreLockedError` saying so."""
        started = time.monotonic()
        while True:
            try:
                local = self.open(tp)
            except StoreLockedError as exc:
                waited = time.monotonic() - started
                if waited >= wait_s:
                    raise StoreLockedError(exc.directory, exc.detail, waited) from exc
                await asyncio.sleep(min(LOCK_POLL_S, wait_s - waited))
                continue
            waited = time.monotonic() - started
            if waited >= LOCK_POLL_S:
                logger.info("state store %s opened once released (%.2fs)", self._path(tp), waited)
            return local

    def wipe(self, tp: TopicPartition) -> LocalPartition:
        """Start ``tp`` over empty (its local state could not be used)."""
        self.close([tp])
        wipe_store(self._path(tp))
        return self.open(tp)

    def state_map(self, tp: TopicPartition) -> StateMaps:
        return self.partitions[tp].state_map

    def close(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            local = self.partitions.pop(tp, None)
            if local is None:
                continue
            path = self._path(tp)
            if _open.get(path) is local.store:
                del _open[path]
            local.store.close()

    def close_all(self) -> None:
        self.close(list(self.partitions))
