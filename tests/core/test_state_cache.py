"""The write-back cache (service/core/state_cache.py) against a dict, with a dict store."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.state_cache import NamespacedStore, StateCache


class DictStore:
    """A BackingStore on a dict, values kept encoded (as RocksDB would)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.writes: list[bool] = []

    def load(self, key: str) -> tuple[Any, int] | None:
        data = self.data.get(key)
        return None if data is None else (orjson.loads(data), len(data))

    def write(self, entries: Mapping[str, Any], checkpoint: bool) -> Mapping[str, int]:
        self.writes.append(checkpoint)
        sizes = {}
        for key, value in entries.items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = orjson.dumps(value)
                sizes[key] = len(self.data[key])
        return sizes

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for key, data in sorted(self.data.items()):
            if key.startswith(prefix):
                yield key, orjson.loads(data)


KEYS = st.sampled_from([f"k{i}" for i in range(40)])
OP = st.one_of(
    st.tuples(st.just("get"), KEYS),
    st.tuples(st.just("set"), KEYS, st.integers(0, 10**6)),
    st.tuples(st.just("append"), KEYS, st.integers(0, 9)),  # in place, then marked
    st.tuples(st.just("pop"), KEYS),
    st.tuples(st.just("flush")),
)
OPS = st.lists(OP, max_size=300)


def apply_to_lists(
    cache: StateCache, store: DictStore, model: dict[str, Any], op: tuple[Any, ...]
) -> None:
    """``op`` (get, set, append in place, pop or flush) on a cache of lists and on its
    model; a flush's store checked against the model."""
    if op[0] == "get":
        assert cache.get(op[1]) == model.get(op[1])
    elif op[0] == "set":
        cache[op[1]] = [op[2]]
        model[op[1]] = [op[2]]  # not the same list: the cache's is changed in place
    elif op[0] == "append":
        entry = cache.get(op[1])
        if entry is None:
            cache[op[1]] = [op[2]]
        else:
            entry.append(op[2])
            cache.mark_dirty(op[1])
        model.setdefault(op[1], []).append(op[2])
    elif op[0] == "pop":
        assert cache.pop(op[1]) == model.pop(op[1], None)
    else:
        cache.flush()
        assert {k: orjson.loads(v) for k, v in store.data.items()} == model


@seed(5353)
@settings(max_examples=300, deadline=None)
@given(ops=OPS, capacity=st.integers(1, 3000))
def test_the_cache_reads_back_what_a_dict_holds(ops: list[tuple[Any, ...]], capacity: int) -> None:
    store = DictStore()
    cache = StateCache(store, capacity, new_entry_bytes=40)
    model: dict[str, Any] = {}
    for op in ops:
        apply_to_lists(cache, store, model, op)
        assert len(cache) == len(model)
        assert cache.held_bytes <= capacity or cache.held <= 1
    assert dict(cache.items()) == model


STEPPED_OPS = st.lists(
    st.one_of(
        OP,
        st.tuples(st.just("flush_in_steps"), st.integers(1, 5), st.lists(KEYS, max_size=3)),
    ),
    max_size=300,
)


@seed(5360)
@settings(max_examples=300, deadline=None)
@given(ops=STEPPED_OPS, capacity=st.integers(1, 3000))
def test_a_flush_in_steps_with_reads_between_them_writes_what_a_flush_writes(
    ops: list[tuple[Any, ...]], capacity: int
) -> None:
    """Between the steps only reads come (a checkpoint holds the state; a pull query
    reads), and with a small cache they evict, writing dirty entries themselves."""
    store = DictStore()
    cache = StateCache(store, capacity, new_entry_bytes=40)
    model: dict[str, Any] = {}
    for op in ops:
        if op[0] == "flush_in_steps":
            for _ in cache.flush_in_steps(op[1]):
                for key in op[2]:
                    assert cache.get(key) == model.get(key)
            assert {k: orjson.loads(v) for k, v in store.data.items()} == model
            assert cache.dirty == 0 and cache.written_ahead_bytes == 0
        else:
            apply_to_lists(cache, store, model, op)
    assert dict(cache.items()) == model


