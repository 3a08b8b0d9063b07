"""The running aggregate (operators/table/running.py): mini-batch upserts, TTL deletes,
exactly-once emission at checkpoints, and checkpoints that restore exactly."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.state_cache import StateCache, StateCodec, StateMaps
from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.base import InputRecord, Upsert
from service.operators.table import RunningAggregateOperator, build_running_aggregate
from service.operators.window.errors import WindowConfigError
from service.runtime.consumer_group.local_state import LocalPartition
from service.runtime.partition.rocksdb_store import RocksMemory, open_store
from tests.operators.rocksdb_maps import (
    RESTORES,
    STREAMED,
    flush,
    local_partition,
    restarted,
    restore,
)

BACKENDS = ("memory", "rocksdb")
"""The tests of the operator's behaviour run on both state backends."""
_STORES = tempfile.TemporaryDirectory(prefix="running-rocksdb-")
_MEMORY = RocksMemory(cache_bytes=8 * 1024 * 1024, write_buffer_bytes=1024 * 1024)
_opened = [0]


def state_map(backend: str) -> StateMaps | None:
    """None for memory; for rocksdb, a fresh RocksDB behind a cache of ~2 entries, so that
    most reads and writes go through RocksDB (a crash in a test is a new, empty store: a
    restore from the changelog)."""
    if backend == "memory":
        return None

    def make(name: str = "", codec: StateCodec | None = None) -> StateCache:
        _opened[0] += 1
        store, _ = open_store(Path(_STORES.name) / str(_opened[0]), _MEMORY)
        return StateCache(store, 600, codec=codec)

    return make


def checkpoint_entries(op: RunningAggregateOperator) -> list[tuple[str, Any]]:
    """The checkpoint's changelog entries (as JSON reads them back), then the caches'
    flush, as the runtime does."""
    entries = orjson.loads(orjson.dumps(list(op.snapshot_changes().items())))
    for cache in op.state_maps():
        cache.flush()
    return [tuple(entry) for entry in entries]


AGGS = {
    "n": {"fn": "count"},
    "total": {"fn": "sum", "field": "amount"},
    "hi": {"fn": "max", "field": "amount"},
    "seen": {"fn": "count_distinct", "field": "amount"},
}


def build(
    clock: ManualClock,
    *,
    interval: int = 1000,
    ttl: int | None = None,
    at_checkpoint: bool = False,
    aggregations: dict[str, Any] | None = None,
    on_bad_value: str = "dead_letter",
    backend: str = "memory",
    maps: StateMaps | None = None,
) -> RunningAggregateOperator:
    spec: dict[str, Any] = {
        "type": "aggregate",
        "aggregations": aggregations or AGGS,
        "emit_interval_ms": interval,
        "on_bad_value": on_bad_value,
    }
    if ttl is not None:
        spec["state_ttl_ms"] = ttl
    return build_running_aggregate(
        "p",
        spec,
        clock,
        emit_at_checkpoint=at_checkpoint,
        state_map=maps if maps is not None else state_map(backend),
    )


def rec(key: str, ts: int, amount: Any, position: int = 0) -> InputRecord:
    """A record; ``amount`` None: without the field (SQL NULL)."""
    return (key, ts, {} if amount is None else {"amount": amount}, position, None)


def upserts(op: RunningAggregateOperator) -> list[Upsert]:
    results, _, _ = op.collector.drain()
    assert all(type(r) is Upsert for r in results)
    return results  # type: ignore[return-value]


