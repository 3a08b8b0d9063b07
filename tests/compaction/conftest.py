"""Fixtures of the compaction tests: one local SparkSession for the whole session (with
Spark's Kafka source and Delta Lake, from the jars ``make spark-jars`` resolved), topics
on each broker; each test writes its own table under its own ``tmp_path``."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("confluent_kafka")

from pyspark.sql import SparkSession  # noqa: E402

from service.compaction.cli import build_session  # noqa: E402
from service.compaction.delta_session import SESSION_SETTINGS  # noqa: E402

from .spark_jars import read_jars  # noqa: E402

DAY_MS = 86_400_000
T0 = 1_700_006_400_000  # 2023-11-15T00:00:00Z
_names = itertools.count()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "1g",
            "spark.jars": ",".join(read_jars()),
            # Small tables: Delta's log replay in 2 tasks, not 50.
            "spark.databricks.delta.snapshotPartitions": "2",
            **SESSION_SETTINGS,
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def on_apache_kafka_only(broker_name: str) -> None:
    """For the tests of the table's side (its files, its commits, the job's options): they
    depend on no broker, so they run on Apache Kafka only to keep the suite short; the
    tests of what is read (records, offsets, transactions) run on both brokers."""
    if broker_name != "kafka":
        pytest.skip("the table's side, checked on Apache Kafka")


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40]
    return f"cmp-{base}-{next(_names)}"


def record(
    pipeline: str,
    key: str,
    start: int,
    seq: int,
    result: Any,
    *,
    size: int = 60_000,
    fire: str = "on_time",
) -> dict[str, Any]:
    """A window result record as contract.md shows it."""
    return {
        "pipeline": pipeline,
        "key": key,
        "window": {"start": start, "end": start + size},
        "result": result,
        "fire": fire,
        "seq": seq,
        "watermark": start + size - 1,
        "id": f"{pipeline}|{key}|{start}|{start + size}",
    }


def upsert(pipeline: str, key: str, seq: int, result: Any) -> dict[str, Any]:
    """A running aggregate's upsert record (contract/result_record.py's
    UPSERT_RESULT_FIELDS)."""
    return {
        "pipeline": pipeline,
        "key": key,
        "result": result,
        "op": "upsert",
        "seq": seq,
        "id": f"{pipeline}|{key}",
    }


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A delete of an upsert stream: the key, no value."""

    key: str


def create_topic(bootstrap_servers: str, topic: str, partitions: int) -> None:
    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            await admin.close()

    asyncio.run(create())


def produce(
    bootstrap_servers: str,
    topic: str,
    values: Sequence[dict[str, Any] | bytes | Tombstone],
    *,
    partition: int | None = None,
    batch: int = 50,
) -> None:
    """Produce ``values`` (keyed by their ``key``; raw bytes keyed ``raw``; a
    :class:`Tombstone` as its key with no value), flushing every ``batch`` records so the
    log holds several record batches. Without ``partition``: spread by key hash (a key's
    records in one partition)."""

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=1)
        await producer.start()
        try:
            for i, value in enumerate(values):
                body: bytes | None
                if isinstance(value, bytes):
                    key, body = b"raw", value
                elif isinstance(value, Tombstone):
                    key, body = value.key.encode(), None
                else:
                    key, body = str(value["key"]).encode(), orjson.dumps(value)
                await producer.send(topic, body, key=key, partition=partition, timestamp_ms=T0 + i)
                if (i + 1) % batch == 0:
                    await producer.flush()
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(send())


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), Spark's checksums excluded."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".crc")
    }