def test_a_read_between_steps_that_evicts_the_rest_leaves_them_to_its_eviction() -> None:
    store = DictStore()
    cache = StateCache(store, 500, new_entry_bytes=40)
    cache["big"] = list(range(100))  # ~700 B counted once written
    cache.flush()
    model = {f"d{i}": [i] for i in range(10)}
    for key, value in model.items():  # "big" evicted for them
        cache[key] = list(value)
    assert cache.held == 10 and cache.dirty == 10
    steps = cache.flush_in_steps(1)
    next(steps)  # one written
    assert cache.get("big") == list(range(100))  # read back: every other entry evicted
    assert cache.held == 1
    for _ in steps:  # the rest skipped: written by that eviction
        pass
    assert {k: orjson.loads(v) for k, v in store.data.items()} == {"big": list(range(100)), **model}
    assert cache.dirty == 0 and store.writes == [True, True, False, True]


def test_a_flush_in_steps_writes_a_batch_per_step() -> None:
    store = DictStore()
    cache = StateCache(store, 10**6)
    for i in range(10):
        cache[f"k{i}"] = [i]
    cache.pop("k0")
    steps = sum(1 for _ in cache.flush_in_steps(4))
    assert steps == 2  # a pause after each batch but the last
    assert store.writes == [True, True, True]  # 3 entries + the delete, 4, 2
    assert {k: orjson.loads(v) for k, v in store.data.items()} == {
        f"k{i}": [i] for i in range(1, 10)
    }


@seed(5354)
@settings(max_examples=100, deadline=None)
@given(ops=OPS)
def test_a_cache_that_holds_everything_writes_only_at_checkpoints(
    ops: list[tuple[Any, ...]],
) -> None:
    store = DictStore()
    cache = StateCache(store, 10**9)
    for op in ops:
        if op[0] == "set":
            cache[op[1]] = [op[2]]
        elif op[0] == "pop":
            cache.pop(op[1])
        elif op[0] == "flush":
            cache.flush()
    assert all(store.writes)


def test_evictions_are_written_in_batches() -> None:
    store = DictStore()
    cache = StateCache(store, 8000, new_entry_bytes=100)
    for i in range(1000):
        cache[f"k{i}"] = [i]
    assert len(store.writes) < 1000 // 8
    assert not any(store.writes)  # evictions, not checkpoints
    assert len(cache) == 1000 and cache.get("k0") == [0]


class StoreFull(OSError):
    pass