def tick(op: RunningAggregateOperator, clock: ManualClock, to: int) -> None:
    clock.set(to)
    op.advance_processing_time(to)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_key_emits_its_newest_value_once_per_interval(backend: str) -> None:
    clock = ManualClock(10_000)
    op = build(clock, backend=backend)
    op.process_batch([rec("a", 1, 5), rec("a", 2, 7), rec("b", 3, 1)])
    assert upserts(op) == []
    assert op.next_processing_time() == 11_000
    tick(op, clock, 10_999)
    assert upserts(op) == []
    tick(op, clock, 11_000)
    out = upserts(op)
    assert [(u.id, u.key, u.seq, u.timestamp) for u in out] == [
        ("p|a", "a", 0, 2),
        ("p|b", "b", 0, 3),
    ]
    assert out[0].result == {"n": 2, "total": 12, "hi": 7, "seen": 2}
    assert op.next_processing_time() is None  # nothing dirty: no tick
    op.process_batch([rec("a", 1, 7)])
    assert op.next_processing_time() == 12_000
    tick(op, clock, 12_500)
    [u] = upserts(op)
    assert (u.key, u.seq, u.result) == ("a", 1, {"n": 3, "total": 19, "hi": 7, "seen": 2})
    assert u.timestamp == 2  # the largest event timestamp, not the last


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_end_of_input_emits_every_dirty_key(backend: str) -> None:
    clock = ManualClock(0)
    op = build(clock, backend=backend)
    op.process_batch([rec("a", 1, 5), rec("b", 2, 1)])
    op.advance_watermark(500)
    assert upserts(op) == []
    op.advance_watermark(MAX_TIMESTAMP)
    assert [u.key for u in upserts(op)] == ["a", "b"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_exactly_once_emits_at_the_checkpoint_only(backend: str) -> None:
    clock = ManualClock(0)
    op = build(clock, at_checkpoint=True, backend=backend)
    op.process_batch([rec("a", 1, 5)])
    assert op.next_processing_time() is None  # no tick without a TTL
    op.before_checkpoint()
    [u] = upserts(op)
    assert (u.key, u.seq) == ("a", 0)
    changes = op.snapshot_changes()
    assert changes["ka"]["acc"][0] == 1 and changes["ka"]["dirty"] is False
    op.before_checkpoint()
    assert upserts(op) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_ttl_deletes_an_idle_key_with_a_tombstone(backend: str) -> None:
    clock = ManualClock(0)
    op = build(clock, interval=100, ttl=1000, backend=backend)
    op.process_batch([rec("a", 1, 5), rec("b", 1, 5)])
    tick(op, clock, 100)  # emits both, takes their touch at 100
    assert [u.key for u in upserts(op)] == ["a", "b"]
    clock.set(600)
    op.process_batch([rec("b", 2, 1)])
    tick(op, clock, 700)  # b emits and is touched at 700
    assert [u.key for u in upserts(op)] == ["b"]
    assert op.next_processing_time() == 1100  # a expires at 100 + 1000
    tick(op, clock, 1100)
    [gone] = upserts(op)
    assert (gone.key, gone.result, gone.seq) == ("a", None, 1)
    assert op.gauges().keys == 1
    tick(op, clock, 1700)
    assert [(u.key, u.result) for u in upserts(op)] == [("b", None)]
    assert op.next_processing_time() is None
    op.process_batch([rec("a", 9, 1)])  # a new row: seq from 0
    tick(op, clock, 1800)
    [again] = upserts(op)
    assert (again.key, again.seq, again.result) == (
        "a",
        0,
        {"n": 1, "total": 1, "hi": 1, "seen": 1},
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_key_never_emitted_expires_without_a_tombstone(backend: str) -> None:
    clock = ManualClock(0)
    op = build(clock, interval=100, ttl=50, at_checkpoint=True, backend=backend)
    op.process_batch([rec("a", 1, 5)])
    tick(op, clock, 100)  # touched at 100
    tick(op, clock, 150)
    assert upserts(op) == []
    assert op.gauges().keys == 0
    op.before_checkpoint()
    assert upserts(op) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_values_are_dead_lettered_or_skipped_as_the_window_does(backend: str) -> None:
    clock = ManualClock(0)
    op = build(clock, backend=backend)
    op.process_batch([rec("a", 1, "x"), rec("a", 2, 4)])
    _, _, failed = op.collector.drain()
    assert [f.reason for f in failed] == ["bad_value"]
    op.advance_watermark(MAX_TIMESTAMP)
    [u] = upserts(op)
    assert u.result == {"n": 1, "total": 4, "hi": 4, "seen": 1}
    skip = build(clock, on_bad_value="skip", backend=backend)
    skip.process_batch([rec("a", 1, "x"), rec("a", 2, 4)])
    skip.advance_watermark(MAX_TIMESTAMP)
    results, _, failed = skip.collector.drain()
    assert failed == [] and results[0].result["n"] == 2  # type: ignore[union-attr]


def test_config_is_checked() -> None:
    clock = ManualClock(0)
    with pytest.raises(WindowConfigError):
        build(clock, interval=0)
    with pytest.raises(WindowConfigError):
        build(clock, ttl=-1)
    with pytest.raises(WindowConfigError):
        build(clock, aggregations={"x": {"fn": "nope"}})


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restore_goes_on_from_the_checkpoint(backend: str) -> None:
    clock = ManualClock(0)
    op = build(clock, interval=100, ttl=10_000, backend=backend)
    op.process_batch([rec("a", 1, 5), rec("b", 1, 2)])
    tick(op, clock, 100)
    upserts(op)
    op.process_batch([rec("a", 2, 3)])  # a dirty at the checkpoint
    log = list(op.snapshot_changes().items())
    full = orjson.loads(orjson.dumps(op.snapshot()))
    from_log = build(clock, interval=100, ttl=10_000, backend=backend)
    from_log.restore_changes(orjson.loads(orjson.dumps(log)))
    from_full = build(clock, interval=100, ttl=10_000, backend=backend)
    from_full.restore(full)
    for other in (from_log, from_full):
        assert other.snapshot() == op.snapshot()
        assert other.next_processing_time() == 200  # dirty and touched: a tick
        tick(other, clock, 200)
        [u] = upserts(other)
        assert (u.key, u.seq, u.result["n"]) == ("a", 1, 2)  # type: ignore[index]


# -- the property ----------------------------------------------------------------------

KEYS = ("a", "b", "c", "d")
records = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.integers(0, 1000),
        st.one_of(st.integers(-20, 20), st.none()),
    ),
    max_size=8,
)
steps = st.lists(
    st.tuples(
        records,
        st.integers(0, 2500),  # then processing time moves on by this
        st.sampled_from([None, None, "checkpoint", "crash"]),  # then, maybe, a checkpoint
    ),
    min_size=1,
    max_size=40,
)
"""Each step: a batch of records, processing time moving on (the tick fires if due),
and a checkpoint, or a checkpoint and a crash right after it (a restore from the log)."""


