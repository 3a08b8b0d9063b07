"""A checkpoint's cost when the keys changed since the last one outgrow the cache, in
process (issue #53).

Every record opens a session for a key never seen before (what 10M session keys look
like to one partition), through the general window operator on the rocksdb backend as
the runtime builds it (:class:`~service.runtime.consumer_group.local_state.LocalPartition`,
one RocksDB in a temporary directory, ``--cache-bytes`` of cache), with a checkpoint
every ``--every`` records as the runtime takes it: the changelog entries of every key
changed since the last, encoded as they come (``iter_changes`` into
``encode_checkpoint``; ``--whole``: ``snapshot_changes()``'s dict first, as operators
without ``iter_changes`` give them), then the flush of the caches into RocksDB, each
timed apart from the records' processing (process CPU time). With ``--every`` above what the cache
holds, most changed keys are evicted before their checkpoint: what the checkpoint costs
then, per changed key, is what this prints, with the peak RSS.

Run: ``python -m benchmarks.checkpoint_growth [--keys N] [--every N] [--cache-bytes N]
[--whole]``.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from aiokafka import TopicPartition

from benchmarks.inprocess import gc_like_the_service
from service.core.time import ManualClock
from service.operators.window import build_window_operator
from service.runtime.consumer_group.changelog import encode_checkpoint
from service.runtime.consumer_group.local_state import LocalPartition, process_memory
from service.runtime.partition.rocksdb_store import open_store

BATCH = 1000
SPEC = {
    "type": "window",
    "assigner": {"type": "session", "gap_ms": 1_800_000},
    "aggregations": {"orders": {"fn": "count"}},
}


def new_key(i: int) -> str:
    """The ``i``-th key: a multiplicative hash, so keys arrive in no order."""
    return f"user-{(i * 2654435761) % (1 << 40):012x}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--keys", type=int, default=600_000)
    parser.add_argument("--every", type=int, default=100_000, help="records per checkpoint")
    parser.add_argument("--cache-bytes", type=int, default=64 << 20)
    parser.add_argument("--whole", action="store_true", help="the snapshot as one dict first")
    args = parser.parse_args(argv)
    gc_like_the_service()
    with tempfile.TemporaryDirectory() as directory:
        store, checkpoint = open_store(Path(directory) / "store", process_memory())
        local = LocalPartition(store, checkpoint, args.cache_bytes)
        operator = build_window_operator(
            "bench",
            SPEC,
            ManualClock(),
            late_output=False,
            track_keys=True,
            state_maps=local.state_map,
        )
        print(
            f"{args.keys:,} new session keys, a checkpoint every {args.every:,}, "
            f"{args.cache_bytes / 2**20:.0f} MiB cache"
            + (", each snapshot a dict first" if args.whole else "")
        )
        ts = 1_000_000
        processing = snapshot = flush = 0.0
        since = 0
        for start in range(0, args.keys, BATCH):
            batch = [
                (new_key(i), ts + i // 100, {"amount": 1.0}, i, None)
                for i in range(start, min(start + BATCH, args.keys))
            ]
            began = time.process_time()
            operator.process_batch(batch)
            operator.advance_watermark(ts + start // 100 - 5000)
            operator.collector.drain()
            processing += time.process_time() - began
            since += len(batch)
            if since >= args.every or start + BATCH >= args.keys:
                began = time.process_time()
                changes = (
                    operator.snapshot_changes().items() if args.whole else operator.iter_changes()
                )
                records = encode_checkpoint(TopicPartition("in", 0), changes, {"offset": start})
                snapped = time.process_time()
                local.flush()
                flushed = time.process_time()
                snapshot += snapped - began
                flush += flushed - snapped
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                print(
                    f"{start + len(batch):>10,} keys: checkpoint of {len(records) - 2:,} "
                    f"changed: snapshot {(snapped - began) / since * 1e6:5.1f} us/key, "
                    f"flush {(flushed - snapped) / since * 1e6:5.1f} us/key; "
                    f"processing {processing:6.1f} s, snapshots {snapshot:6.1f} s, "
                    f"flushes {flush:6.1f} s in all; peak RSS {rss:,.0f} MB",
                    flush=True,
                )
                since = 0
                del records
        store.close()


if __name__ == "__main__":
    main()
