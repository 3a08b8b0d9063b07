"""One compaction run: plan the offset ranges, compact them into the table, store offsets.

The steps are public so a crash between them can be reproduced (tests do):
:meth:`Compactor.plan` (driver, reads the stored offsets and the high watermarks),
:meth:`Compactor.compact` (reads Kafka, writes the data, stores nothing) and
:meth:`Compactor.commit` (stores the offsets). :meth:`Compactor.run` does all three, and
nothing at all when there is nothing new to read.

Why a crash cannot duplicate: the table holds one row per ``id``, the newest by rank
(see :mod:`service.compaction.job`); records read again rank the same, so they change
nothing. Only partitions holding a row that actually changes are rewritten; the others
keep their files byte for byte.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructType

from service.compaction import job
from service.compaction.kafka_client import watermarks
from service.compaction.kafka_source import read_kafka
from service.compaction.offsets import OffsetStore, StoredOffsets
from service.compaction.ranges import OffsetRange, end_offsets, plan_ranges
from service.compaction.schemas import parse_result_schema
from service.compaction.security import ClientSecurity
from service.compaction.storage import Storage

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """What to read, where to write, and how."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    output: str
    source: str = "python"
    """``python`` (the Python data source) or ``kafka`` (Spark's, needs the jar)."""
    result_schemas: Mapping[str, str] = field(default_factory=dict)
    """Pipeline -> result schema text (see :mod:`service.compaction.schemas`)."""
    infer_result_schema: bool = False
    """Type ``result`` from the data for pipelines without a known schema."""
    max_records_per_split: int = 1_000_000
    max_records_per_file: int = 0
    client_options: Mapping[str, str] = field(default_factory=dict)
    """librdkafka properties (also passed as ``kafka.<name>`` to Spark's source); they
    win over :attr:`security`'s."""
    fail_on_data_loss: bool = True
    security: ClientSecurity = field(default_factory=ClientSecurity)
    """TLS and SASL for every client of the run (driver and executors, both sources)."""


@dataclass(slots=True)
class Summary:
    """What a run did."""

    rows_read: int = 0
    rows_skipped: int = 0
    """Records that are not window results (invalid JSON, keyed-process records)."""
    windows: int = 0
    """Distinct ids among the records read."""
    rows_changed: int = 0
    """Rows that are new or newer than the table's."""
    rows_written: int = 0
    """Rows in the rewritten partitions (changed and carried over)."""
    partitions_touched: list[str] = field(default_factory=list)
    offsets_run: int | None = None
    seconds: float = 0.0

    def text(self) -> str:
        stored = "none (nothing new)" if self.offsets_run is None else f"run {self.offsets_run}"
        return "\n".join(
            [
                f"rows read          {self.rows_read}",
                f"  not results      {self.rows_skipped}",
                f"  distinct windows {self.windows}",
                f"rows changed       {self.rows_changed}",
                f"rows written       {self.rows_written}",
                f"partitions touched {len(self.partitions_touched)}",
                *(f"  {p}" for p in self.partitions_touched),
                f"offsets stored     {stored}",
                f"time               {self.seconds:.1f}s",
            ]
        )


Progress = Callable[[str], None]


