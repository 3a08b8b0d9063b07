"""``--source kafka`` (Spark's own Kafka source) against ``--source python`` (the bundled
Python data source): the same topic gives byte-identical Parquet files, and both read
``read_committed`` (aborted transactions never reach the table, and a transaction still
open when the job plans is not waited for)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from service.compaction.compactor import CompactionConfig, Compactor, Summary
from service.compaction.offsets import OffsetStore

from .conftest import DAY_MS, T0, create_topic, produce, record

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def run(spark: SparkSession, bootstrap: str, topic: str, output: Path, source: str) -> Summary:
    config = CompactionConfig(
        bootstrap_servers=bootstrap,
        topics=(topic,),
        output=str(output),
        format="parquet",
        source=source,
        max_records_per_split=40,
        result_schemas={"typed": "orders long"},
    )
    return Compactor(spark, config).run()


def parquet_files(output: Path) -> dict[str, list[bytes]]:
    """Table partition -> the bytes of its Parquet files (their names hold a random id)."""
    files: dict[str, list[bytes]] = {}
    for path in sorted(output.rglob("*.parquet")):
        files.setdefault(str(path.parent.relative_to(output)), []).append(path.read_bytes())
    return {partition: sorted(contents) for partition, contents in files.items()}


def both_sources(
    spark: SparkSession, bootstrap: str, topic: str, tmp_path: Path
) -> tuple[Summary, dict[str, list[bytes]]]:
    """Run the job once per source on ``topic``; the tables must be the same bytes and
    the stored offsets the same. Returns the summary and the files."""
    summaries = {s: run(spark, bootstrap, topic, tmp_path / s, s) for s in ("python", "kafka")}
    tables = {s: parquet_files(tmp_path / s) for s in summaries}
    assert tables["python"], "nothing written"
    assert tables["kafka"] == tables["python"]
    stored = {s: OffsetStore(spark, str(tmp_path / s)).latest() for s in summaries}
    assert stored["python"] is not None and stored["kafka"] is not None
    assert stored["kafka"].offsets == stored["python"].offsets
    python, kafka = summaries["python"], summaries["kafka"]
    assert (kafka.rows_read, kafka.rows_skipped, kafka.windows, kafka.rows_written) == (
        python.rows_read,
        python.rows_skipped,
        python.windows,
        python.rows_written,
    )
    return python, tables["python"]


def test_spark_s_kafka_source_writes_the_same_parquet_as_the_python_source(
    spark: SparkSession, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(bootstrap_servers, topic_name, 3)
    firings = [
        record(pipeline, key, T0 + day * DAY_MS + w * 60_000, seq, {"orders": seq + w})
        for pipeline in ("typed", "json")
        for key in ("u1", "u2", "u3", "u4")
        for day in range(2)
        for w in range(3)
        for seq in range(2)
    ]
    replayed = firings[::3]
    produce(bootstrap_servers, topic_name, [*firings, *replayed, b"not json"], batch=11)
    summary, tables = both_sources(spark, bootstrap_servers, topic_name, tmp_path)
    assert summary.rows_read == len(firings) + len(replayed) + 1
    assert summary.rows_written == len(firings) // 2
    assert len(tables) == 4  # two pipelines, two days


def transactional_producer(bootstrap: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"cmp-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    return producer


def send(producer: Producer, topic: str, values: list[dict[str, Any]]) -> None:
    for i, value in enumerate(values):
        producer.produce(
            topic, orjson.dumps(value), key=str(value["key"]).encode(), partition=i % 2
        )


@pytest.mark.requires_broker("transactions")
def test_both_sources_read_committed(
    spark: SparkSession, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    """Committed, aborted, committed, then one left open: the aborted firings (seq 9,
    which would win) and the open one never reach either table."""
    create_topic(bootstrap_servers, topic_name, 2)
    committed = [record("typed", f"u{i}", T0, 0, {"orders": i}) for i in range(10)]
    aborted = [record("typed", f"u{i}", T0, 9, {"orders": -1}) for i in range(10)]
    later = [record("typed", f"u{i}", T0 + 60_000, 1, {"orders": 2 * i}) for i in range(10)]
    pending = [record("typed", "u0", T0 + 120_000, 5, {"orders": -5})]
    producer = transactional_producer(bootstrap_servers)
    open_one = transactional_producer(bootstrap_servers)
    try:
        for values, commit in ((committed, True), (aborted, False), (later, True)):
            producer.begin_transaction()
            send(producer, topic_name, values)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.flush(30)
                producer.abort_transaction(30)
        open_one.begin_transaction()
        send(open_one, topic_name, pending)
        assert open_one.flush(30) == 0
        summary, _ = both_sources(spark, bootstrap_servers, topic_name, tmp_path)
    finally:
        open_one.abort_transaction(30)
    assert summary.rows_read == len(committed) + len(later)
    rows = spark.read.parquet(str(tmp_path / "kafka" / "pipeline=typed")).collect()
    assert sorted((r["key"], r["seq"], r["result"]["orders"]) for r in rows) == sorted(
        [(f"u{i}", 0, i) for i in range(10)] + [(f"u{i}", 1, 2 * i) for i in range(10)]
    )
