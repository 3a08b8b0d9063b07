"""Compaction benchmark: 1M result records from Kafka into a Delta table and/or Parquet.

Run: ``python -m benchmarks.compaction [--format delta,parquet] [--windows N]
[--firings N] [--replay N] [--late-fraction F] [--master local[2]]
[--no-deletion-vectors]``; ``--format delta,delta-cow`` compares Delta with and without
deletion vectors in one session.

Produces ``windows x firings`` result records (default 240,000 x 4 = 960,000) plus a
replay of the first 40,000 (duplicates with the same seq at newer offsets): 1,000,000
records of ~230 bytes, two pipelines over ten days of windows, keyed by the pipeline
key into a 4-partition topic on an embedded broker (built with ``create_batch`` /
``send_batch``, 1 MiB batches). Then, in the same process and the same SparkSession,
for each format (``delta``: with deletion vectors, the default; ``delta-cow``: without;
``parquet``) into its own fresh directory: a first run (plan, read through the
Python data source, dedupe, write, commit the offsets), timed end to end after the
session is up, and a run with nothing new. Then ``late-fraction`` (1%) of the windows
get one more (late) firing, spread over all the days, and each format runs again.
Prints rows/s read and written and the wall times, per format.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import zlib
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from service.compaction import CompactionConfig, Compactor, Summary
from service.compaction.cli import build_session
from service.runtime.kafka.embedded_broker import EmbeddedBroker

PARTITIONS = 4
T0 = 1_700_006_400_000
SIZE_MS = 60_000
KEYS = 1_000


IVY_SETTINGS = Path(__file__).parents[1] / "tests" / "compaction" / "ivysettings.xml"
"""Maven Central for the Delta jar (see the file for why not ~/.m2)."""


def records(
    windows: int, firings: int, replay: int, only: list[int] | None = None, first_seq: int = 0
) -> list[tuple[int, bytes, bytes]]:
    """``(partition, key, value)``, firings of each window in seq order, replay last;
    with ``only``, those windows alone."""
    out = []
    per_day = max(1, windows // 10)
    for seq in range(first_seq, first_seq + firings):
        fire = "on_time" if seq == 0 else "late"
        for w in only if only is not None else range(windows):
            pipeline = "revenue" if w % 2 else "clicks"
            key = f"user-{w % KEYS}"
            start = T0 + (w // per_day) * 86_400_000 + (w // KEYS) * SIZE_MS
            value = {
                "pipeline": pipeline,
                "key": key,
                "window": {"start": start, "end": start + SIZE_MS},
                "result": {"orders": seq + 1, "revenue": 10.5 * (seq + 1)},
                "fire": fire,
                "seq": seq,
                "watermark": start + SIZE_MS - 1 + seq,
                "id": f"{pipeline}|{key}|{start}|{start + SIZE_MS}",
            }
            raw_key = key.encode()
            out.append((zlib.crc32(raw_key) % PARTITIONS, raw_key, orjson.dumps(value)))
    return out + out[:replay]


async def produce(bootstrap_servers: str, topic: str, data: list[tuple[int, bytes, bytes]]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    await produce_more(bootstrap_servers, topic, data)


async def produce_more(
    bootstrap_servers: str, topic: str, data: list[tuple[int, bytes, bytes]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, max_batch_size=1 << 20)
    await producer.start()
    try:
        batches = {p: producer.create_batch() for p in range(PARTITIONS)}
        sent = []
        for partition, key, value in data:
            batch = batches[partition]
            if batch.append(key=key, value=value, timestamp=None) is None:
                sent.append(await producer.send_batch(batch, topic, partition=partition))
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
        for partition, batch in batches.items():
            sent.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


class Stopwatch:
    """Progress lines stamped with the time since the current run started."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def line(self, text: str) -> None:
        print(f"    {time.perf_counter() - self.started:6.1f}s {text}")


STOPWATCH = Stopwatch()


def timed_run(compactor: Compactor, label: str) -> tuple[Summary, float]:
    started = STOPWATCH.started = time.perf_counter()
    summary = compactor.run()
    wall = time.perf_counter() - started
    print(
        f"  {label}: {wall:.1f}s wall, {summary.rows_read} read "
        f"({summary.rows_read / wall:,.0f}/s), {summary.rows_changed} changed, "
        f"{summary.rows_written} written ({summary.rows_written / wall:,.0f}/s), "
        f"{len(summary.partitions_touched)} partitions"
    )
    return summary, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--format",
        default="delta,parquet",
        help="comma-separated: delta (with deletion vectors unless --no-deletion-vectors), "
        "delta-cow (Delta without deletion vectors: copy-on-write MERGEs), parquet",
    )
    parser.add_argument("--windows", type=int, default=240_000)
    parser.add_argument("--firings", type=int, default=4)
    parser.add_argument("--replay", type=int, default=40_000)
    parser.add_argument("--late-fraction", type=float, default=0.01)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--deletion-vectors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="create the Delta table with deletion vectors (default; --no-deletion-vectors: "
        "without, every MERGE rewrites the files it touches)",
    )
    args = parser.parse_args()
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    variants = {  # label -> (format, deletion vectors)
        "delta": ("delta", args.deletion_vectors),
        "delta-cow": ("delta", False),
        "parquet": ("parquet", False),
    }
    unknown = sorted(set(formats) - set(variants))
    if unknown:
        parser.error(f"--format: unknown {', '.join(unknown)}")

    data = records(args.windows, args.firings, args.replay)
    late_windows = random.Random(7).sample(
        range(args.windows), max(1, int(args.windows * args.late_fraction))
    )
    late = records(args.windows, 1, 0, only=sorted(late_windows), first_seq=args.firings)
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        asyncio.run(produce(broker.bootstrap_servers, "results", data))
        print(f"produced {len(data)} records in {time.perf_counter() - started:.1f}s")

        started = time.perf_counter()
        spark = build_session(
            args.master,
            {
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.memory": "2g",
                "spark.jars.ivySettings": str(IVY_SETTINGS),
            },
            delta=any(variants[f][0] == "delta" for f in formats),
        )
        spark.sparkContext.setLogLevel("ERROR")
        print(f"spark {spark.version} up in {time.perf_counter() - started:.1f}s")
        try:
            compactors = {
                f: Compactor(
                    spark,
                    CompactionConfig(
                        broker.bootstrap_servers,
                        ("results",),
                        f"{out}/{f}",
                        format=variants[f][0],
                        deletion_vectors=variants[f][1],
                    ),
                    progress=STOPWATCH.line,
                )
                for f in formats
            }
            walls: dict[tuple[str, str], float] = {}
            for f, compactor in compactors.items():
                print(f"{f}:")
                walls[f, "first"] = timed_run(compactor, "first run")[1]
                walls[f, "noop"] = timed_run(compactor, "nothing new")[1]
            asyncio.run(produce_more(broker.bootstrap_servers, "results", late))
            print(f"produced {len(late)} late firings over {len(late_windows)} old windows")
            for f, compactor in compactors.items():
                print(f"{f}:")
                walls[f, "late"] = timed_run(compactor, "1% late firings")[1]
            print("format     first run  nothing new  1% late  late/first")
            for f in formats:
                first, noop, upd = walls[f, "first"], walls[f, "noop"], walls[f, "late"]
                print(f"{f:10} {first:8.1f}s {noop:10.1f}s {upd:7.1f}s {upd / first:10.2f}")
            if {"delta", "parquet"} <= set(formats):
                ratio = walls["delta", "first"] / walls["parquet", "first"]
                print(f"delta / parquet, first run: {ratio:.2f}x")
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
