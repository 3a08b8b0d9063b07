"""An upsert stream (a running aggregate's results, #50) as DataFrame transforms: parse,
keep the newest record per Kafka key, name the pipeline of the tombstones.

Pure Spark (no Kafka), as :mod:`service.compaction.job` is for window results.

An upsert topic is a table as a log: the Kafka key is the group key, an upsert's value
is :data:`~service.contract.result_record.UPSERT_RESULT_FIELDS` (``op`` = ``upsert``),
and a delete is a tombstone (the same Kafka key, no value). The newest record of a key
is the one at the highest offset (a key's records are in one partition; ``seq`` starts
at 0 again after a delete, so it cannot order them): a fold of the topic keeps, per key,
the value of its newest record, or no row when that is a tombstone.

A tombstone does not say which pipeline wrote it. An upsert topic holds one pipeline's
table (a compacted topic keyed by the group key cannot hold two), so a tombstone's
pipeline is the one of the topic's upserts (:func:`topic_pipelines`), and its ``id`` is
``<pipeline>|<key>``, as its upserts' are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from service.compaction.errors import CompactionError
from service.contract.result_record import UPSERT_OP, UPSERT_RESULT_FIELDS

DELETE_OP = "delete"
"""The ``op`` a tombstone gets in the staged rows (the ``MERGE`` deletes on it)."""

PARTITION_COLUMNS = ("pipeline",)
TABLE_COLUMNS = (
    "pipeline",
    "key",
    "result",
    "seq",
    "id",
    "source_topic",
    "source_partition",
    "source_offset",
)
"""The upsert table's columns (``result`` typed as the window table's, see
:func:`service.compaction.job.delta_rows`): one row per key, its newest upsert."""
STAGED_COLUMNS = (*TABLE_COLUMNS, "op")
"""The rows a run merges: the table's, and ``op`` (``upsert`` or ``delete``)."""

_SPARK_TYPES = {"string": StringType(), "integer": LongType(), "object": StringType()}
RECORD_SCHEMA = StructType(
    [StructField(name, _SPARK_TYPES[kind]) for name, kind in UPSERT_RESULT_FIELDS.items()]
)
"""An upsert record's value as Kafka carries it, typed for Spark (``result`` as text)."""


def parse_records(kafka: DataFrame) -> DataFrame:
    """Kafka records -> :data:`STAGED_COLUMNS` plus ``valid``: an upsert (``op`` =
    ``upsert``, every field there), a tombstone (no value, a key: ``op`` = ``delete``,
    only ``key`` and the source columns set), or not valid (anything else: a window
    result, not JSON, a record without a key). ``key`` is the Kafka key as text (the
    sink writes the group key, UTF-8)."""
    r = F.from_json(F.col("value").cast("string"), RECORD_SCHEMA)
    kafka_key = F.col("key").cast("string")
    tombstone = F.col("value").isNull() & F.col("key").isNotNull()
    upsert = (
        F.col("key").isNotNull()
        & (r["op"] == F.lit(UPSERT_OP))
        & r["pipeline"].isNotNull()
        & r["id"].isNotNull()
        & r["seq"].isNotNull()
    )
    is_upsert = F.coalesce(upsert, F.lit(False))
    op = F.when(tombstone, F.lit(DELETE_OP)).when(is_upsert, F.lit(UPSERT_OP))
    return kafka.select(
        F.when(is_upsert, r["pipeline"]).alias("pipeline"),
        kafka_key.alias("key"),
        F.when(is_upsert, r["result"]).alias("result"),
        F.when(is_upsert, r["seq"]).alias("seq"),
        F.when(is_upsert, r["id"]).alias("id"),
        F.col("topic").alias("source_topic"),
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
        op.alias("op"),
        op.isNotNull().alias("valid"),
    )


def newest_per_key(records: DataFrame) -> DataFrame:
    """One row per ``(source_topic, key)``: the record at the highest offset (on the
    same offset in two partitions, which a key's records never are, the higher
    partition, so the winner never depends on Spark's order)."""
    columns = [c for c in records.columns if c not in ("source_topic", "key")]
    newest = F.max_by(F.struct(*columns), F.struct("source_offset", "source_partition"))
    return (
        records.groupBy("source_topic", "key")
        .agg(newest.alias("w"))
        .select("source_topic", "key", "w.*")
        .select(*records.columns)
    )


def topic_pipelines(records: DataFrame) -> dict[str, str]:
    """Topic -> the pipeline whose upserts it holds, from the upserts of ``records`` (one
    small collect); :class:`CompactionError` when a topic holds two pipelines' upserts."""
    pairs = (
        records.where(F.col("op") == F.lit(UPSERT_OP))
        .select("source_topic", "pipeline")
        .distinct()
        .collect()
    )
    return one_pipeline_per_topic((str(r["source_topic"]), str(r["pipeline"])) for r in pairs)


def one_pipeline_per_topic(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``(topic, pipeline)`` pairs -> a topic's one pipeline; raises on two."""
    found: dict[str, set[str]] = {}
    for topic, pipeline in pairs:
        found.setdefault(topic, set()).add(pipeline)
    shared = {t: sorted(ps) for t, ps in found.items() if len(ps) > 1}
    if shared:
        named = "; ".join(f"{t}: {', '.join(ps)}" for t, ps in sorted(shared.items()))
        raise CompactionError(
            f"an upsert topic holds one pipeline's table, these hold several: {named}"
        )
    return {t: next(iter(ps)) for t, ps in found.items()}


def name_tombstones(winners: DataFrame, pipelines: Mapping[str, str]) -> DataFrame:
    """``winners`` with each tombstone's ``pipeline`` (its topic's, from ``pipelines``)
    and ``id`` (``<pipeline>|<key>``) filled in; tombstones of a topic whose pipeline is
    unknown (no upsert of it was ever compacted: they have no row to delete) dropped."""
    if pipelines:
        pairs: list[Column] = []
        for topic, name in sorted(pipelines.items()):
            pairs += [F.lit(topic), F.lit(name)]
        of_topic: Column = F.create_map(*pairs)[F.col("source_topic")]
    else:
        of_topic = F.lit(None).cast("string")
    pipeline = F.coalesce(F.col("pipeline"), of_topic)
    named = winners.withColumn("pipeline", pipeline).withColumn(
        "id", F.coalesce(F.col("id"), F.concat(F.col("pipeline"), F.lit("|"), F.col("key")))
    )
    return named.where(F.col("pipeline").isNotNull())


def count_by_pipeline(frame: DataFrame) -> dict[str, int]:
    """Rows per pipeline in ``frame`` (one small collect)."""
    rows = frame.groupBy("pipeline").count().collect()
    return {str(row["pipeline"]): int(row["count"]) for row in rows}
