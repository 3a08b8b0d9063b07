"""Upsert streams (running aggregates, #50) compacted into their final table
(``--upsert``, Delta): after runs of upserts and tombstones over two topics (one typed
pipeline, one untyped), the table equals the fold of the topics (per key, the value of
its newest record, no row when that is a tombstone), read by Spark and by delta-rs's
QueryBuilder; deletes go through deletion vectors; a tombstone whose topic has no upsert
in the run finds its pipeline in the table; a window table, a Parquet output and a topic
of two pipelines are refused."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RustDeltaTable
from deltalake import QueryBuilder
from pyspark.sql import SparkSession

from service.compaction import CompactionConfig, Compactor
from service.compaction.errors import CompactionError
from service.compaction.upserts import one_pipeline_per_topic

from .conftest import T0, Tombstone, create_topic, on_apache_kafka_only, produce, record, upsert

pytestmark = [pytest.mark.spark, pytest.mark.integration]

Value = dict[str, Any] | Tombstone


def compactor(
    spark: SparkSession, bootstrap: str, topics: Sequence[str], output: Path, **options: Any
) -> Compactor:
    config = CompactionConfig(
        bootstrap_servers=bootstrap,
        topics=tuple(topics),
        output=str(output),
        upsert=True,
        max_records_per_split=options.pop("max_records_per_split", 40),
        result_schemas={"totals": "orders long, revenue double"},
        **options,
    )
    return Compactor(spark, config)


class Stream:
    """An upsert stream as a running aggregate writes it: seq per key from 0, again from
    0 after a delete; a delete only of a key that has a row."""

    def __init__(self, pipeline: str, seed: int) -> None:
        self.pipeline = pipeline
        self.random = random.Random(seed)
        self.seq: dict[str, int] = {}

    def batch(self, keys: Sequence[str], n: int, deletes: float) -> list[Value]:
        out: list[Value] = []
        for _ in range(n):
            key = self.random.choice(keys)
            if key in self.seq and self.random.random() < deletes:
                del self.seq[key]
                out.append(Tombstone(key))
                continue
            seq = self.seq[key] = self.seq.get(key, -1) + 1
            value = self.random.randint(1, 100)
            out.append(upsert(self.pipeline, key, seq, {"orders": seq + 1, "revenue": value}))
        return out


def fold(produced: Sequence[Value]) -> dict[str, tuple[int, int]]:
    """id -> (seq, orders) of each key's newest record, no entry when it is a tombstone:
    the final table (one topic per pipeline, records in produce order per key)."""
    table: dict[str, dict[str, Any]] = {}
    pipeline_of: dict[str, str] = {}
    for value in produced:
        if isinstance(value, Tombstone):
            for pipeline in set(pipeline_of.values()):
                table.pop(f"{pipeline}|{value.key}", None)
        else:
            pipeline_of[value["key"]] = value["pipeline"]
            table[value["id"]] = value
    return {i: (v["seq"], v["result"]["orders"]) for i, v in table.items()}


def as_fold(rows: Sequence[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)), "duplicate ids in the table"
    out = {}
    for row in rows:
        assert row["id"] == f"{row['pipeline']}|{row['key']}"
        if row["pipeline"] == "totals":
            orders = row["result"]["orders"]
            assert row["result_json"] is None
        else:
            orders = json.loads(row["result_json"])["orders"]
            assert row.get("result") is None
        out[row["id"]] = (row["seq"], orders)
    return out


def spark_rows(spark: SparkSession, output: Path) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").load(str(output))
    return [row.asDict(recursive=True) for row in frame.collect()]


def rust_rows(output: Path) -> list[dict[str, Any]]:
    """Read by delta-rs's QueryBuilder (DataFusion), which applies deletion vectors."""
    batches = QueryBuilder().register("t", RustDeltaTable(str(output))).execute("SELECT * FROM t")
    rows: list[dict[str, Any]] = pa.table(batches).to_pylist()
    return rows