class FullingStore(DictStore):
    """A DictStore whose writes fail while :attr:`full` (a full disk), changing nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.full = False
        self.failed = 0

    def write(self, entries: Mapping[str, Any], checkpoint: bool) -> Mapping[str, int]:
        if self.full:
            self.failed += 1
            raise StoreFull(28, "No space left on device")
        return super().write(entries, checkpoint)


@seed(5356)
@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(st.one_of(OP, st.tuples(st.just("full"))), max_size=300),
    capacity=st.integers(1, 3000),
)
def test_a_write_that_fails_loses_nothing_the_cache_holds(
    ops: list[tuple[Any, ...]], capacity: int
) -> None:
    """The store's writes fail at times (a full disk): whatever an eviction or a flush
    could not write stays in the cache, and once writes succeed again the cache and the
    store hold every change made, failed writes or not."""
    store = FullingStore()
    cache = StateCache(store, capacity, new_entry_bytes=40)
    model: dict[str, Any] = {}
    for op in ops:
        if op[0] == "full":
            store.full = not store.full
            continue
        if op[0] in ("get", "append", "pop"):
            try:  # a miss reads the key in, which may evict: then nothing else happens
                entry = cache.get(op[1])
            except StoreFull:
                continue
            assert entry == model.get(op[1])
        with contextlib.suppress(StoreFull):  # the change is made before the eviction
            if op[0] == "set":
                model[op[1]] = [op[2]]
                cache[op[1]] = [op[2]]
            elif op[0] == "append":
                model.setdefault(op[1], []).append(op[2])
                if entry is None:
                    cache[op[1]] = [op[2]]
                else:
                    entry.append(op[2])
                    cache.mark_dirty(op[1])
            elif op[0] == "pop":
                model.pop(op[1], None)
                cache.pop(op[1])
            elif op[0] == "flush":
                cache.flush()
        assert len(cache) == len(model)
    store.full = False
    assert dict(cache.items()) == model
    cache.flush()
    assert {k: orjson.loads(v) for k, v in store.data.items()} == model


def test_a_flush_that_fails_leaves_every_change_dirty() -> None:
    store = FullingStore()
    cache = StateCache(store, 10**6)
    cache["a"] = [1]
    cache["b"] = [2]
    cache.flush()
    cache["a"] = [3]
    del cache["b"]
    store.full = True
    with pytest.raises(StoreFull):
        cache.flush()
    assert cache.dirty == 2
    store.full = False
    cache.flush()
    assert store.data == {"a": b"[3]"} and cache.dirty == 0


class SetCodec:
    """Live values are sets; the store keeps sorted lists."""

    def encode(self, value: set[int]) -> list[int]:
        return sorted(value)

    def decode(self, data: list[int]) -> set[int]:
        return set(data)


@seed(5355)
@settings(max_examples=200, deadline=None)
@given(ops=OPS, capacity=st.integers(1, 3000))
def test_a_cache_with_a_codec_holds_live_values_and_stores_encoded_ones(
    ops: list[tuple[Any, ...]], capacity: int
) -> None:
    store = DictStore()
    cache = StateCache(store, capacity, new_entry_bytes=40, codec=SetCodec())
    model: dict[str, set[int]] = {}
    for op in ops:
        if op[0] == "get":
            assert cache.get(op[1]) == model.get(op[1])
        else:
            apply_to_sets(cache, store, model, op)
    assert dict(cache.items()) == model


def apply_to_sets(
    cache: StateCache, store: DictStore, model: dict[str, set[int]], op: tuple[Any, ...]
) -> None:
    """``op`` (set, append in place, pop or flush) on a cache of sets and on its model; a
    flush's store checked against the model."""
    if op[0] == "set":
        cache[op[1]] = {op[2]}
        model[op[1]] = {op[2]}
    elif op[0] == "append":
        entry = cache.get(op[1])
        if entry is None:
            cache[op[1]] = {op[2]}
        else:
            entry.add(op[2])  # after a peek of it: the peeked form is stale
            cache.mark_dirty(op[1])
        model.setdefault(op[1], set()).add(op[2])
    elif op[0] == "pop":
        assert cache.pop(op[1]) == model.pop(op[1], None)
    else:
        cache.flush()
        assert {k: orjson.loads(v) for k, v in store.data.items()} == {
            k: sorted(v) for k, v in model.items()
        }


FEW_KEYS = st.sampled_from(["k0", "k1", "k2", "k3"])  # a peek, then a change of the same key
PEEKING_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("peek"), FEW_KEYS),
        st.tuples(st.just("set"), FEW_KEYS, st.integers(0, 10**6)),
        st.tuples(st.just("append"), FEW_KEYS, st.integers(0, 9)),
        st.tuples(st.just("pop"), FEW_KEYS),
        st.tuples(st.just("flush")),
    ),
    max_size=100,
)


@seed(5357)
@settings(max_examples=200, deadline=None)
@given(ops=PEEKING_OPS, capacity=st.sampled_from([1, 500, 3000, 10**6]))
def test_a_peek_reads_the_stored_form_and_changes_nothing_a_flush_writes(
    ops: list[tuple[Any, ...]], capacity: int
) -> None:
    store = DictStore()
    cache = StateCache(store, capacity, new_entry_bytes=40, codec=SetCodec())
    model: dict[str, set[int]] = {}
    for op in ops:
        if op[0] == "peek":
            held, writes = cache.held, len(store.writes)
            found = model.get(op[1])
            assert cache.peek(op[1]) == (None if found is None else sorted(found))
            assert (cache.held, len(store.writes)) == (held, writes)
        else:
            apply_to_sets(cache, store, model, op)
    apply_to_sets(cache, store, model, ("flush",))
    assert dict(cache.items()) == model


def test_a_peek_of_an_evicted_key_does_not_read_it_back_in() -> None:
    store = DictStore()
    cache = StateCache(store, 2000, new_entry_bytes=100)
    for i in range(100):
        cache[f"k{i}"] = [i]
    assert "k0" not in cache._entries  # evicted, written
    held, evictions, writes = cache.held, cache.evictions, len(store.writes)
    assert cache.peek("k0") == [0]
    assert (cache.held, cache.evictions, len(store.writes)) == (held, evictions, writes)
    assert "k0" not in cache._entries


