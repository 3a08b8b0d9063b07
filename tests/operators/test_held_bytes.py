"""The rocksdb backend's cache counts what its entries take in memory (issue #53): the
bytes it counts for the held entries of a window operator's maps are, within a quarter,
the Python memory they hold (traced with tracemalloc; RocksDB's own memory is not
Python's). A codec whose live objects take more than the default overhead says so
(``entry_overhead_bytes``); counted too low, a 64 MiB cache held ~1.6x that (10M
sessions, issue #53)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest

from service.core.time import ManualClock
from service.operators.window import build_window_operator
from tests.operators.rocksdb_maps import flush, local_partition

KEYS = 20_000
BASE = 1_700_000_000_000
COUNT_SUM = {"count": {"fn": "count"}, "sum": {"fn": "sum", "field": "amount"}}
ASSIGNERS = {
    "session": {"type": "session", "gap_ms": 1_800_000},  # the general operator
    "tumbling": {"type": "tumbling", "size_ms": 60_000},  # the fast one
}


def key(i: int) -> str:
    return f"user-{(i * 2654435761) % (1 << 40):012x}"


@pytest.mark.parametrize("assigner", ASSIGNERS)
def test_the_cache_counts_what_a_window_s_held_entries_take(assigner: str) -> None:
    """New keys, one record each, into caches large enough to hold them all, then a
    checkpoint's flush (each entry counted at its encoded size plus its overhead)."""
    partition = local_partition("rocksdb", cache_bytes=1 << 40)
    assert partition is not None
    spec: dict[str, Any] = {"assigner": ASSIGNERS[assigner], "aggregations": COUNT_SUM}
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        operator = build_window_operator(
            "held",
            {"type": "window", **spec},
            ManualClock(),
            late_output=False,
            track_keys=True,
            state_maps=partition.state_map,
        )
        for start in range(0, KEYS, 1000):
            batch = [
                (key(i), BASE + i, {"amount": 1.0}, i, None) for i in range(start, start + 1000)
            ]
            operator.process_batch(batch)
            operator.collector.drain()
        list(operator.iter_changes())  # a checkpoint: the changed keys taken
        flush(partition)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = sum(cache.held_bytes for cache in partition.caches.values())
    assert all(cache.held == KEYS for cache in partition.caches.values())
    assert 0.75 <= counted / held <= 1.33, (counted / KEYS, held / KEYS)
