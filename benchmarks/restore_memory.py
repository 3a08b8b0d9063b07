"""The memory a rocksdb partition's restore from the changelog takes (issue 53): read into
a dict of newest entries and then applied (``dict``, what an operator without
``apply_changes`` gets), against streamed onto the store in batches (``streamed``).

``python -m benchmarks.restore_memory [--keys N] [--checkpoint N] [--cache-mb M]
[--broker kafka|tansu | --bootstrap HOST:PORT]``

A changelog partition of one running aggregate's partition is written once: ``--keys``
keys (a running aggregate's entries, ~60 B of JSON each), in checkpoints of
``--checkpoint`` keys each with their metadata. Then each way restores it in a process
of its own, into a fresh RocksDB behind a cache of ``--cache-mb`` (the spec's
``state.cache_bytes``), as the checkpointer does (read, apply, flush). Reported per way:
the process's RSS before the restore, its peak (``ru_maxrss``) after it, and the time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import TopicPartition

SOURCE = TopicPartition("bench-in", 0)


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 1e6


async def write_changelog(bootstrap: str, topic: str, keys: int, checkpoint: int) -> None:
    from tests.integration.kafka_utils import create_topic, produce

    await create_topic(bootstrap, topic, 1)
    prefix = f"{SOURCE.topic}|{SOURCE.partition}|"

    def records() -> Any:
        for start in range(0, keys, checkpoint):
            for i in range(start, min(keys, start + checkpoint)):
                acc = [1, 1_700_000_000_000 + i, 0, 1, i % 97]
                entry = {"acc": acc, "dirty": False, "touched": False}
                yield 0, f"{prefix}s|ku{i}".encode(), orjson.dumps(entry), None
            meta = {"version": 1, "watermark": -(2**63), "invalid": [0, 0]}
            yield 0, f"{prefix}s|\u0000meta".encode(), orjson.dumps(meta), None
            yield 0, f"{prefix}m".encode(), orjson.dumps({"offset": start, "version": 1}), None

    await produce(bootstrap, topic, records(), max_batch_size=1 << 20)


async def restore(bootstrap: str, topic: str, way: str, cache_mb: int) -> dict[str, Any]:
    """One way's restore (in this process): what the checkpointer does for a partition
    with no local store, into a fresh one."""
    from service.operators.base import AppliesChanges
    from service.operators.table.running import RunningAggregateConfig, RunningAggregateOperator
    from service.runtime.consumer_group.changelog import read_changelog
    from service.runtime.consumer_group.local_state import LocalStates, process_memory
    from service.runtime.kafka.clients import KafkaCluster

    process_memory()
    root = Path(tempfile.mkdtemp(prefix="restore-memory-"))
    states = LocalStates(root, topic, cache_mb * 1024 * 1024)
    local = states.open(SOURCE)
    aggregations = {"orders": {"fn": "count"}, "revenue": {"fn": "sum", "field": "amount"}}
    operator = RunningAggregateOperator(
        RunningAggregateConfig("bench", aggregations, state_map=local.state_map)
    )
    before = _rss_mb()
    started = time.perf_counter()
    cluster = KafkaCluster(bootstrap)

    class Applier:
        def apply(self, entries: list[tuple[str, Any]]) -> None:
            assert isinstance(operator, AppliesChanges)
            operator.apply_changes(entries)

        def reset(self) -> None:
            raise AssertionError("no reset in this changelog")

    if way == "streamed":
        read = await read_changelog(cluster, topic, [SOURCE], appliers={SOURCE: Applier()})
    else:
        read = await read_changelog(cluster, topic, [SOURCE])
        operator.restore_changes(read[SOURCE].entries.items())
        del read
    local.flush()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    keys = len(operator.state_maps()[0])
    states.close_all()
    return {"way": way, "keys": keys, "rss_before_mb": before, "peak_mb": peak, "s": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_500_000)
    parser.add_argument("--checkpoint", type=int, default=50_000)
    parser.add_argument("--cache-mb", type=int, default=64)
    parser.add_argument("--ways", default="dict,streamed")
    parser.add_argument("--bootstrap", default=None, help="an existing broker (no --broker)")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="tansu")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a way's process
    parser.add_argument("--topic", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        result = asyncio.run(restore(args.bootstrap, args.topic, args.one, args.cache_mb))
        print(json.dumps(result))
        return 0

    def bench(bootstrap: str) -> None:
        topic = f"restore-memory-{uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        asyncio.run(write_changelog(bootstrap, topic, args.keys, args.checkpoint))
        print(f"changelog: {args.keys} keys in {time.perf_counter() - started:.1f} s")
        for way in args.ways.split(","):
            command = [sys.executable, "-m", "benchmarks.restore_memory", "--one", way]
            command += ["--bootstrap", bootstrap, "--topic", topic]
            command += ["--cache-mb", str(args.cache_mb)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"{result['way']}: {result['keys']} keys restored in {result['s']:.1f} s, "
                f"RSS {result['rss_before_mb']:.0f} MB before, peak {result['peak_mb']:.0f} MB"
            )

    if args.bootstrap:
        bench(args.bootstrap)
    else:
        from service.runtime.kafka.embedded_broker import EmbeddedBroker
        from tests.kafka.kafka_broker import KafkaBroker

        with EmbeddedBroker() if args.broker == "tansu" else KafkaBroker() as broker:
            bench(broker.bootstrap_servers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
