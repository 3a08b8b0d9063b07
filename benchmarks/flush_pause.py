"""How long a rocksdb partition's checkpoint flush holds the event loop (issue 53): the
cache's dirty entries written in one WriteBatch, in the snapshot's synchronous step.

``python -m benchmarks.flush_pause [--keys N] [--cache-mb M] [--repeat R]``

A cache of ``--cache-mb`` on a fresh RocksDB holds ``--keys`` running-aggregate
accumulators (5 ints each), all dirty, as after a burst of input; the flush is timed
whole (what the loop waits for), then its parts on the same data: the batch built
(encoding each value with orjson, ``WriteBatch.put``), RocksDB's write of it, and the
write-ahead log's sync (done later, by the checkpoint file's prepare, but also on the
loop); then the write and the sync in a thread (``asyncio.to_thread``) while the loop
ticks every millisecond: the longest gap between ticks says whether the loop runs
meanwhile. Best of ``--repeat``, each on a new store.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
from rocksdict import Rdict, WriteBatch

from service.core.state_cache import StateCache
from service.runtime.partition.rocksdb_store import RocksMemory, open_store


def one(keys: int, cache_bytes: int, memory: RocksMemory) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="flush-pause-"))
    try:
        store, _ = open_store(root / "whole", memory)
        cache = StateCache(store, cache_bytes)
        for i in range(keys):
            cache[f"u{i}"] = [1, 1_700_000_000_000 + i, 0, i, i % 97]
        held = cache.dirty
        started = time.perf_counter()
        cache.flush()
        whole = time.perf_counter() - started
        store.close()

        parts, _ = open_store(root / "parts", memory)
        db = parts.rocksdb()
        values = [(f"u{i}", [1, 1_700_000_000_000 + i, 0, i, i % 97]) for i in range(keys)]
        started = time.perf_counter()
        batch = WriteBatch(raw_mode=True)
        dumps = orjson.dumps
        for key, value in values:
            batch.put(key.encode(), dumps(value))
        built = time.perf_counter()
        db.write(batch)
        written = time.perf_counter()
        db.flush_wal(True)
        synced = time.perf_counter()
        parts.close()

        threaded, _ = open_store(root / "threaded", memory)
        batch = WriteBatch(raw_mode=True)
        for key, value in values:
            batch.put(key.encode(), dumps(value))
        gap, took = asyncio.run(_loop_gap(threaded.rocksdb(), batch))
        threaded.close()
        return {
            "thread_write_ms": took * 1e3,
            "loop_gap_ms": gap * 1e3,
            "held": held,
            "flush_ms": whole * 1e3,
            "build_ms": (built - started) * 1e3,
            "write_ms": (written - built) * 1e3,
            "sync_ms": (synced - written) * 1e3,
        }
    finally:
        shutil.rmtree(root)


async def _loop_gap(db: Rdict, batch: WriteBatch) -> tuple[float, float]:
    """RocksDB's write of ``batch`` (and the WAL's sync) in a thread while the loop ticks
    every millisecond: the longest the loop went without a tick, and the write's time
    (whether rocksdict lets the loop run meanwhile: a write holding the GIL does not)."""
    gaps = [0.0]
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps[0] = max(gaps[0], now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    gaps[0] = 0.0
    started = time.perf_counter()

    def write() -> None:
        db.write(batch)
        db.flush_wal(True)

    await asyncio.to_thread(write)
    took = time.perf_counter() - started
    done.set()
    await ticker
    return gaps[0], took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--cache-mb", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    memory = RocksMemory()
    runs = [one(args.keys, args.cache_mb * 1024 * 1024, memory) for _ in range(args.repeat)]
    held = runs[0]["held"]
    print(f"{args.keys} keys set, {held:.0f} dirty at the flush, in a {args.cache_mb} MiB cache")
    for name in ("flush_ms", "build_ms", "write_ms", "sync_ms", "thread_write_ms", "loop_gap_ms"):
        best = min(run[name] for run in runs)
        print(f"{name}: best {best:.1f} ms of {[round(run[name], 1) for run in runs]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
