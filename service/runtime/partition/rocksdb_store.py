"""One RocksDB per owned partition and stage, behind :class:`~service.core.state_cache.StateCache`.

Layout: ``<directory>/db`` (the RocksDB, through rocksdict, values orjson bytes) and
``<directory>/checkpoint.json``, the local checkpoint: the changelog position its RocksDB
reflects (whatever the caller names it with, e.g. a changelog offset) and the key count
of each named map in it (:class:`~service.core.state_cache.StateMaps`; ``""``: the
unnamed one).

Crash safety, Kafka Streams' way:

- the checkpoint file is deleted (and the deletion made durable) before the first write
  to RocksDB after it was written, whether an eviction's or a checkpoint's flush;
- after a checkpoint's flush, :meth:`RocksStore.prepare` syncs the write-ahead log and
  writes the next checkpoint file beside it (``checkpoint.json.next``) before the
  changelog is written, and :meth:`RocksStore.publish` renames it over the checkpoint
  file once the changelog is committed: atomic, and every write that takes room on the
  disk comes before the checkpoint commits;
- :func:`open_store` keeps a RocksDB only when its checkpoint file is there and reads; with
  none (a crash between a write and the next commit), an unreadable one, or a RocksDB that
  does not open, it wipes the directory and starts empty: the caller rebuilds it from the
  changelog. With one, the caller replays only the changelog after its position.
- an empty store is not made on disk until its first write: a RocksDB takes 8-35 ms to
  create (its files synced), and a pipeline of thousands of partitions, most of them
  without state, would otherwise hold the event loop that long for each at every
  restore. Until then it reads as empty and names no checkpoint (its partition's state
  is empty, whatever the changelog's position); when it is made, whatever another
  opening left in its directory since is wiped first, as :func:`open_store` wipes.

Failures to write (a full disk, another I/O error) raise :class:`StoreWriteError`, whose
message names the store's directory and the disk (device, mount point, room left): from
an eviction's or a flush's write, the write-ahead log's sync, or the checkpoint file. A
WriteBatch is atomic, so a failed write changes nothing in RocksDB; the caller fails the
pipeline, and its last committed checkpoint (the changelog) is where it resumes. A disk
that cannot be written while a store opens wipes nothing.

Memory: every store of the process shares one block cache, and its memtables are charged
to that cache (a write buffer manager), so RocksDB's memory is bounded by
:attr:`RocksMemory.cache_bytes` whatever the number of partitions (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import errno
import logging
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
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    WriteBatch,
    WriteBufferManager,
)

logger = logging.getLogger(__name__)

__all__ = [
    "LocalCheckpoint",
    "RocksMemory",
    "RocksStore",
    "StoreLockedError",
    "StoreWriteError",
    "describe_disk",
    "disk_errno",
    "in_use",
    "open_store",
    "store_write_error",
    "wipe_store",
]

CHECKPOINT_FILE = "checkpoint.json"
PREPARED_FILE = "checkpoint.json.next"
"""The next checkpoint file, written before the changelog and renamed after it."""
DB_DIR = "db"
CHECKPOINT_VERSION = 3
"""3: a running aggregate's keys are its named map ``"keys"`` (they were unnamed in 2, so
a store of 2 is rebuilt from the changelog)."""
MAX_CHECKPOINT_AGE_S = 12 * 3600
"""An older local checkpoint is not used: the changelog's compaction drops a delete's
tombstone after ``delete.retention.ms`` (Kafka's default: 24 h), so a tail read from an
older position could miss a delete the store never saw."""


class StoreWriteError(RuntimeError):
    """A store could not write to its disk (full, over its quota, read-only, failing):
    RocksDB's write, the write-ahead log's sync, or the checkpoint file's. The message
    names the store's directory and the disk; the session fails with it, before the
    checkpoint it was writing commits (:mod:`~service.runtime.consumer_group.checkpointing`)."""

    def __init__(self, message: str, directory: Path, error_number: int | None) -> None:
        super().__init__(message)
        self.directory = directory
        self.errno = error_number
        """``errno.ENOSPC`` for a full disk, the other disk errors' numbers, else None."""


class StoreLockedError(RuntimeError):
    """Another opening holds the store's RocksDB (its ``LOCK`` file): another process
    sharing the state directory (a worker, a replica) that has not closed it yet. Nothing
    was wiped; opening it again once that one closed it succeeds."""

    def __init__(self, directory: Path, detail: object, waited_s: float | None = None) -> None:
        waited = "" if waited_s is None else f" after waiting {waited_s:.1f}s"
        super().__init__(
            f"the RocksDB store {directory} is still open elsewhere{waited} (a process "
            f"sharing the state directory has not closed it): {detail}"
        )
        self.directory = directory
        self.detail = detail
        """RocksDB's error."""


def _locked(exc: BaseException) -> bool:
    """Whether RocksDB's error says another opening holds the database's lock."""
    return "lock" in str(exc).lower()


_DISK_ERRORS = {
    errno.ENOSPC: "No space left on device",
    errno.EDQUOT: "Disk quota exceeded",
    errno.EROFS: "Read-only file system",
    errno.EIO: "Input/output error",
}
"""The errors that say the disk cannot take a write (RocksDB's messages quote strerror)."""


def disk_errno(exc: BaseException) -> int | None:
    """The disk error ``exc`` is (:data:`_DISK_ERRORS`), from an ``OSError``'s number or
    RocksDB's message; None for any other."""
    if isinstance(exc, OSError) and exc.errno in _DISK_ERRORS:
        return exc.errno
    if isinstance(exc, StoreWriteError):
        return exc.errno
    text = str(exc)
    return next((number for number, words in _DISK_ERRORS.items() if words in text), None)


def store_write_error(directory: Path, exc: BaseException) -> StoreWriteError:
    """``exc``, met writing the store in ``directory``, as the reason a person can act on:
    what the disk is, where it is mounted and how much room it has left."""
    number = disk_errno(exc)
    what = {
        errno.ENOSPC: "the state disk is full",
        errno.EDQUOT: "the state disk is over its quota",
        errno.EROFS: "the state disk is read-only",
        errno.EIO: "the state disk failed",
    }.get(number or 0, "the state store failed")
    return StoreWriteError(
        f"{what}: the RocksDB store {directory} cannot write ({describe_disk(directory)}): {exc}",
        directory,
        number,
    )


def describe_disk(directory: Path) -> str:
    """The disk holding ``directory``: its device, type and mount point, and its room."""
    path = os.path.abspath(directory)
    try:
        while not os.path.ismount(path):
            path = os.path.dirname(path)
        stat = os.statvfs(path)
    except OSError as exc:
        return f"disk unknown: {exc}"
    device = kind = "?"
    with contextlib.suppress(OSError), open("/proc/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) >= 3 and fields[1] == path:
                device, kind = fields[0], fields[2]  # the last mount there is the one seen
    free = stat.f_bavail * stat.f_frsize
    size = stat.f_blocks * stat.f_frsize
    return f"the disk {device} ({kind}) mounted at {path}, {_mib(free)} free of {_mib(size)}"


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


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
        # A state larger than the cache would evict a table's one index and filter block
        # (~1 MB at 800k keys) and read it again at every get (53 us a hit, 67 us a miss
        # measured): partitioned, only their top levels stay pinned, and a key new to
        # the state (a miss, two for a new session) is answered by its filter partition.
        table.set_bloom_filter(10, False)
        table.set_index_type(BlockBasedIndexType.two_level_index_search())
        table.set_partition_filters(True)
        table.set_pin_top_level_index_and_filter(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(self.write_buffer_bytes)
        options.set_max_write_buffer_number(self.max_write_buffers)
        options.set_write_buffer_manager(self._buffers)
        options.set_max_open_files(256)
        return options


class RocksStore:
    """A :class:`~service.core.state_cache.BackingStore` on one RocksDB (made at the first
    write when the store starts empty: ``db`` None)."""

    __slots__ = (
        "_checkpointed",
        "_db",
        "_memory",
        "_prepared",
        "directory",
        "evicted",
        "writes",
    )

    def __init__(
        self, directory: Path, db: Rdict | None, checkpointed: bool, memory: RocksMemory
    ) -> None:
        self.directory = directory
        self._db = db
        """None: the store is empty and not on disk yet (:meth:`rocksdb` makes it)."""
        self._memory = memory
        self._checkpointed = checkpointed
        """Whether the checkpoint file is there (so the next write deletes it first)."""
        self._prepared = False
        """Whether :meth:`prepare` wrote the next checkpoint file (to :meth:`publish`)."""
        self.writes = 0
        self.evicted = False
        """Whether an eviction wrote since the last checkpoint's flush (the store is then
        ahead of that checkpoint: :meth:`commit` must not name it)."""

    @property
    def made(self) -> bool:
        """Whether the RocksDB is on disk (it is not until a store that started empty
        is first written)."""
        return self._db is not None

    def rocksdb(self) -> Rdict:
        """The RocksDB, made now if the store is not on disk yet (its directory wiped
        first, unless another opening holds it: that raises)."""
        db = self._db
        if db is None:
            db = self._db = _create(self.directory, self._memory)
        return db

    def load(self, key: str) -> tuple[Any, int] | None:
        if self._db is None:
            return None
        data = self._db.get(key.encode())
        if data is None:
            return None
        return orjson.loads(data), len(data)

    def write(self, entries: Mapping[str, Any], checkpoint: bool) -> Mapping[str, int]:
        if not entries:
            if checkpoint:  # nothing dirty: the store holds the checkpoint's state
                self.evicted = False
            return {}
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
        db = self.rocksdb()
        try:
            if self._checkpointed:
                self.forget_checkpoint()
            db.write(batch)  # atomic: all of the batch, or none of it
        except Exception as exc:
            raise store_write_error(self.directory, exc) from exc
        self.writes += 1
        self.evicted = not checkpoint
        return sizes

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        if self._db is None:
            return
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

    def scan(self, start: str, limit: int, prefix: str = "") -> list[tuple[str, Any]]:
        """Up to ``limit`` ``(key, value)`` from ``start`` on, in key order, while the
        keys start with ``prefix`` (:class:`~service.core.state_cache.OrderedStore`)."""
        loads = orjson.loads
        bound = prefix.encode()
        rows: list[tuple[str, Any]] = []
        if limit <= 0 or self._db is None:  # not made yet: empty
            return rows
        for key, data in self._db.items(from_key=start.encode()):
            assert isinstance(key, bytes)  # raw mode
            if not key.startswith(bound):
                break  # keys are sorted: past the prefix's range
            rows.append((key.decode(), loads(data)))
            if len(rows) >= limit:
                break
        return rows

    def forget_checkpoint(self) -> None:
        """Delete the checkpoint file, durably: the RocksDB is about to move past it."""
        path = self.directory / CHECKPOINT_FILE
        path.unlink(missing_ok=True)
        _sync_directory(self.directory)
        self._checkpointed = False

    def commit(self, position: Any, counts: dict[str, int]) -> bool:
        """:meth:`prepare` then :meth:`publish` (nothing to wait for in between)."""
        return self.prepare(position, counts) and self.publish()

    def prepare(self, position: Any, counts: dict[str, int]) -> bool:
        """After a checkpoint's flush, before its changelog is written: every write that
        takes room on the disk, so that a full disk fails the checkpoint before it
        commits. Syncs the write-ahead log and writes the checkpoint file naming
        ``position`` beside the file (:meth:`publish` renames it over the file). False,
        and nothing written, when an eviction wrote since the flush, or when the store is
        not on disk (empty: a restore reads the changelog from its start, which holds
        nothing of the partition's state that is not deleted again)."""
        if self.evicted or self._db is None:
            return False
        temporary = self.directory / PREPARED_FILE
        data = {
            "version": CHECKPOINT_VERSION,
            "position": position,
            "counts": counts,
            "written_at": time.time(),
        }
        try:
            self._db.flush_wal(True)
            with open(temporary, "wb") as file:
                file.write(orjson.dumps(data))
                file.flush()
                os.fsync(file.fileno())
        except Exception as exc:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)  # what was written of it takes room
            raise store_write_error(self.directory, exc) from exc
        self._prepared = True
        return True

    def publish(self) -> bool:
        """Once the checkpoint's changelog is committed: the prepared file becomes the
        checkpoint file, durably (a rename, which takes no room). False, and the prepared
        file dropped, when an eviction wrote since the flush (the store is ahead of the
        checkpoint) or nothing was prepared."""
        temporary = self.directory / PREPARED_FILE
        prepared, self._prepared = self._prepared, False
        try:
            if not prepared or self.evicted:
                temporary.unlink(missing_ok=True)
                return False
            os.replace(temporary, self.directory / CHECKPOINT_FILE)
            _sync_directory(self.directory)
        except OSError as exc:
            raise store_write_error(self.directory, exc) from exc
        self._checkpointed = True
        return True

    def close(self) -> None:
        """Close the RocksDB, never raising. It flushes its memtables first, which fails
        on a disk that cannot be written ("Writer has previous error"): it is closed all
        the same, what the memtables held still in its write-ahead log."""
        if self._db is None:
            return
        try:
            self._db.close()
        except Exception as exc:
            logger.warning("state store %s closed after an error: %s", self.directory, exc)


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
    """Raise :class:`StoreLockedError` when another opening holds the RocksDB at ``path``
    (its lock): it must not be wiped under it. Any other failure to open is the wipe's
    business."""
    if not path.exists():
        return
    try:
        Rdict(str(path), memory.options(), access_type=AccessType.read_write()).close()
    except Exception as exc:
        if _locked(exc):
            raise StoreLockedError(path.parent, exc) from exc


def in_use(directory: Path, memory: RocksMemory) -> bool:
    """Whether an opening (of this process or another) holds the store in ``directory``."""
    try:
        _not_in_use(directory / DB_DIR, memory)
    except Exception:
        return True
    return False


def open_store(directory: Path, memory: RocksMemory) -> tuple[RocksStore, LocalCheckpoint | None]:
    """The store in ``directory`` and its local checkpoint; None: it was wiped (no
    checkpoint file, an unreadable one, or a RocksDB that does not open) and is empty.

    A store another opening holds raises :class:`StoreLockedError` and wipes nothing.

    A disk that cannot be written (:func:`disk_errno`) raises :class:`StoreWriteError`
    and wipes nothing: the store stays for when the disk has room again."""
    checkpoint = _read_checkpoint(directory)
    if checkpoint is not None:
        try:
            db = Rdict(
                str(directory / DB_DIR), memory.options(), access_type=AccessType.read_write()
            )
        except Exception as exc:  # any other failure to open: rebuild from the changelog
            if _locked(exc):  # another process has it open: never wipe a store in use
                raise StoreLockedError(directory, exc) from exc
            if disk_errno(exc) is not None:
                raise store_write_error(directory, exc) from exc
            checkpoint = None
        else:
            return RocksStore(directory, db, True, memory), checkpoint
    if directory.exists():  # a store without a usable checkpoint: wiped now
        _not_in_use(directory / DB_DIR, memory)
        shutil.rmtree(directory, ignore_errors=True)
    return RocksStore(directory, None, False, memory), None


def _create(directory: Path, memory: RocksMemory) -> Rdict:
    """An empty RocksDB in ``directory``: what is there is wiped first, unless another
    opening holds it (that raises, as in :func:`open_store`)."""
    if directory.exists():
        _not_in_use(directory / DB_DIR, memory)
        shutil.rmtree(directory, ignore_errors=True)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        return Rdict(str(directory / DB_DIR), memory.options(), access_type=AccessType.read_write())
    except Exception as exc:
        if _locked(exc):
            raise StoreLockedError(directory, exc) from exc
        raise store_write_error(directory, exc) from exc
