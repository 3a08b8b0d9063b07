"""One compaction run: plan the offset ranges, compact them into the table, store offsets.

Two table formats (:attr:`CompactionConfig.format`):

- ``delta`` (:mod:`service.compaction.delta_table`): the run is one Delta commit, a
  ``MERGE`` holding the changed rows and the offsets together; :meth:`Compactor.run`.
- ``parquet``: a plain Parquet dataset; the steps are public so a crash between them
  can be reproduced (tests do): :meth:`Compactor.plan` (driver, reads the stored offsets
  and the high watermarks), :meth:`Compactor.compact` (reads Kafka, writes the data,
  stores nothing) and :meth:`Compactor.commit` (stores the offsets).

:meth:`Compactor.run` does it all, and nothing at all when there is nothing new to read.

Why a crash cannot duplicate: the table holds one row per ``id``, the newest by rank
(see :mod:`service.compaction.job`); records read again rank the same, so they change
nothing. Only partitions holding a row that actually changes are rewritten; the others
keep their files byte for byte.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructType

from service.compaction import job, upserts
from service.compaction.delta_table import DeltaResultTable
from service.compaction.errors import CompactionError
from service.compaction.kafka_client import watermarks
from service.compaction.kafka_source import read_kafka
from service.compaction.offsets import OffsetStore, StoredOffsets
from service.compaction.ranges import OffsetRange, end_offsets, plan_ranges
from service.compaction.schemas import parse_result_schema, widen_struct
from service.compaction.security import ClientSecurity
from service.compaction.storage import Storage
from service.contract.result_record import UPSERT_OP

logger = logging.getLogger(__name__)

FORMATS = ("delta", "parquet")


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """What to read, where to write, and how."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    output: str
    format: str = "delta"
    """``delta`` (a Delta Lake table, one commit per run) or ``parquet``."""
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
    optimize: bool = False
    """Delta: after the run, compact small files (``OPTIMIZE``)."""
    zorder: bool = False
    """Delta: ``OPTIMIZE`` Z-ordered by key (rewrites whole partitions)."""
    vacuum_hours: float | None = None
    """Delta: after the run, ``VACUUM`` files unreferenced for this many hours."""
    deletion_vectors: bool = True
    """Delta: create the table with deletion vectors (see :mod:`.delta_table`); Parquet
    has none (ignored)."""
    upsert: bool = False
    """The topics are upsert streams (running aggregates' results): the table is their
    final table, one row per key, deletes applied (:mod:`.upserts`); Delta only."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise CompactionError(
                f"format must be one of {', '.join(FORMATS)}, not {self.format!r}"
            )
        delta_only = (self.optimize, self.zorder, self.vacuum_hours is not None)
        if self.format != "delta" and any(delta_only):
            raise CompactionError("--optimize, --zorder and --vacuum-hours need --format delta")
        if self.format != "delta" and self.upsert:
            raise CompactionError(
                "--upsert needs --format delta: an upsert stream's deletes would rewrite "
                "the whole Parquet partition of the pipeline every run; compact it into a "
                "Delta table (deletion vectors make a delete a small file)"
            )
        if self.vacuum_hours is not None and self.vacuum_hours < 0:
            raise CompactionError(f"--vacuum-hours must be >= 0, not {self.vacuum_hours}")


@dataclass(slots=True)
class Summary:
    """What a run did."""

    rows_read: int = 0
    rows_skipped: int = 0
    """Records that are not results of the kind read (invalid JSON, keyed-process
    records; upserts and tombstones in a window run, window results in an upsert run)."""
    windows: int = 0
    """Distinct ids among the records read (an upsert run: distinct keys)."""
    rows_changed: int = 0
    """Rows that are new or newer than the table's."""
    rows_deleted: int = 0
    """An upsert run: rows deleted by tombstones."""
    upsert: bool = False
    """The run read upsert streams."""
    rows_written: int = 0
    """Rows in the rewritten partitions (changed and carried over)."""
    partitions_touched: list[str] = field(default_factory=list)
    offsets_run: int | None = None
    table_version: int | None = None
    """Delta: the table version the run committed."""
    seconds: float = 0.0

    def text(self) -> str:
        stored = "none (nothing new)" if self.offsets_run is None else f"run {self.offsets_run}"
        return "\n".join(
            [
                f"rows read          {self.rows_read}",
                f"  not results      {self.rows_skipped}",
                f"  distinct {'keys   ' if self.upsert else 'windows'} {self.windows}",
                f"rows changed       {self.rows_changed}",
                *([f"rows deleted       {self.rows_deleted}"] if self.upsert else []),
                f"rows written       {self.rows_written}",
                f"partitions touched {len(self.partitions_touched)}",
                *(f"  {p}" for p in self.partitions_touched),
                f"offsets stored     {stored}",
                *(
                    [f"table version      {self.table_version}"]
                    if self.table_version is not None
                    else []
                ),
                f"time               {self.seconds:.1f}s",
            ]
        )


