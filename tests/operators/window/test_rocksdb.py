"""The window operators on the rocksdb backend (#53) with more keys than their cache holds:
the windows of evicted keys are read back from RocksDB when a record or a firing needs
them, and a key with no window left leaves the store. (The other window tests run on
both backends against the same oracles: test_properties.py, test_snapshots.py.)"""

from __future__ import annotations

import pytest

from service.core.time import MAX_TIMESTAMP
from service.operators.window.keystate import KEY_PREFIX, META_ENTRY

from .helpers import build, local_partition, rec, spec, summary, tumbling

KEYS = 200


@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
def test_windows_of_evicted_keys_fire_from_rocksdb(general: bool) -> None:
    """A tumbling window of 200 keys (two records each) behind a cache of a few entries,
    through the fast operator and the general one: every window fires once with both
    records, and once fired (no lateness) no key is left, in the cache or the store."""
    local = local_partition()
    op = build(tumbling(100), general=general, track_keys=True, maps=local.state_map)
    op.process_batch([rec(f"k{i}", i % 50, i) for i in range(KEYS)])
    op.process_batch([rec(f"k{i}", 50 + i % 50, 1) for i in range(KEYS)])
    caches = op.state_maps()
    assert sum(cache.held for cache in caches) < 10
    assert op.gauges().keys == KEYS
    op.advance_watermark(99)
    fired = summary(op)
    assert sorted(fired) == sorted(
        (f"k{i}", 0, 100, {"n": 2, "total": i + 1}, "on_time", 0) for i in range(KEYS)
    )
    op.snapshot_changes()
    for cache in caches:
        cache.flush()
    assert op.gauges().keys == 0
    assert [key for key, _ in local.store.items()] == []


def test_session_timers_of_evicted_keys_read_their_state_back() -> None:
    """Sessions of 200 keys behind a cache of a few entries: each key's timer fires after
    its state was evicted, reads it back and emits the merged session."""
    local = local_partition()
    op = build(spec({"type": "session", "gap_ms": 10}), maps=local.state_map, track_keys=True)
    op.process_batch([rec(f"k{i}", i, 1) for i in range(KEYS)])
    op.process_batch([rec(f"k{i}", i + 5, 2) for i in range(KEYS)])
    assert sum(cache.held for cache in op.state_maps()) < 10
    op.advance_watermark(MAX_TIMESTAMP)
    fired = summary(op)
    assert sorted(fired) == sorted(
        (f"k{i}", i, i + 15, {"n": 2, "total": 3}, "on_time", 0) for i in range(KEYS)
    )
    assert op.gauges().keys == 0


@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
def test_a_checkpoint_reads_evicted_keys_without_bringing_them_back_into_the_cache(
    general: bool,
) -> None:
    """The changes of 200 keys behind a cache of a few entries, streamed as the runtime
    encodes them: every key's windows are in them, and the cache neither took the
    evicted keys back in nor wrote anything for them (no eviction during the snapshot)."""
    local = local_partition()
    op = build(tumbling(100), general=general, track_keys=True, maps=local.state_map)
    op.process_batch([rec(f"k{i}", i % 50, i) for i in range(KEYS)])
    caches = op.state_maps()
    before = [(cache.held, cache.evictions) for cache in caches]
    changes = list(op.iter_changes())
    assert [(cache.held, cache.evictions) for cache in caches] == before
    names = [name for name, _ in changes]
    entries = sorted(KEY_PREFIX + f"k{i}" for i in range(KEYS))
    assert names[-1] == META_ENTRY and sorted(names[:-1]) == entries
    assert all(value for _, value in changes)