def oracle(records: list[tuple[str, int, int | None]]) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for key, ts, amount in records:
        row = table.setdefault(key, {"n": 0, "total": 0, "hi": None, "seen": set(), "ts": ts})
        row["n"] += 1
        if amount is not None:
            row["total"] += amount
            row["hi"] = amount if row["hi"] is None else max(row["hi"], amount)
            row["seen"].add(amount)
    return {
        key: {"n": r["n"], "total": r["total"], "hi": r["hi"], "seen": len(r["seen"])}
        for key, r in table.items()
    }


@pytest.mark.parametrize("backend", RESTORES)
@seed(5001)
@settings(max_examples=300, deadline=None)
@given(steps=steps, interval=st.integers(1, 1000), at_checkpoint=st.booleans())
def test_folded_upserts_equal_the_aggregate_of_all_input(
    backend: str, steps: list[tuple[Any, int, str | None]], interval: int, at_checkpoint: bool
) -> None:
    """Whatever the records, ticks and checkpoints (a checkpoint may be a crash and a
    restore from the changelog): folding the upserts by key gives the aggregate of all
    input; each key's seq goes 0, 1, 2, ...; a flush emits a key at most once; a key
    emits at most once per interval."""
    clock = ManualClock(0)
    op = build(clock, interval=interval, at_checkpoint=at_checkpoint, backend=backend)
    log: list[tuple[str, Any]] = []
    inputs: list[tuple[str, int, int | None]] = []
    table: dict[str, dict[str, Any]] = {}
    next_seq: dict[str, int] = {}
    last_emit: dict[str, int] = {}

    def take(flush_by_tick: bool) -> None:
        out = upserts(op)
        keys = [u.key for u in out]
        assert len(keys) == len(set(keys)), "a key emitted twice in one flush"
        for u in out:
            assert u.result is not None
            assert u.seq == next_seq.get(u.key, 0)
            next_seq[u.key] = u.seq + 1
            if flush_by_tick:
                before = last_emit.get(u.key)
                assert before is None or clock.now_ms() - before >= interval
                last_emit[u.key] = clock.now_ms()
            table[u.key] = u.result

    for batch, elapse, checkpoint in steps:
        inputs.extend(batch)
        op.process_batch([rec(k, ts, amount) for k, ts, amount in batch])
        take(False)
        clock.advance(elapse)
        due = op.next_processing_time()
        if due is not None and due <= clock.now_ms():
            op.advance_processing_time(clock.now_ms())
        take(True)
        if checkpoint is not None:
            op.before_checkpoint()
            take(False)
            log.extend(checkpoint_entries(op))
            if checkpoint == "crash":  # right after the checkpoint: restore from the log
                op = build(clock, interval=interval, at_checkpoint=at_checkpoint, backend=backend)
                restore(op, log, backend)
    op.advance_watermark(MAX_TIMESTAMP)
    op.before_checkpoint()
    take(False)
    assert table == oracle(inputs)


