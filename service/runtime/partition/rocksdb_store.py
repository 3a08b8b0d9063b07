"""One RocksDB per owned partition and stage, behind :class:`~service.core.state_cache.StateCache`.

Layout: ``<directory>/db`` (the RocksDB, through rocksdict, values orjson bytes) and
``<directory>/checkpoint.json``, the local checkpoint: the changelog position its RocksDB
reflects (whatever the caller names it with, e.g. a changelog offset) and the key count
of each named map in it (:class:`~service.core.state_cache.StateMaps`; ``""``: the
unnamed one).

Crash safety, Kafka Streams' way:

- the checkpoint file is deleted (and the deletion made durable) before the first write
  to RocksDB after it was written, whether an eviction's or a checkpoint's flush;
- :meth:`RocksStore.commit` writes it after a checkpoint's flush, once the write-ahead log
  is synced, atomically (a temporary file renamed over it);
- :func:`open_store` keeps a RocksDB only when its checkpoint file is there and reads; with
  none (a crash between a write and the next commit), an unreadable one, or a RocksDB that
  does not open, it wipes the directory and starts empty: the caller rebuilds it from the
  changelog. With one, the caller replays only the changelog after its position.

Memory: every store of the process shares one block cache, and its memtables are charged
to that cache (a write buffer manager), so RocksDB's memory is bounded by
:attr:`RocksMemory.cache_bytes` whatever the number of partitions (docs/operations.md).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    WriteBatch,
    WriteBufferManager,
)

__all__ = ["LocalCheckpoint", "RocksMemory", "RocksStore", "open_store", "wipe_store"]

CHECKPOINT_FILE = "checkpoint.json"
DB_DIR = "db"
CHECKPOINT_VERSION = 3
"""3: a running aggregate's keys are its named map ``"keys"`` (they were unnamed in 2, so
a store of 2 is rebuilt from the changelog)."""
MAX_CHECKPOINT_AGE_S = 12 * 3600
"""An older local checkpoint is not used: the changelog's compaction drops a delete's
tombstone after ``delete.retention.ms`` (Kafka's default: 24 h), so a tail read from an
older position could miss a delete the store never saw."""


@dataclass(frozen=True, slots=True)
class LocalCheckpoint:
    """What a store's checkpoint file names."""

    position: Any
    """The changelog position the RocksDB reflects (JSON-able, the caller's)."""
    counts: dict[str, int]
    """Keys in the RocksDB, by the name of the map holding them."""


class RocksMemory:
    """The process's RocksDB memory: one block cache, the memtables charged to it."""

    def __init__(
        self,
        cache_bytes: int = 64 * 1024 * 1024,
        write_buffer_bytes: int = 4 * 1024 * 1024,
        max_write_buffers: int = 2,
    ) -> None:
        self.cache_bytes = cache_bytes
        """The shared block cache, memtables included."""
        self.write_buffer_bytes = write_buffer_bytes
        """One memtable's size (a store's memtables: at most ``max_write_buffers`` of them)."""
        self.max_write_buffers = max_write_buffers
        self._cache = Cache(cache_bytes)
        self._buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            cache_bytes // 2, False, self._cache
        )

    def options(self) -> Options:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        table = BlockBasedOptions()
        table.set_block_cache(self._cache)
        table.set_cache_index_and_filter_blocks(True)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(self.write_buffer_bytes)
        options.set_max_write_buffer_number(self.max_write_buffers)
        options.set_write_buffer_manager(self._buffers)
        options.set_max_open_files(256)
        return options