Progress = Callable[[str], None]


class Compactor:
    """Compacts ``config.topics`` into the table at ``config.output``."""

    def __init__(
        self, spark: SparkSession, config: CompactionConfig, progress: Progress | None = None
    ) -> None:
        self.spark = spark
        self.config = config
        self.storage = Storage(spark, config.output)
        self.offsets = OffsetStore(spark, config.output)
        self._progress = progress or logger.info
        self.delta = DeltaResultTable(
            spark, config.output, self._progress, deletion_vectors=config.deletion_vectors
        )
        self._planned_from: StoredOffsets | None = None
        """Delta: the stored offsets the last :meth:`plan` started from."""

    def plan(self) -> list[OffsetRange]:
        """Per partition of every topic: from the stored offset (or the earliest) to the
        current high watermark."""
        self._check_layout()
        topics = list(self.config.topics)
        if self.config.format == "delta":
            self._planned_from = self.delta.latest()
            held = self._planned_from.offsets if self._planned_from else {}
            stored = {tp: o for tp, o in held.items() if tp[0] in set(topics)}
        else:
            stored = self.offsets.offsets(topics)
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
        """Read ``ranges`` and merge them into the table. With Parquet, stores no
        offsets (:meth:`commit` does); with Delta, the data and the offsets are one
        commit, so this is the whole run: the one after the run :meth:`plan` started
        from (if another job committed that run meanwhile, this one fails)."""
        summary = summary or Summary(upsert=self.config.upsert)
        if not any(r.size for r in ranges):
            return summary
        if self.config.upsert:
            self._compact_upserts(ranges, summary)
            return summary
        with self._winners(ranges, summary) as (winners, per_partition):
            partitions = job.by_pipeline(per_partition)
            if self.config.format == "delta":
                self._merge_delta(winners, partitions, ranges, summary)
            else:
                for pipeline, days in sorted(partitions.items()):
                    self._merge_pipeline(winners, pipeline, days, summary)
        return summary

    def commit(self, ranges: list[OffsetRange]) -> StoredOffsets:
        """Parquet: store the ends of ``ranges`` as where the next run starts."""
        if self.config.format == "delta":
            raise CompactionError("a Delta run commits its offsets with its data (compact)")
        stored = self.offsets.commit(end_offsets(ranges))
        self._progress(f"offsets: stored run {stored.run}")
        return stored

    def run(self) -> Summary:
        """Plan, compact, commit; a run with nothing new to read writes nothing. Then,
        with Delta, the maintenance asked for (even when nothing was new)."""
        started = time.monotonic()
        ranges = self.plan()
        summary = Summary(upsert=self.config.upsert)
        if any(r.size for r in ranges):
            self.compact(ranges, summary)
            if self.config.format == "parquet":
                summary.offsets_run = self.commit(ranges).run
        if self.config.optimize or self.config.zorder:
            self.delta.optimize(zorder=self.config.zorder)
        if self.config.vacuum_hours is not None:
            self.delta.vacuum(self.config.vacuum_hours)
        summary.seconds = time.monotonic() - started
        return summary

    def _check_layout(self) -> None:
        """Refuse to mix the formats in one output (a Parquet dataset of this job has its
        offsets under ``_clockwork``, a Delta table its ``_delta_log``)."""
        parquet = self.storage.exists(f"{self.storage.output}/_clockwork")
        delta = self.storage.exists(f"{self.storage.output}/_delta_log")
        if self.config.format == "delta" and parquet:
            raise CompactionError(
                f"{self.config.output} is a Parquet dataset of this job: compact into a new "
                "path with --format delta, or keep --format parquet"
            )
        if self.config.format == "parquet" and delta:
            raise CompactionError(f"{self.config.output} is a Delta table: use --format delta")
        kind = self.delta.kind() if self.config.format == "delta" else None
        wanted = "upsert" if self.config.upsert else "window"
        if kind is not None and kind != wanted:
            raise CompactionError(
                f"{self.config.output} is the table of {kind} results, not of {wanted} "
                "results: compact upsert streams (--upsert) and window results into "
                "separate tables"
            )

    @contextlib.contextmanager
    def _winners(
        self, ranges: list[OffsetRange], summary: Summary
    ) -> Iterator[tuple[DataFrame, dict[tuple[str, object], int]]]:
        """The newest record per id among ``ranges`` (``result`` as JSON text), cached
        while the block runs, and its row count per ``(pipeline, window_date)``."""
        parsed = job.parse_records(self._read(ranges)).persist(StorageLevel.MEMORY_AND_DISK)
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
            yield winners, per_partition
        finally:
            parsed.unpersist()
            if winners is not None:
                winners.unpersist()

    def _read(self, ranges: list[OffsetRange]) -> DataFrame:
        return read_kafka(
            self.spark,
            self.config.bootstrap_servers,
            ranges,
            source=self.config.source,
            max_records_per_split=self.config.max_records_per_split,
            client_options=self.config.client_options,
            security=self.config.security,
        )

    def _compact_upserts(self, ranges: list[OffsetRange], summary: Summary) -> None:
        """An upsert run: the newest record per key merged into the table, a tombstone
        deleting its key's row; one commit with the offsets (:mod:`.upserts`)."""
        parsed = upserts.parse_records(self._read(ranges)).persist(StorageLevel.MEMORY_AND_DISK)
        winners: DataFrame | None = None
        try:
            self._progress("read: reading and parsing the records")
            counts = parsed.groupBy("op").count().collect()
            by_op = {row["op"]: int(row["count"]) for row in counts}
            summary.rows_read += sum(by_op.values())
            summary.rows_skipped += by_op.get(None, 0)
            self._progress(
                f"read: {summary.rows_read} records, {by_op.get(UPSERT_OP, 0)} upserts, "
                f"{by_op.get(upserts.DELETE_OP, 0)} tombstones"
            )
            valid = parsed.where(F.col("valid")).drop("valid")
            pipelines = upserts.topic_pipelines(valid)
            unnamed = sorted({r.topic for r in ranges if r.size} - set(pipelines))
            pipelines.update(self.delta.upsert_pipelines(unnamed))
            newest = upserts.name_tombstones(upserts.newest_per_key(valid), pipelines)
            winners = newest.persist(StorageLevel.MEMORY_AND_DISK)
            per_pipeline = upserts.count_by_pipeline(winners)
            summary.windows += sum(per_pipeline.values())
            self._progress(
                f"dedupe: {summary.windows} distinct keys of {len(per_pipeline)} pipelines"
            )
            if not per_pipeline:
                # Nothing to stage (only skipped records, or tombstones of a topic never
                # compacted): Delta commits no empty MERGE or write, so the offsets are
                # not stored and the next run reads these records again.
                self._progress("merge: no row to change; offsets not stored")
                return
            types, result_type = self._delta_types(winners, per_pipeline)
            rows = job.delta_rows(winners, types, result_type, upserts.STAGED_COLUMNS)
            commit = self.delta.merge_upserts(
                rows, sorted(per_pipeline), end_offsets(ranges), self._planned_from
            )
            summary.rows_changed += commit.rows_inserted + commit.rows_updated
            summary.rows_deleted += commit.rows_deleted
            summary.rows_written += commit.rows_written
            summary.partitions_touched.extend(commit.partitions)
            summary.offsets_run = commit.run
            summary.table_version = commit.version
        finally:
            parsed.unpersist()
            if winners is not None:
                winners.unpersist()

    def _delta_types(
        self, winners: DataFrame, pipelines: Iterable[str]
    ) -> tuple[dict[str, StructType], StructType | None]:
        """The result struct of each typed pipeline of ``winners`` and the table's
        ``result`` type grown to hold them all."""
        types: dict[str, StructType] = {}
        result_type = self.delta.result_type()
        for pipeline in sorted(pipelines):
            spec = self.config.result_schemas.get(pipeline)
            if spec is not None:
                types[pipeline] = parse_result_schema(spec)
                result_type = widen_struct(result_type, types[pipeline], strict=True)
            elif self.config.infer_result_schema:
                candidates = winners.where(F.col("pipeline") == pipeline)
                inferred = self._inferred_type(pipeline, candidates)
                if inferred is not None:
                    types[pipeline] = inferred
                    result_type = widen_struct(result_type, inferred, strict=False)
        return types, result_type

    def _merge_delta(
        self,
        winners: DataFrame,
        partitions: dict[str, list[object]],
        ranges: list[OffsetRange],
        summary: Summary,
    ) -> None:
        """One Delta commit: the rows, typed, and the offsets (:mod:`.delta_table`)."""
        types, result_type = self._delta_types(winners, partitions)
        rows = job.delta_rows(winners, types, result_type)
        days = {
            pipeline: [d for d in ds if isinstance(d, datetime.date)]
            for pipeline, ds in partitions.items()
        }
        commit = self.delta.merge(rows, days, end_offsets(ranges), self._planned_from)
        summary.rows_changed += commit.rows_inserted + commit.rows_updated
        summary.rows_written += commit.rows_written
        summary.partitions_touched.extend(commit.partitions)
        summary.offsets_run = commit.run
        summary.table_version = commit.version

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
            inferred = self._inferred_type(pipeline, candidates)
            if inferred is not None:
                return inferred
        return StringType()

    def _inferred_type(self, pipeline: str, candidates: DataFrame) -> StructType | None:
        """The struct Spark infers from the JSON ``result`` texts of ``candidates``."""
        texts = candidates.select("result").where(F.col("result").isNotNull())
        inferred = self.spark.read.json(texts.rdd.map(lambda row: row[0])).schema
        fields = [f for f in inferred.fields if f.name != "_corrupt_record"]
        if not fields:
            return None
        self._progress(f"schema: {pipeline}: inferred {StructType(fields).simpleString()}")
        return StructType(fields)