@pytest.mark.parametrize("backend", RESTORES)
@seed(5002)
@settings(max_examples=300, deadline=None)
@given(
    steps=steps,
    interval=st.integers(1, 500),
    extra=st.integers(0, 2000),
)
def test_with_a_ttl_deletes_come_only_for_idle_keys_and_the_upserts_still_fold(
    steps: list[tuple[Any, int, str | None]], interval: int, extra: int, backend: str
) -> None:
    """With a state TTL (at least once: emitted on ticks): a key is deleted only after
    ``ttl`` of processing time without a record, by a tombstone that ends its row (its
    next upsert is seq 0); folding upserts and deletes by key gives, for each key, the
    aggregate of its records since its last delete; once records stop, every key
    expires. With rocksdb (a cache of a few entries: the keys that expire are found
    through the index on disk), a crash restores from the store as the last checkpoint's
    flush left it and that checkpoint's entries (streamed onto it in batches, as the
    runtime does, or restored from a dict)."""
    ttl = interval + extra
    clock = ManualClock(0)
    partition = local_partition(backend)

    def make(on: LocalPartition | None) -> RunningAggregateOperator:
        maps = None if on is None else on.state_map
        return build(clock, interval=interval, ttl=ttl, maps=maps)

    op = make(partition)
    log: list[tuple[str, Any]] = []
    life: dict[str, list[tuple[str, int, int | None]]] = {}
    last_record: dict[str, int] = {}
    table: dict[str, dict[str, Any]] = {}
    next_seq: dict[str, int] = {}

    def take() -> None:
        for u in upserts(op):
            assert u.seq == next_seq.get(u.key, 0) or u.result is None
            if u.result is None:
                assert u.key in table, "a tombstone for a key never emitted"
                assert clock.now_ms() - last_record[u.key] >= ttl
                del table[u.key]
                life.pop(u.key, None)
                next_seq.pop(u.key, None)
            else:
                table[u.key] = u.result
                next_seq[u.key] = u.seq + 1

    for batch, elapse, checkpoint in steps:
        op.process_batch([rec(k, ts, amount) for k, ts, amount in batch])
        for record in batch:
            life.setdefault(record[0], []).append(record)
            last_record[record[0]] = clock.now_ms()
        take()
        clock.advance(elapse)
        due = op.next_processing_time()
        if due is not None and due <= clock.now_ms():
            op.advance_processing_time(clock.now_ms())
        take()
        if checkpoint is not None:
            op.before_checkpoint()
            take()
            tail = orjson.loads(orjson.dumps(list(op.snapshot_changes().items())))
            log.extend(tail)
            flush(partition)
            if checkpoint == "crash":
                if partition is None:
                    op = make(None)
                    op.restore_changes(log)
                else:  # a restart on the same disk: the store and the changelog's tail
                    partition = restarted(partition)
                    op = make(partition)
                    restore(op, tail, backend)
    op.advance_watermark(MAX_TIMESTAMP)
    take()
    assert table == oracle([r for rs in life.values() for r in rs])
    for _ in range(10):  # no more records: every key expires, the emitted with a tombstone
        due = op.next_processing_time()
        if due is None:
            break
        tick(op, clock, max(due, clock.now_ms()))
        take()
    assert table == {} and op.gauges().keys == 0 and op.next_processing_time() is None