def test_settling_the_value_a_store_holds_writes_nothing() -> None:
    store = DictStore()
    cache = StateCache(store, 2000, new_entry_bytes=100)
    for i in range(50):
        cache[f"k{i}"] = [i, 0.5]
    cache.flush()
    writes, stored = len(store.writes), dict(store.data)
    cache = StateCache(store, 2000, count=50, new_entry_bytes=100)  # reopened, empty
    for i in range(50):  # more than it holds: evictions on the way
        assert cache.settle(f"k{i}", [i, 0.5]) == [i, 0.5]
    cache.flush()
    assert cache.evictions > 0
    assert (len(store.writes) - writes, store.data, len(cache)) == (1, stored, 50)
    assert store.writes[-1] is True  # only the flush's (empty) write


def test_settling_another_value_sets_it() -> None:
    store = DictStore()
    cache = StateCache(store, 10**6)
    cache["a"] = [1]
    cache.flush()
    cache.settle("a", [1.0])  # equal, but not the same entry
    cache.settle("b", [2])  # new
    cache.flush()
    assert {k: orjson.loads(v) for k, v in store.data.items()} == {"a": [1.0], "b": [2]}
    assert store.data["a"] == b"[1.0]"
    assert len(cache) == 2


class CountingCodec(SetCodec):
    def __init__(self) -> None:
        self.encoded = 0

    def encode(self, value: set[int]) -> list[int]:
        self.encoded += 1
        return super().encode(value)


def test_a_flush_writes_a_dirty_entry_as_its_peek_encoded_it() -> None:
    codec = CountingCodec()
    cache = StateCache(DictStore(), 10**6, codec=codec)
    cache["k"] = {1, 2}
    cache.peek("k")
    cache.flush()
    assert codec.encoded == 1


@seed(5356)
@settings(max_examples=200, deadline=None)
@given(left=OPS, right=OPS, capacity=st.integers(1, 3000))
def test_named_maps_on_one_store_never_see_each_others_keys(
    left: list[tuple[Any, ...]], right: list[tuple[Any, ...]], capacity: int
) -> None:
    store = DictStore()
    caches = {
        name: StateCache(NamespacedStore(store, name), capacity, new_entry_bytes=40)
        for name in ("left", "right")
    }
    models: dict[str, dict[str, Any]] = {"left": {}, "right": {}}
    for name, op in [("left", op) for op in left] + [("right", op) for op in right]:
        cache, model = caches[name], models[name]
        if op[0] == "get":
            assert cache.get(op[1]) == model.get(op[1])
        elif op[0] in ("set", "append"):
            cache[op[1]] = [op[2]]
            model[op[1]] = [op[2]]
        elif op[0] == "pop":
            assert cache.pop(op[1]) == model.pop(op[1], None)
        else:
            cache.flush()
    for name, cache in caches.items():
        cache.flush()
        assert dict(cache.items()) == models[name]
        assert dict(cache.store.items()) == models[name]


def test_evictions_count_the_changed_bytes_they_write_until_the_flush() -> None:
    store = DictStore()
    cache = StateCache(store, 2000, new_entry_bytes=100)
    for i in range(100):
        cache[f"k{i}"] = [i]
    # each counted as the cache counted it: new, never encoded, at new_entry_bytes
    assert cache.written_ahead_bytes == 100 * len(store.data) > 0
    cache.flush()
    assert cache.written_ahead_bytes == 0


def test_evicting_clean_entries_writes_nothing_ahead() -> None:
    store = DictStore()
    cache = StateCache(store, 2000, new_entry_bytes=100)
    for i in range(100):
        cache[f"k{i}"] = [i]
    cache.flush()
    for i in range(100):
        cache.get(f"k{i}")  # read back, clean: evicting them writes nothing
    assert cache.evictions > 100 and cache.written_ahead_bytes == 0


def test_the_changed_bytes_count_the_held_dirty_entries_and_the_evicted_ones() -> None:
    store = DictStore()
    cache = StateCache(store, 10_000, new_entry_bytes=100)
    for i in range(50):
        cache[f"k{i}"] = [i]
    assert cache.changed_bytes == cache.held_bytes == 5_000  # all held, all dirty
    cache.flush()
    assert cache.changed_bytes == 0
    for i in range(50, 200):  # new keys beyond the cache: evictions write some
        cache[f"k{i}"] = [i]
    held_dirty = cache.changed_bytes - cache.written_ahead_bytes
    assert cache.written_ahead_bytes > 0
    assert 0 < held_dirty <= cache.held_bytes
