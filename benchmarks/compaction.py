"""Compaction benchmark: 1M result records from Kafka into the Parquet table.

Run: ``python -m benchmarks.compaction [--windows N] [--firings N] [--master local[2]]``.

Produces ``windows x firings`` result records (default 240,000 x 4 = 960,000) plus a
replay of the first 40,000 (duplicates with the same seq at newer offsets): 1,000,000
records of ~230 bytes, two pipelines over ten days of windows, keyed by the pipeline
key into a 4-partition topic on an embedded broker (built with ``create_batch`` /
``send_batch``, 1 MiB batches). Then one compaction run (plan, read through the Python
data source, dedupe, write, store offsets) into a fresh directory, timed end to end
after the SparkSession is up, and a second run with nothing new (the no-op path).
Prints rows/s read and written and the wall times.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import zlib

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from service.compaction import CompactionConfig, Compactor
from service.compaction.cli import build_session
from service.runtime.kafka.embedded_broker import EmbeddedBroker

PARTITIONS = 4
T0 = 1_700_006_400_000
SIZE_MS = 60_000
KEYS = 1_000


def records(windows: int, firings: int, replay: int) -> list[tuple[int, bytes, bytes]]:
    """``(partition, key, value)``, firings of each window in seq order, replay last."""
    out = []
    per_day = max(1, windows // 10)
    for seq in range(firings):
        fire = "on_time" if seq == 0 else "late"
        for w in range(windows):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=240_000)
    parser.add_argument("--firings", type=int, default=4)
    parser.add_argument("--replay", type=int, default=40_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    data = records(args.windows, args.firings, args.replay)
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        asyncio.run(produce(broker.bootstrap_servers, "results", data))
        print(f"produced {len(data)} records in {time.perf_counter() - started:.1f}s")

        started = time.perf_counter()
        spark = build_session(
            args.master,
            {"spark.ui.showConsoleProgress": "false", "spark.driver.memory": "2g"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        print(f"spark {spark.version} up in {time.perf_counter() - started:.1f}s")
        try:
            config = CompactionConfig(broker.bootstrap_servers, ("results",), out)
            started = time.perf_counter()
            compactor = Compactor(
                spark,
                config,
                progress=lambda line: print(f"  {time.perf_counter() - started:6.1f}s {line}"),
            )
            summary = compactor.run()
            wall = time.perf_counter() - started
            print(summary.text())
            print(
                f"first run: {wall:.1f}s wall, {summary.rows_read / wall:,.0f} rows/s read, "
                f"{summary.rows_written / wall:,.0f} rows/s written"
            )
            started = time.perf_counter()
            again = compactor.run()
            print(
                f"second run (nothing new): {time.perf_counter() - started:.1f}s, "
                f"{again.rows_written} rows written"
            )
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
