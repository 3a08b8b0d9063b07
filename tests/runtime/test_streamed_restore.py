"""The rocksdb backend's restore in batches (service/runtime/consumer_group/changelog.py,
:class:`ChangelogReader` with an applier): any changelog -- checkpoints, deletes, resets,
checkpoints cut short, another partition's records between -- streamed onto a running
aggregate on RocksDB, with a checkpoint cut short at the end put back to its committed
values, gives the state, the repair and the metadata that reading it into a dict gives."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.state_cache import StateCache, StateCodec
from service.operators.table.running import (
    META_ENTRY,
    RunningAggregateConfig,
    RunningAggregateOperator,
)
from service.runtime.consumer_group.changelog import ChangelogReader, RestoredPartition
from service.runtime.partition.rocksdb_store import RocksMemory, RocksStore, open_store

MEMORY = RocksMemory(cache_bytes=8 * 1024 * 1024, write_buffer_bytes=1024 * 1024)
SOURCE = "in|0|"
OTHER = "in|1|"
"""Another source partition checkpointed to the same changelog partition."""
WANTED = {SOURCE, OTHER}

KEY = st.sampled_from([f"u{i}" for i in range(12)])
CHANGE = st.one_of(
    st.tuples(KEY, st.integers(0, 99), st.booleans()),  # the key's acc and dirty flag
    st.tuples(KEY, st.none(), st.just(False)),  # deleted
)
CHECKPOINT = st.tuples(
    st.sampled_from([SOURCE, SOURCE, OTHER]),
    st.lists(CHANGE, max_size=8),
    st.sampled_from(["commit", "commit", "commit", "cut", "reset"]),
)


def changelog(checkpoints: list[tuple[str, list[Any], str]]) -> list[tuple[bytes, bytes | None]]:
    """The records the checkpoints write: each changed key, the operator's metadata
    entry, then the partition's metadata record (none when cut short; a null one alone
    for a reset)."""
    records: list[tuple[bytes, bytes | None]] = []
    for number, (source, changes, how) in enumerate(checkpoints):
        if how == "reset":
            records.append(((source + "m").encode(), None))
            continue
        for key, value, dirty in changes:
            entry = None if value is None else {"acc": [0, value, 0, value], "dirty": dirty}
            records.append(((source + "s|k" + key).encode(), _data(entry)))
        meta = {"version": 1, "watermark": number, "invalid": [0]}
        records.append(((source + "s|" + META_ENTRY).encode(), _data(meta)))
        if how == "commit":
            records.append(((source + "m").encode(), _data({"offset": number})))
    return records


def _data(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value)


class Stores:
    """Each operator's RocksDB, made in a temporary directory (a reset starts another)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp())
        self.opened: list[RocksStore] = []

    def operator(self, capacity: int) -> RunningAggregateOperator:
        store, _ = open_store(self.root / str(len(self.opened)), MEMORY)
        self.opened.append(store)
        cache = StateCache(store, capacity, new_entry_bytes=40)

        def maps(name: str = "", codec: StateCodec | None = None) -> StateCache:
            return cache

        config = RunningAggregateConfig("p", {"n": {"fn": "count"}}, state_map=maps)
        return RunningAggregateOperator(config)

    def close(self) -> None:
        for store in self.opened:
            store.close()
        shutil.rmtree(self.root)


class Streamed:
    """The applier: the operator the changelog is streamed onto."""

    def __init__(self, stores: Stores, capacity: int) -> None:
        self.stores = stores
        self.capacity = capacity
        self.operator = stores.operator(capacity)

    def apply(self, entries: list[tuple[str, Any]]) -> None:
        self.operator.apply_changes(entries)

    def reset(self) -> None:
        self.operator = self.stores.operator(self.capacity)


def read(
    records: list[tuple[bytes, bytes | None]], reader: ChangelogReader, start: int = 0
) -> RestoredPartition:
    for offset, (key, value) in enumerate(records):
        if offset >= start:
            reader.add(key, value, WANTED, offset)
    reader.finish()
    return reader.result(SOURCE)


def state(operator: RunningAggregateOperator) -> tuple[Any, ...]:
    (cache,) = operator.state_maps()
    return dict(cache.items()), sorted(operator._pending), operator.current_watermark


@seed(5357)
@settings(max_examples=150, deadline=None)
@given(
    checkpoints=st.lists(CHECKPOINT, max_size=25),
    capacity=st.integers(1, 3000),
    batch=st.integers(1, 6),
)
def test_a_streamed_restore_gives_what_the_dict_restore_gives(
    checkpoints: list[tuple[str, list[Any], str]], capacity: int, batch: int
) -> None:
    records = changelog(checkpoints)
    stores = Stores()
    try:
        whole = read(records, ChangelogReader())
        by_dict = stores.operator(capacity)
        by_dict.restore_changes(whole.entries.items())

        streamed = Streamed(stores, capacity)
        streaming = read(records, ChangelogReader({SOURCE: streamed}, batch=batch))
        repair: dict[str, Any] = {}
        if streaming.cut_from is not None:  # checkpointing.py's put back, by hand
            tail = read(records, ChangelogReader(values=False), streaming.cut_from)
            names = set(tail.repair)
            values = read(records, ChangelogReader(only={SOURCE: names})).entries
            repair = {name: values.get(name) for name in names}
            streamed.apply(list(repair.items()))
        assert streaming.meta == whole.meta
        assert repair == whole.repair
        assert state(streamed.operator) == state(by_dict)
    finally:
        stores.close()