class Compactor:
    """Compacts ``config.topics`` into the Parquet dataset at ``config.output``."""

    def __init__(
        self, spark: SparkSession, config: CompactionConfig, progress: Progress | None = None
    ) -> None:
        self.spark = spark
        self.config = config
        self.storage = Storage(spark, config.output)
        self.offsets = OffsetStore(spark, config.output)
        self._progress = progress or logger.info

    def plan(self) -> list[OffsetRange]:
        """Per partition of every topic: from the stored offset (or the earliest) to the
        current high watermark."""
        stored = self.offsets.offsets(list(self.config.topics))
        marks = watermarks(
            self.config.bootstrap_servers,
            self.config.topics,
            extra={**self.config.security.librdkafka(), **self.config.client_options},
        )
        ranges = plan_ranges(stored, marks, fail_on_data_loss=self.config.fail_on_data_loss)
        total = sum(r.size for r in ranges)
        self._progress(f"plan: {total} records to read from {len(ranges)} partitions")
        return ranges

    def compact(self, ranges: list[OffsetRange], summary: Summary | None = None) -> Summary:
        """Read ``ranges`` and merge them into the table. Stores no offsets."""
        summary = summary or Summary()
        if not any(r.size for r in ranges):
            return summary
        raw = read_kafka(
            self.spark,
            self.config.bootstrap_servers,
            ranges,
            source=self.config.source,
            max_records_per_split=self.config.max_records_per_split,
            client_options=self.config.client_options,
            security=self.config.security,
        )
        parsed = job.parse_records(raw).persist(StorageLevel.MEMORY_AND_DISK)
        winners: DataFrame | None = None
        try:
            self._progress("read: reading and parsing the records")
            counts = parsed.groupBy("valid").count().collect()
            by_validity = {bool(row["valid"]): int(row["count"]) for row in counts}
            summary.rows_read += sum(by_validity.values())
            summary.rows_skipped += by_validity.get(False, 0)
            self._progress(f"read: {summary.rows_read} records")
            valid = parsed.where(F.col("valid")).drop("valid")
            winners = job.newest_per_id(valid).persist(StorageLevel.MEMORY_AND_DISK)
            per_partition = job.count_by_partition(winners)
            summary.windows += sum(per_partition.values())
            self._progress(
                f"dedupe: {summary.windows} distinct windows in {len(per_partition)} partitions"
            )
            partitions = job.by_pipeline(per_partition)
            for pipeline, days in sorted(partitions.items()):
                self._merge_pipeline(winners, pipeline, days, summary)
        finally:
            parsed.unpersist()
            if winners is not None:
                winners.unpersist()
        return summary

    def commit(self, ranges: list[OffsetRange]) -> StoredOffsets:
        """Store the ends of ``ranges`` as where the next run starts."""
        stored = self.offsets.commit(end_offsets(ranges))
        self._progress(f"offsets: stored run {stored.run}")
        return stored

    def run(self) -> Summary:
        """Plan, compact, commit; a run with nothing new to read writes nothing."""
        started = time.monotonic()
        ranges = self.plan()
        summary = Summary()
        if any(r.size for r in ranges):
            self.compact(ranges, summary)
            summary.offsets_run = self.commit(ranges).run
        summary.seconds = time.monotonic() - started
        return summary

    def _merge_pipeline(
        self, winners: DataFrame, pipeline: str, days: list[object], summary: Summary
    ) -> None:
        candidates = winners.where(F.col("pipeline") == pipeline)
        target = self._result_type(pipeline, candidates)
        candidates = job.convert_result(candidates, target)
        paths = [
            self.storage.partition_path(("pipeline", pipeline), ("window_date", day))
            for day in days
        ]
        paths = [p for p in paths if self.storage.exists(p)]
        existing: DataFrame | None = None
        changes = candidates
        if paths:
            raw = self.spark.read.option("basePath", self.config.output).parquet(*paths)
            existing = job.convert_result(job.table_for_partitions(raw, pipeline), target)
            changes = job.newer_than(candidates, existing)
        changes = changes.persist(StorageLevel.MEMORY_AND_DISK)
        table: DataFrame | None = None
        try:
            changed_per_partition = job.count_by_partition(changes)
            changed = sum(changed_per_partition.values())
            summary.rows_changed += changed
            if changed == 0:
                self._progress(f"merge: {pipeline}: nothing newer than the table")
                return
            touched = job.by_pipeline(changed_per_partition)[pipeline]
            table = changes.select(*job.TABLE_COLUMNS)
            if existing is not None:
                kept = existing.where(F.col("window_date").isin(touched))
                table = job.merge(kept, changes)
            # Materialised before writing: the write replaces the files it reads from.
            table = table.persist(StorageLevel.MEMORY_AND_DISK)
            rows = table.count()
            self._progress(
                f"write: {pipeline}: {changed} rows changed, {rows} rows "
                f"into {len(touched)} partitions"
            )
            job.write_partitions(
                table, self.config.output, max_records_per_file=self.config.max_records_per_file
            )
            summary.rows_written += rows
            summary.partitions_touched.extend(
                f"pipeline={pipeline}/window_date={d}" for d in touched
            )
        finally:
            changes.unpersist()
            if table is not None:
                table.unpersist()

    def _stored_result_type(self, pipeline: str) -> DataType | None:
        pipeline_dir = self.storage.partition_path(("pipeline", pipeline))
        if not self.storage.exists(pipeline_dir):
            return None
        schema = self.spark.read.option("basePath", self.config.output).parquet(pipeline_dir).schema
        return schema["result"].dataType if "result" in schema.fieldNames() else None

    def _result_type(self, pipeline: str, candidates: DataFrame) -> DataType:
        """Configured schema > the struct the table already has > inferred (if asked) >
        JSON text."""
        spec = self.config.result_schemas.get(pipeline)
        if spec is not None:
            return parse_result_schema(spec)
        stored = self._stored_result_type(pipeline)
        if isinstance(stored, StructType):
            return stored
        if self.config.infer_result_schema:
            texts = candidates.select("result").where(F.col("result").isNotNull())
            inferred = self.spark.read.json(texts.rdd.map(lambda row: row[0])).schema
            fields = [f for f in inferred.fields if f.name != "_corrupt_record"]
            if fields:
                self._progress(f"schema: {pipeline}: inferred {StructType(fields).simpleString()}")
                return StructType(fields)
        return StringType()
