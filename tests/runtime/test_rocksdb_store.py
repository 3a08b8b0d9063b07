"""The RocksDB store (service/runtime/partition/rocksdb_store.py) under the cache: any
sequence of writes, evictions, checkpoints and crashes restores the last checkpoint's
state, from the local RocksDB and the changelog's tail after its checkpoint file's
position, or from the whole changelog when the file is gone."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.state_cache import NamespacedStore, StateCache
from service.runtime.consumer_group.local_state import LocalPartition
from service.runtime.partition.rocksdb_store import (
    CHECKPOINT_FILE,
    CHECKPOINT_VERSION,
    DB_DIR,
    MAX_CHECKPOINT_AGE_S,
    RocksMemory,
    StoreLockedError,
    open_store,
)

MEMORY = RocksMemory(cache_bytes=8 * 1024 * 1024, write_buffer_bytes=1024 * 1024)

KEYS = st.sampled_from([f"k{i}" for i in range(30)])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers(0, 10**6)),
        st.tuples(st.just("append"), KEYS, st.integers(0, 9)),
        st.tuples(st.just("pop"), KEYS),
        st.tuples(st.just("checkpoint")),
        st.tuples(st.just("crash")),
        st.tuples(st.just("crash_after_the_changelog")),
    ),
    max_size=120,
)


class Partition:
    """One operator's keyed state as the runtime would hold it: the cache on the store,
    the keys changed since the last checkpoint, a changelog of committed checkpoints."""

    def __init__(self, directory: Path, capacity: int, changelog: list[tuple[str, Any]]) -> None:
        self.directory = directory
        self.capacity = capacity
        self.changelog = changelog
        self.replayed = 0
        self.open()

    def open(self) -> None:
        self.store, checkpoint = open_store(self.directory, MEMORY)
        self.restored_locally = checkpoint is not None
        start = checkpoint.position if checkpoint is not None else 0
        count = checkpoint.counts.get("", 0) if checkpoint is not None else 0
        self.cache = StateCache(self.store, self.capacity, count, new_entry_bytes=40)
        self.changed: set[str] = set()
        for key, value in self.changelog[start:]:  # the tail
            self.replayed += 1
            if value is None:
                self.cache.pop(key)
            else:
                self.cache[key] = value
        self.checkpoint()  # what a restore ends with: the state is the committed one

    def append_changes(self) -> None:
        """The checkpoint's changelog write (committed: the changelog's is atomic)."""
        self.changelog.extend((key, self.cache.get(key)) for key in sorted(self.changed))
        self.changed.clear()

    def checkpoint(self) -> None:
        self.append_changes()
        self.cache.flush()
        self.store.commit(len(self.changelog), {"": len(self.cache)})

    def crash(self) -> None:
        self.store.close()  # the process dies: the cache is gone, the RocksDB stays
        self.open()


@seed(5355)
@settings(max_examples=60, deadline=None)
@given(ops=OPS, capacity=st.integers(1, 2000))
def test_any_crash_restores_the_last_checkpoint(ops: list[tuple[Any, ...]], capacity: int) -> None:
    directory = Path(tempfile.mkdtemp()) / "stage"
    try:
        partition = Partition(directory, capacity, [])
        model: dict[str, Any] = {}
        committed: dict[str, Any] = {}
        for op in ops:
            cache = partition.cache
            if op[0] == "set":
                cache[op[1]] = [op[2]]
                model[op[1]] = [op[2]]
                partition.changed.add(op[1])
            elif op[0] == "append":
                entry = cache.get(op[1])
                if entry is None:
                    cache[op[1]] = [op[2]]
                else:
                    entry.append(op[2])
                    cache.mark_dirty(op[1])
                model.setdefault(op[1], []).append(op[2])
                partition.changed.add(op[1])
            elif op[0] == "pop":
                assert cache.pop(op[1]) == model.pop(op[1], None)
                partition.changed.add(op[1])
            elif op[0] == "checkpoint":
                partition.checkpoint()
                committed = {k: list(v) for k, v in model.items()}
            elif op[0] == "crash":
                partition.crash()
                model = {k: list(v) for k, v in committed.items()}
            else:  # killed between the changelog's commit and the local checkpoint
                partition.append_changes()
                committed = {k: list(v) for k, v in model.items()}
                partition.crash()
            assert len(partition.cache) == len(model)
        partition.crash()
        assert dict(partition.cache.items()) == committed
        partition.store.close()
    finally:
        shutil.rmtree(directory.parent)


def _filled(directory: Path, keys: int) -> Partition:
    partition = Partition(directory, 10**6, [])
    for i in range(keys):
        partition.cache[f"k{i}"] = [i]
        partition.changed.add(f"k{i}")
    partition.checkpoint()
    partition.store.close()
    return partition


def test_a_restart_after_a_checkpoint_replays_only_the_tail(tmp_path: Path) -> None:
    partition = _filled(tmp_path / "stage", 100)
    partition.replayed = 0
    partition.open()
    assert partition.restored_locally and partition.replayed == 0
    assert len(partition.cache) == 100 and partition.cache.get("k7") == [7]


def test_named_maps_keep_their_keys_and_counts_across_a_restart(tmp_path: Path) -> None:
    store, _ = open_store(tmp_path / "stage", MEMORY)
    sides = {name: StateCache(NamespacedStore(store, name), 200) for name in ("left", "leftover")}
    for i in range(50):
        sides["left"][f"k{i}"] = [i]
        if i % 2:
            sides["leftover"][f"k{i}"] = [-i]
    for cache in sides.values():
        cache.flush()
    assert store.commit(7, {name: len(cache) for name, cache in sides.items()})
    store.close()
    store, checkpoint = open_store(tmp_path / "stage", MEMORY)
    assert checkpoint is not None and checkpoint.counts == {"left": 50, "leftover": 25}
    left = StateCache(NamespacedStore(store, "left"), 200, checkpoint.counts["left"])
    assert dict(left.items()) == {f"k{i}": [i] for i in range(50)}
    assert left.get("k1") == [1] and len(left) == 50
    store.close()


def test_an_eviction_after_a_checkpoint_forgets_it(tmp_path: Path) -> None:
    partition = _filled(tmp_path / "stage", 10)
    partition.open()
    partition.cache.capacity_bytes = 1
    partition.cache["k0"] = [-1]  # evicts a dirty entry into RocksDB, ahead of the changelog
    partition.cache["k1"] = [-1]
    assert partition.store.writes and not (tmp_path / "stage" / CHECKPOINT_FILE).exists()
    partition.crash()
    assert not partition.restored_locally
    assert dict(partition.cache.items()) == {f"k{i}": [i] for i in range(10)}


def test_a_crash_after_the_changelog_replays_its_tail_locally(tmp_path: Path) -> None:
    partition = _filled(tmp_path / "stage", 10)
    partition.open()
    partition.cache["k3"] = [-3]
    partition.changed.add("k3")
    partition.append_changes()
    partition.replayed = 0
    partition.crash()
    assert partition.restored_locally and partition.replayed == 1
    assert partition.cache.get("k3") == [-3] and len(partition.cache) == 10


def test_a_corrupt_local_directory_is_rebuilt_from_the_changelog(tmp_path: Path) -> None:
    partition = _filled(tmp_path / "stage", 10)
    for path in (tmp_path / "stage" / DB_DIR).iterdir():
        if path.name.startswith(("CURRENT", "MANIFEST")):
            path.write_bytes(b"garbage")
    partition.open()
    assert not partition.restored_locally
    assert dict(partition.cache.items()) == {f"k{i}": [i] for i in range(10)}


def test_a_corrupt_checkpoint_file_is_rebuilt_from_the_changelog(tmp_path: Path) -> None:
    partition = _filled(tmp_path / "stage", 10)
    (tmp_path / "stage" / CHECKPOINT_FILE).write_bytes(b"{not json")
    partition.open()
    assert not partition.restored_locally
    assert dict(partition.cache.items()) == {f"k{i}": [i] for i in range(10)}


def test_a_store_open_elsewhere_is_never_wiped(tmp_path: Path) -> None:
    store, _ = open_store(tmp_path / "stage", MEMORY)
    store.write({"k": [1]}, False)  # no checkpoint file: a second opening would wipe it
    with pytest.raises(StoreLockedError, match=r"(?i)lock"):
        open_store(tmp_path / "stage", MEMORY)
    assert store.load("k") == ([1], 3)
    store.close()


def test_an_old_local_checkpoint_is_not_used(tmp_path: Path) -> None:
    partition = _filled(tmp_path / "stage", 10)
    path = tmp_path / "stage" / CHECKPOINT_FILE
    data = orjson.loads(path.read_bytes())
    data["written_at"] -= MAX_CHECKPOINT_AGE_S + 1
    path.write_bytes(orjson.dumps(data))
    partition.open()
    assert not partition.restored_locally
    assert dict(partition.cache.items()) == {f"k{i}": [i] for i in range(10)}


def test_a_checkpoint_file_of_an_older_version_is_rebuilt_from_the_changelog(
    tmp_path: Path,
) -> None:
    """Version 2 kept a running aggregate's keys in the unnamed map (``"keys"`` since):
    its store is wiped and the changelog replayed whole."""
    partition = _filled(tmp_path / "stage", 10)
    path = tmp_path / "stage" / CHECKPOINT_FILE
    data = orjson.loads(path.read_bytes())
    assert data["version"] == CHECKPOINT_VERSION
    data["version"] = CHECKPOINT_VERSION - 1
    path.write_bytes(orjson.dumps(data))
    partition.replayed = 0
    partition.open()
    assert not partition.restored_locally and partition.replayed == len(partition.changelog)
    assert dict(partition.cache.items()) == {f"k{i}": [i] for i in range(10)}


def test_a_store_never_written_is_not_made_on_disk(tmp_path: Path) -> None:
    """An empty store reads as empty and names no checkpoint until its first write, which
    makes its RocksDB; a checkpoint after that names it."""
    store, checkpoint = open_store(tmp_path / "stage", MEMORY)
    cache = StateCache(store, 200)
    assert checkpoint is None and cache.get("k") is None and dict(cache.items()) == {}
    cache.flush()
    assert not store.commit(7, {"": 0}) and not store.made
    assert not (tmp_path / "stage").exists()
    cache["k"] = [1]
    cache.flush()
    assert store.made and store.commit(7, {"": 1})
    store.close()
    store, checkpoint = open_store(tmp_path / "stage", MEMORY)
    assert checkpoint is not None and checkpoint.position == 7 and store.load("k") == ([1], 3)
    store.close()


def test_a_store_made_late_wipes_what_another_opening_left_there(tmp_path: Path) -> None:
    """A store that was not on disk when opened (empty) is empty when it is made, even if
    another opening wrote its directory since."""
    store, _ = open_store(tmp_path / "stage", MEMORY)
    other, _ = open_store(tmp_path / "stage", MEMORY)
    other.write({"stale": [1]}, True)
    other.close()
    store.write({"k": [2]}, True)
    assert dict(store.items()) == {"k": [2]}
    store.close()


def table_properties(db: Any) -> dict[str, str]:
    text = db.property_value("rocksdb.aggregated-table-properties") or ""
    pairs = (item.split("=", 1) for item in text.split("; ") if "=" in item)
    return {name.strip(): value.strip() for name, value in pairs}


def test_a_get_reads_an_index_and_filter_partition_not_the_table_s_whole_index(
    tmp_path: Path,
) -> None:
    """A store's tables keep their index and Bloom filter in partitions under a small
    top level (pinned in the block cache), so a get on a store larger than the cache
    reads one partition of each, whatever the key count. With one index and filter
    block per table, each get read that block again (its size grows with the keys): a
    5M-key local restore took ~280 us a tail key instead of ~20."""
    store, _ = open_store(tmp_path / "s", MEMORY)
    store.write({f"k{i}": [i, i] for i in range(100_000)}, True)
    db = store.rocksdb()
    db.flush(True)
    properties = table_properties(db)
    partitions = int(properties.get("# index partitions", 0))
    assert partitions > 10
    index = int(properties["index block size (user-key? 1, delta-value? 1)"])
    assert int(properties["top-level index size"]) < index / 4
    assert int(properties.get("# entries for filter", 0)) == 100_000
    store.close()


def test_a_partition_is_over_its_bound_once_its_changes_reach_half_its_cache(
    tmp_path: Path,
) -> None:
    """LocalPartition.over_bound: the changed entries its maps' evictions wrote since the
    last flush and the dirty ones they hold reach half the partition's cache size (the
    runtime then checkpoints at once); a flush starts the count again."""
    store, checkpoint = open_store(tmp_path / "store", MEMORY)
    local = LocalPartition(store, checkpoint, 4000)
    first, second = local.state_map("a"), local.state_map("b")
    i = 0
    while not local.over_bound():
        (first if i % 2 else second)[f"k{i}"] = {"n": i}
        i += 1
    changed = sum(cache.changed_bytes for cache in (first, second))
    assert 2000 <= changed < 2000 + 1000 and i > 2
    local.flush()
    assert not local.over_bound()
    store.close()