def test_upserts_and_tombstones_compact_to_the_fold_of_the_topics(
    spark: SparkSession, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    topics = [f"{topic_name}-totals", f"{topic_name}-counts"]
    for topic in topics:
        create_topic(bootstrap_servers, topic, 2)
    totals, counts = Stream("totals", 1), Stream("counts", 2)
    keys = [f"k{i}" for i in range(12)]
    output = tmp_path / "table"
    job = compactor(spark, bootstrap_servers, topics, output)
    produced: dict[str, list[Value]] = {t: [] for t in topics}

    def runs() -> Iterator[dict[str, list[Value]]]:
        # a tombstone of a key never seen deletes nothing
        yield {
            topics[0]: [Tombstone("never"), *totals.batch(keys, 80, 0.2)],
            topics[1]: counts.batch(keys, 60, 0.2),
        }
        # the counts topic has tombstones only: their pipeline comes from the table
        gone = sorted(counts.seq)[:4]
        for key in gone:
            del counts.seq[key]
        yield {topics[0]: totals.batch(keys, 40, 0.3), topics[1]: [Tombstone(k) for k in gone]}
        # keys deleted come back, seq from 0
        yield {topics[0]: totals.batch(keys, 40, 0.1), topics[1]: counts.batch(keys, 30, 0.1)}

    deleted = 0
    for run, batches in enumerate(runs(), start=1):
        for topic, batch in batches.items():
            produce(bootstrap_servers, topic, batch, batch=7)
            produced[topic] += batch
        summary = job.run()
        assert summary.offsets_run == run, summary.text()
        assert summary.rows_read == sum(len(b) for b in batches.values())
        assert summary.rows_skipped == 0
        deleted += summary.rows_deleted
        expected = {**fold(produced[topics[0]]), **fold(produced[topics[1]])}
        assert as_fold(spark_rows(spark, output)) == expected, f"run {run}"
        assert as_fold(rust_rows(output)) == expected, f"run {run}"
    assert deleted > 0
    assert "rows deleted" in summary.text()

    table = RustDeltaTable(str(output))
    assert table.metadata().configuration.get("delta.enableDeletionVectors") == "true"
    assert table.metadata().partition_columns == ["pipeline"]
    merges = [h for h in table.history() if h["operation"] == "MERGE"]
    assert len(merges) == 2
    metrics = [h["operationMetrics"] for h in merges]
    vectors = sum(int(m.get("numTargetDeletionVectorsAdded", 0)) for m in metrics)
    assert vectors > 0, merges

    again = job.run()
    assert (again.rows_read, again.offsets_run, again.table_version) == (0, None, None)


def test_window_results_in_an_upsert_topic_are_skipped_and_tables_do_not_mix(
    spark: SparkSession, broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 1)
    produce(
        bootstrap_servers,
        topic_name,
        [upsert("counts", "a", 0, {"orders": 1}), record("w", "a", T0, 0, {"n": 1}), b"junk"],
    )
    output = tmp_path / "table"
    summary = compactor(spark, bootstrap_servers, [topic_name], output).run()
    assert (summary.rows_read, summary.rows_skipped, summary.rows_changed) == (3, 2, 1)
    assert as_fold(rust_rows(output)) == {"counts|a": (0, 1)}
    # Nothing to stage: Delta commits nothing, so no offsets either; the next run reads
    # those records again, with the new upsert.
    produce(bootstrap_servers, topic_name, [b"junk"])
    skipped = compactor(spark, bootstrap_servers, [topic_name], output).run()
    assert (skipped.rows_read, skipped.rows_skipped, skipped.offsets_run) == (1, 1, None)
    produce(bootstrap_servers, topic_name, [upsert("counts", "b", 0, {"orders": 2})])
    again = compactor(spark, bootstrap_servers, [topic_name], output).run()
    assert (again.rows_read, again.rows_skipped, again.offsets_run) == (2, 1, 2)
    assert as_fold(rust_rows(output)) == {"counts|a": (0, 1), "counts|b": (0, 2)}
    windows = Compactor(spark, CompactionConfig(bootstrap_servers, (topic_name,), str(output)))
    with pytest.raises(CompactionError, match="is the table of upsert results, not of window"):
        windows.plan()


def test_upserts_need_delta_and_a_topic_holds_one_pipeline() -> None:
    with pytest.raises(CompactionError, match="--upsert needs --format delta"):
        CompactionConfig("b:9092", ("t",), "/tmp/x", format="parquet", upsert=True)
    assert one_pipeline_per_topic([("t", "a"), ("u", "b"), ("t", "a")]) == {"t": "a", "u": "b"}
    with pytest.raises(CompactionError, match="t: a, b"):
        one_pipeline_per_topic([("t", "a"), ("t", "b")])
