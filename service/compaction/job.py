"""Compaction as DataFrame transforms: parse, keep the newest firing, merge, write.

Pure Spark (no Kafka): the input is any DataFrame with Spark's Kafka source columns, so
the logic is testable on hand-made frames.

Output rows (:data:`TABLE_COLUMNS`): the contract's result record
(:mod:`service.contract.result_record`), typed, plus where the winning record came from,
partitioned by ``pipeline`` and ``window_date`` (UTC date of the window start).
``result`` is a struct when the pipeline's result schema is known, JSON text otherwise.

The newest record of a window (``id``) is the one with the highest *rank*
``(seq, source_offset, source_partition, source_topic)``: newest ``seq``, and on a tie
(a replay wrote the same firing again) the later record. Ranks are unique per record, so
the winner does not depend on the order Spark sees the rows in, and reading a record
twice picks the same winner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType

from service.contract.result_record import WINDOW_FIELDS, WINDOW_RESULT_FIELDS

PARTITION_COLUMNS = ("pipeline", "window_date")
TABLE_COLUMNS = (
    "pipeline",
    "key",
    "window_start",
    "window_end",
    "result",
    "fire",
    "seq",
    "watermark",
    "id",
    "source_topic",
    "source_partition",
    "source_offset",
    "window_date",
)
RANK_COLUMNS = ("seq", "source_offset", "source_partition", "source_topic")

_SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "integer": LongType(),
    # A string field takes an object's JSON text as it is: typed later, per pipeline.
    "object": StringType(),
    "window": StructType([StructField(name, LongType()) for name in WINDOW_FIELDS]),
}

RECORD_SCHEMA = StructType(
    [StructField(name, _SPARK_TYPES[kind]) for name, kind in WINDOW_RESULT_FIELDS.items()]
)
"""A window result record (contract v1) as Kafka carries it: the fields the sink writes
(:mod:`service.contract.result_record`), typed for Spark."""

_MS_PER_DAY = 86_400_000


def parse_records(kafka: DataFrame) -> DataFrame:
    """Kafka records -> one row per window result record, with :data:`TABLE_COLUMNS`
    (``result`` as JSON text) and a boolean ``valid``: false for values that are not
    window result records (not JSON, keyed-process records, missing fields)."""
    r = F.from_json(F.col("value").cast("string"), RECORD_SCHEMA)
    parsed = kafka.select(
        r.alias("r"),
        F.col("topic").alias("source_topic"),
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
    )
    start = F.col("r.window.start")
    valid = (
        F.col("r.pipeline").isNotNull()
        & F.col("r.id").isNotNull()
        & start.isNotNull()
        & F.col("r.window.end").isNotNull()
        & F.col("r.seq").isNotNull()
    )
    return parsed.select(
        F.col("r.pipeline").alias("pipeline"),
        F.col("r.key").alias("key"),
        F.timestamp_millis(start).alias("window_start"),
        F.timestamp_millis(F.col("r.window.end")).alias("window_end"),
        F.col("r.result").alias("result"),
        F.col("r.fire").alias("fire"),
        F.col("r.seq").alias("seq"),
        F.col("r.watermark").alias("watermark"),
        F.col("r.id").alias("id"),
        "source_topic",
        "source_partition",
        "source_offset",
        F.date_from_unix_date(F.floor(start / _MS_PER_DAY).cast("int")).alias("window_date"),
        F.coalesce(valid, F.lit(False)).alias("valid"),
    )


def rank(prefix: str = "") -> Column:
    """The ordering of records of one window: higher is newer (see the module docstring)."""
    return F.struct(*(F.col(f"{prefix}{c}").alias(c) for c in RANK_COLUMNS))


def newest_per_id(records: DataFrame) -> DataFrame:
    """One row per ``id``: the record with the highest :func:`rank`."""
    columns = [c for c in records.columns if c != "id"]
    winner = F.max_by(F.struct(*columns), rank())
    return records.groupBy("id").agg(winner.alias("w")).select("id", "w.*").select(*records.columns)


def newer_than(candidates: DataFrame, existing: DataFrame) -> DataFrame:
    """The rows of ``candidates`` (one per id) that beat the table's row of the same id,
    or whose id the table does not hold: what a merge would change."""
    held = existing.select(F.col("id"), rank().alias("held_rank"))
    joined = candidates.join(held, on="id", how="left")
    wins = F.col("held_rank").isNull() | (rank() > F.col("held_rank"))
    return joined.where(wins).select(*candidates.columns)


def merge(existing: DataFrame, changes: DataFrame) -> DataFrame:
    """``existing`` with the rows of ``changes`` replacing (or adding) theirs by id."""
    kept = existing.join(changes.select("id"), on="id", how="left_anti")
    return kept.select(*TABLE_COLUMNS).unionByName(changes.select(*TABLE_COLUMNS))


def convert_result(frame: DataFrame, target: DataType) -> DataFrame:
    """``frame`` with ``result`` in the ``target`` type: a struct parsed from JSON text, or
    JSON text from a struct, or a struct of another shape re-parsed through JSON."""
    current = frame.schema["result"].dataType
    if current == target:
        return frame
    column = F.col("result")
    text = column if isinstance(current, StringType) else F.to_json(column)
    if isinstance(target, StringType):
        return frame.withColumn("result", text)
    if not isinstance(target, StructType):
        raise TypeError(f"result must be typed as a struct or a string, not {target}")
    return frame.withColumn("result", F.from_json(text, target))


def write_partitions(table: DataFrame, output: str, *, max_records_per_file: int = 0) -> None:
    """Overwrite exactly the ``(pipeline, window_date)`` partitions present in ``table``
    (dynamic partition overwrite; the others keep their files), one file per partition
    (up to ``max_records_per_file`` rows each, 0 = no limit), rows sorted by id."""
    (
        table.select(*TABLE_COLUMNS)
        .repartition(*PARTITION_COLUMNS)
        .sortWithinPartitions(*PARTITION_COLUMNS, "id")
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .option("maxRecordsPerFile", max_records_per_file)
        .partitionBy(*PARTITION_COLUMNS)
        .parquet(output)
    )


def table_for_partitions(frame: DataFrame, pipeline: str) -> DataFrame:
    """Rows read back from partition directories of one pipeline, with the partition
    columns re-derived from the data (not from directory names, whose types Spark would
    have to guess)."""
    data = frame.drop(*PARTITION_COLUMNS)
    start_ms = F.unix_millis(F.col("window_start"))
    return data.withColumns(
        {
            "pipeline": F.lit(pipeline),
            "window_date": F.date_from_unix_date(F.floor(start_ms / _MS_PER_DAY).cast("int")),
        }
    ).select(*TABLE_COLUMNS)


def count_by_partition(frame: DataFrame) -> dict[tuple[str, object], int]:
    """Rows per ``(pipeline, window_date)`` in ``frame`` (one small collect)."""
    rows = frame.groupBy(*PARTITION_COLUMNS).count().collect()
    return {(str(row["pipeline"]), row["window_date"]): int(row["count"]) for row in rows}


def by_pipeline(pairs: Iterable[tuple[str, object]]) -> dict[str, list[object]]:
    """``(pipeline, day)`` pairs grouped by pipeline, days sorted."""
    grouped: dict[str, list[object]] = {}
    for pipeline, day in sorted(pairs, key=lambda pair: (pair[0], str(pair[1]))):
        grouped.setdefault(pipeline, []).append(day)
    return grouped


def delta_rows(
    winners: DataFrame,
    types: Mapping[str, StructType],
    result_type: StructType | None,
    columns: Sequence[str] = TABLE_COLUMNS,
) -> DataFrame:
    """``winners`` (``result`` as JSON text) as rows of the Delta table, whose one schema
    serves every pipeline: ``result`` is a struct of ``result_type`` (the union of the
    typed pipelines' fields) for the pipelines in ``types``, each parsing its own fields
    (the others null), and ``result_json`` is the JSON text for the other pipelines.
    Without ``result_type`` (nothing typed yet) there is no ``result`` column.
    ``columns``: the table's (an upsert table's are
    :data:`service.compaction.upserts.STAGED_COLUMNS`), ``result`` among them."""
    text = F.col("result")
    typed = F.col("pipeline").isin(list(types)) if types else F.lit(False)
    values: dict[str, Column] = {"result_json": F.when(~typed, text)}
    if result_type is not None:
        value: Column = F.lit(None).cast(result_type)
        for pipeline, own in sorted(types.items()):
            names = set(own.fieldNames())
            parsed = F.from_json(
                text, StructType([f for f in result_type.fields if f.name in names])
            )
            struct = F.struct(
                *[
                    (parsed[f.name] if f.name in names else F.lit(None).cast(f.dataType)).alias(
                        f.name
                    )
                    for f in result_type.fields
                ]
            )
            value = F.when((F.col("pipeline") == pipeline) & text.isNotNull(), struct).otherwise(
                value
            )
        values["result"] = value
    ordered: list[str] = []
    for name in columns:
        ordered += (
            [c for c in ("result", "result_json") if c in values] if name == "result" else [name]
        )
    return winners.withColumns(values).select(*ordered)