class RocksStore:
    """A :class:`~service.core.state_cache.BackingStore` on one RocksDB."""

    __slots__ = ("_checkpointed", "_db", "directory", "evicted", "writes")

    def __init__(self, directory: Path, db: Rdict, checkpointed: bool) -> None:
        self.directory = directory
        self._db = db
        self._checkpointed = checkpointed
        """Whether the checkpoint file is there (so the next write deletes it first)."""
        self.writes = 0
        self.evicted = False
        """Whether an eviction wrote since the last checkpoint's flush (the store is then
        ahead of that checkpoint: :meth:`commit` must not name it)."""

    def load(self, key: str) -> tuple[Any, int] | None:
        data = self._db.get(key.encode())
        if data is None:
            return None
        return orjson.loads(data), len(data)

    def write(self, entries: Mapping[str, Any], checkpoint: bool) -> Mapping[str, int]:
        if not entries:
            if checkpoint:  # nothing dirty: the store holds the checkpoint's state
                self.evicted = False
            return {}
        if self._checkpointed:
            self.forget_checkpoint()
        batch = WriteBatch(raw_mode=True)
        sizes: dict[str, int] = {}
        dumps = orjson.dumps
        for key, value in entries.items():
            if value is None:
                batch.delete(key.encode())
            else:
                data = dumps(value)
                batch.put(key.encode(), data)
                sizes[key] = len(data)
        self._db.write(batch)
        self.writes += 1
        self.evicted = not checkpoint
        return sizes

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        loads = orjson.loads
        if not prefix:
            for key, data in self._db.items():
                assert isinstance(key, bytes)  # raw mode
                yield key.decode(), loads(data)
            return
        start = prefix.encode()
        for key, data in self._db.items(from_key=start):
            assert isinstance(key, bytes)
            if not key.startswith(start):
                return  # keys are sorted: past the prefix's range
            yield key.decode(), loads(data)

    def forget_checkpoint(self) -> None:
        """Delete the checkpoint file, durably: the RocksDB is about to move past it."""
        path = self.directory / CHECKPOINT_FILE
        path.unlink(missing_ok=True)
        _sync_directory(self.directory)
        self._checkpointed = False

    def commit(self, position: Any, counts: dict[str, int]) -> bool:
        """After a checkpoint's flush, once its changelog is committed: the RocksDB
        reflects ``position`` (durably). False, and no file, when an eviction wrote since
        the flush."""
        if self.evicted:
            return False
        self._db.flush_wal(True)
        path = self.directory / CHECKPOINT_FILE
        temporary = path.with_suffix(".tmp")
        data = {
            "version": CHECKPOINT_VERSION,
            "position": position,
            "counts": counts,
            "written_at": time.time(),
        }
        with open(temporary, "wb") as file:
            file.write(orjson.dumps(data))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        _sync_directory(self.directory)
        self._checkpointed = True
        return True

    def close(self) -> None:
        self._db.close()


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_checkpoint(directory: Path) -> LocalCheckpoint | None:
    try:
        data = orjson.loads((directory / CHECKPOINT_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION:
        return None
    counts = data.get("counts")
    if (
        not isinstance(counts, dict)
        or any(type(n) is not int or n < 0 for n in counts.values())
        or "position" not in data
    ):
        return None
    written_at = data.get("written_at")
    if not isinstance(written_at, float | int) or time.time() - written_at > MAX_CHECKPOINT_AGE_S:
        return None
    return LocalCheckpoint(data["position"], counts)


def wipe_store(directory: Path) -> None:
    """Delete a (closed) store's directory."""
    shutil.rmtree(directory, ignore_errors=True)


def _not_in_use(path: Path, memory: RocksMemory) -> None:
    """Raise when another opening holds the RocksDB at ``path`` (its lock): it must not be
    wiped under it. Any other failure to open is the wipe's business."""
    if not path.exists():
        return
    try:
        Rdict(str(path), memory.options(), access_type=AccessType.read_write()).close()
    except Exception as exc:
        if "lock" in str(exc).lower():
            raise


def open_store(directory: Path, memory: RocksMemory) -> tuple[RocksStore, LocalCheckpoint | None]:
    """The store in ``directory`` and its local checkpoint; None: it was wiped (no
    checkpoint file, an unreadable one, or a RocksDB that does not open) and is empty."""
    checkpoint = _read_checkpoint(directory)
    if checkpoint is not None:
        try:
            db = Rdict(
                str(directory / DB_DIR), memory.options(), access_type=AccessType.read_write()
            )
        except Exception as exc:  # any other failure to open: rebuild from the changelog
            if "lock" in str(exc).lower():
                raise  # another process has it open: never wipe a store in use
            checkpoint = None
        else:
            return RocksStore(directory, db, True), checkpoint
    _not_in_use(directory / DB_DIR, memory)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    db = Rdict(str(directory / DB_DIR), memory.options(), access_type=AccessType.read_write())
    return RocksStore(directory, db, False), None