def test_with_rocksdb_the_ttl_expires_keys_no_longer_in_memory() -> None:
    clock = ManualClock(0)
    op = build(clock, interval=100, ttl=100_000, at_checkpoint=True, backend="rocksdb")
    for i in range(200):
        op.process_batch([rec(f"k{i}", i, i)])
        tick(op, clock, clock.now_ms() + 100)  # k{i} touched at (i + 1) * 100
    op.before_checkpoint()
    assert len(upserts(op)) == 200
    keys, index = op.state_maps()
    assert keys.held < 10 and len(keys) == 200
    tick(op, clock, 100 * 100 + 100_000)  # k0 .. k99 idle for the TTL
    gone = upserts(op)
    assert [(u.key, u.result) for u in gone] == [(f"k{i}", None) for i in range(100)]
    assert len(keys) == op.gauges().keys == 100
    assert len(index) == 100  # the ticks of k100 .. k199


def test_the_rocksdb_backend_holds_more_keys_than_its_cache() -> None:
    clock = ManualClock(0)
    op = build(clock, at_checkpoint=True, backend="rocksdb")
    op.process_batch([rec(f"k{i}", i, i) for i in range(200)])
    op.before_checkpoint()
    assert len(upserts(op)) == 200
    checkpoint_entries(op)
    [cache] = op.state_maps()
    assert cache.held < 10 and len(cache) == op.gauges().keys == 200
    op.process_batch([rec("k7", 1, 1)])
    op.before_checkpoint()
    [u] = upserts(op)
    assert (u.seq, u.result) == (1, {"n": 2, "total": 8, "hi": 7, "seen": 2})


def test_a_local_restore_of_the_last_checkpoint_writes_nothing_back_to_the_store() -> None:
    """A restart on the same disk replays the changelog's tail (the last checkpoint's
    entries) onto the store its flush left: the store holds those values already, so
    the streamed restore writes none of them back, at evictions or at its flush; what
    the store holds afterwards, and what the operator emits, are the checkpoint's."""
    clock = ManualClock(0)
    partition = local_partition("rocksdb")
    assert partition is not None
    op = build(clock, maps=partition.state_map)
    op.process_batch([rec(f"k{i}", i, i) for i in range(200)])
    tick(op, clock, 1000)  # emitted: every key changed again (its seq)
    op.process_batch([rec(f"k{i}", 300 + i, 1) for i in range(0, 200, 2)])  # dirty again
    tail = orjson.loads(orjson.dumps(list(op.snapshot_changes().items())))
    flush(partition)
    store = partition.store
    stored = dict(store.items())
    writes = store.writes
    partition = restarted(partition)
    op = build(clock, maps=partition.state_map)
    restore(op, [tuple(entry) for entry in tail], STREAMED)
    assert partition.caches["keys"].evictions > 0  # more than its cache holds
    flush(partition)
    assert store.writes == writes
    assert dict(store.items()) == stored
    tick(op, clock, 2000)
    assert sorted(u.key for u in upserts(op)) == sorted(f"k{i}" for i in range(0, 200, 2))
