"""The compaction job end to end into a Parquet dataset (``--format parquet``), one shared
SparkSession: what is read (records, replays, offsets, high watermarks) on each broker,
the table's side (recovery, partitions rewritten, result typing) on Apache Kafka."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructType

from service.compaction import CompactionConfig, Compactor
from service.compaction.offsets import OffsetStore

from .conftest import DAY_MS, T0, create_topic, on_apache_kafka_only, produce, record, snapshot

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def compactor(
    spark: SparkSession, bootstrap_servers: str, topics: list[str], output: Path, **options: Any
) -> Compactor:
    config = CompactionConfig(
        bootstrap_servers=bootstrap_servers,
        topics=tuple(topics),
        output=str(output),
        format="parquet",
        max_records_per_split=options.pop("max_records_per_split", 40),
        **options,
    )
    return Compactor(spark, config)


def read_pipeline(spark: SparkSession, output: Path, pipeline: str) -> DataFrame:
    return spark.read.option("basePath", str(output)).parquet(f"{output}/pipeline={pipeline}")


def rows_by_id(frame: DataFrame) -> dict[str, dict[str, Any]]:
    return {row["id"]: row.asDict(recursive=True) for row in frame.collect()}


def test_firings_and_duplicates_collapse_to_the_newest_seq(
    spark: SparkSession, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(bootstrap_servers, topic_name, 2)
    firings = [
        record("rev", key, T0 + w * 60_000, seq, {"orders": seq + 1}, fire=fire)
        for key in ("u1", "u2", "u3")
        for w in range(3)
        for seq, fire in enumerate(["early", "early", "on_time"])
    ]
    replayed = firings[::2]  # a replay writes some firings again
    produce(bootstrap_servers, topic_name, [*firings, *replayed, b"not json"], batch=7)
    summary = compactor(spark, bootstrap_servers, [topic_name], tmp_path).run()

    assert summary.rows_read == len(firings) + len(replayed) + 1
    assert summary.rows_skipped == 1
    assert summary.windows == summary.rows_written == 9
    table = read_pipeline(spark, tmp_path, "rev")
    rows = rows_by_id(table)
    assert len(rows) == 9
    for row in rows.values():
        assert (row["seq"], row["fire"], row["result"]) == (2, "on_time", '{"orders":3}')
        assert row["source_topic"] == topic_name
    row = rows[f"rev|u1|{T0}|{T0 + 60_000}"]
    assert row["window_start"].isoformat() == "2023-11-15T00:00:00"
    assert str(row["window_date"]) == "2023-11-15"
    assert row["watermark"] == T0 + 59_999
    types = {f.name: f.dataType.simpleString() for f in table.schema.fields}
    assert types["window_start"] == types["window_end"] == "timestamp"
    assert types["seq"] == types["watermark"] == types["source_offset"] == "bigint"


def test_on_a_seq_tie_the_newer_offset_wins(
    spark: SparkSession, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(bootstrap_servers, topic_name, 1)
    older = record("tie", "k", T0, 1, {"v": "older"})
    newer = record("tie", "k", T0, 1, {"v": "newer"})
    produce(bootstrap_servers, topic_name, [older, record("tie", "k", T0, 0, {"v": "x"}), newer])
    compactor(spark, bootstrap_servers, [topic_name], tmp_path).run()
    (row,) = read_pipeline(spark, tmp_path, "tie").collect()
    assert (row["result"], row["source_offset"]) == ('{"v":"newer"}', 2)


def test_a_second_run_without_new_records_changes_nothing(
    spark: SparkSession, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(bootstrap_servers, topic_name, 2)
    produce(
        bootstrap_servers, topic_name, [record("p", f"k{i}", T0, 0, {"n": i}) for i in range(30)]
    )
    job = compactor(spark, bootstrap_servers, [topic_name], tmp_path)
    first = job.run()
    assert first.offsets_run == 1
    before = snapshot(tmp_path)
    second = job.run()
    assert (second.rows_read, second.rows_written, second.offsets_run) == (0, 0, None)
    assert snapshot(tmp_path) == before


def test_interrupted_run_then_full_run_gives_the_clean_table(
    spark: SparkSession, broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 2)
    batch1 = [record("p", f"k{i}", T0 + (i % 3) * DAY_MS, 0, {"n": i}) for i in range(40)]
    batch2 = [record("p", f"k{i}", T0 + (i % 3) * DAY_MS, 1, {"n": -i}) for i in range(0, 40, 3)]
    produce(bootstrap_servers, topic_name, batch1)

    crashed = compactor(spark, bootstrap_servers, [topic_name], tmp_path / "crashed")
    crashed.compact(crashed.plan())  # data written, the offsets never stored
    assert OffsetStore(spark, str(tmp_path / "crashed")).latest() is None
    produce(bootstrap_servers, topic_name, batch2)
    recovered = crashed.run()
    assert recovered.rows_read == len(batch1) + len(batch2)

    compactor(spark, bootstrap_servers, [topic_name], tmp_path / "clean").run()
    crashed_rows = rows_by_id(read_pipeline(spark, tmp_path / "crashed", "p"))
    clean_rows = rows_by_id(read_pipeline(spark, tmp_path / "clean", "p"))
    assert crashed_rows == clean_rows
    assert len(clean_rows) == 40
    assert sum(r["seq"] for r in clean_rows.values()) == len(batch2)
    stored = OffsetStore(spark, str(tmp_path / "crashed")).latest()
    assert stored is not None
    assert sum(stored.offsets.values()) == len(batch1) + len(batch2)


def test_partitions_without_new_records_keep_their_files(
    spark: SparkSession, broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 2)
    days = [T0, T0 + DAY_MS, T0 + 2 * DAY_MS]
    produce(
        bootstrap_servers,
        topic_name,
        [record("p", f"k{i}", d, 0, {"n": i}) for d in days for i in range(5)],
    )
    job = compactor(spark, bootstrap_servers, [topic_name], tmp_path)
    job.run()
    before = snapshot(tmp_path / "pipeline=p")
    # New firings for the second day only.
    produce(
        bootstrap_servers,
        topic_name,
        [record("p", "k1", days[1], 1, {"n": 100}), record("p", "k2", days[1], 2, {"n": 7})],
    )
    summary = job.run()
    assert summary.partitions_touched == ["pipeline=p/window_date=2023-11-16"]
    after = snapshot(tmp_path / "pipeline=p")
    for day in ("2023-11-15", "2023-11-17"):
        assert {k: v for k, v in after.items() if day in k} == {
            k: v for k, v in before.items() if day in k
        }
    assert {k for k in after if "2023-11-16" in k} != {k for k in before if "2023-11-16" in k}
    assert sum(1 for k in after if "2023-11-16" in k and k.endswith(".parquet")) == 1
    rows = rows_by_id(read_pipeline(spark, tmp_path, "p"))
    assert len(rows) == 15
    assert rows[f"p|k1|{days[1]}|{days[1] + 60_000}"]["result"] == '{"n":100}'


def test_result_is_a_struct_when_its_schema_is_known_and_json_text_otherwise(
    spark: SparkSession, broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 1)
    values = [
        record("typed", "a", T0, 0, {"orders": 3, "revenue": 42.5}),
        record("loose", "a", T0, 0, {"orders": 3, "revenue": 42.5}),
        record("guessed", "a", T0, 0, {"orders": 3, "tags": ["x"]}),
    ]
    produce(bootstrap_servers, topic_name, values)
    compactor(
        spark,
        bootstrap_servers,
        [topic_name],
        tmp_path,
        result_schemas={"typed": "orders long, revenue double"},
    ).run()
    typed = read_pipeline(spark, tmp_path, "typed")
    assert typed.schema["result"].dataType == StructType.fromDDL("orders long, revenue double")
    assert typed.collect()[0]["result"].asDict() == {"orders": 3, "revenue": 42.5}
    loose = read_pipeline(spark, tmp_path, "loose")
    assert loose.schema["result"].dataType == StringType()
    assert loose.collect()[0]["result"] == '{"orders":3,"revenue":42.5}'

    inferred_out = tmp_path / "inferred"
    inferred = compactor(
        spark, bootstrap_servers, [topic_name], inferred_out, infer_result_schema=True
    ).run()
    assert (inferred.rows_read, inferred.rows_changed) == (3, 3), inferred.text()
    guessed = read_pipeline(spark, inferred_out, "guessed")
    assert (
        guessed.schema["result"].dataType.simpleString()
        == "struct<orders:bigint,tags:array<string>>"
    )
