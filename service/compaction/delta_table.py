"""The Delta Lake table: newest firings merged in, the run's offsets in the same commit.

One Delta table at ``output`` holds every pipeline, partitioned by ``pipeline`` and
``window_date``. A run is exactly one Delta commit (a ``MERGE``, or the ``WRITE`` that
creates the table) holding both the rows that changed and the Kafka offsets the run
read up to:

- the offsets are the commit's ``userMetadata`` (``{"clockwork_compaction": {"run": N,
  "offsets": ...}, "attempt": ID}``), so the table's history says which run wrote what;
- the commit carries Delta's idempotent-write transaction ``(clockwork-compaction, N)``:
  a second commit of run ``N`` (two jobs started from the same offsets) is skipped by
  Delta itself, and this module then raises instead of reporting a success.

A run killed at any point before its commit leaves only data files no snapshot refers
to (``VACUUM`` removes them); the next run starts from the same offsets. Records read
twice rank the same as the rows they produced, so the ``MERGE`` condition (update only
when the incoming rank is higher) makes re-reading change nothing.

An upsert stream's table (:mod:`.upserts`, ``--upsert``) is another table at another
``output``, partitioned by ``pipeline`` alone, one row per key: its ``MERGE`` updates or
inserts a key's newest upsert and deletes the row of a key whose newest record is a
tombstone (:meth:`DeltaResultTable.merge_upserts`); the commit and its offsets are the
same.

Deletion vectors are on by default: a ``MERGE`` marks the rows it replaces or deletes in
a small deletion-vector file instead of rewriting every data file that holds one.

Maintenance commits made by the job (``OPTIMIZE``, ``VACUUM``) repeat the newest run's
offsets in their metadata, so the newest commit of the job always names them, even after
Delta's log cleanup removed older commits.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from service.compaction import job, upserts
from service.compaction.errors import OffsetStoreError
from service.compaction.offsets import StoredOffsets
from service.compaction.ranges import TopicPartition
from service.contract.result_record import UPSERT_OP

logger = logging.getLogger(__name__)

APP_ID = "clockwork-compaction"
"""The application id of the job's idempotent-write transactions."""
METADATA_KEY = "clockwork_compaction"
"""The key of the offsets in a commit's ``userMetadata``."""

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
_DEFAULT_RETENTION_HOURS = 168
_DELETION_VECTORS_DEFAULT = "spark.databricks.delta.properties.defaults.enableDeletionVectors"


@dataclass(slots=True)
class DeltaCommit:
    """What one run's commit did (from Delta's operation metrics)."""

    version: int
    run: int
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    rows_written: int = 0
    """Rows in the files the commit added (changed rows and those copied with them)."""
    partitions: list[str] = field(default_factory=list)
    """``pipeline=P/window_date=D`` of the files added or removed."""


def commit_metadata(stored: StoredOffsets, attempt: str | None = None) -> str:
    """A commit's ``userMetadata``: ``stored``, and the ``attempt`` that tells this job's
    commit apart from another job's commit of the same run."""
    body: dict[str, Any] = {METADATA_KEY: stored.to_dict()}
    if attempt is not None:
        body["attempt"] = attempt
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def metadata_attempt(text: str | None) -> str | None:
    try:
        body = json.loads(text or "null")
    except ValueError:
        return None
    attempt = body.get("attempt") if isinstance(body, dict) else None
    return attempt if isinstance(attempt, str) else None


def parse_metadata(text: str | None) -> StoredOffsets | None:
    """The offsets in a commit's ``userMetadata``; ``None`` for another writer's commit."""
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or METADATA_KEY not in body:
        return None
    try:
        return StoredOffsets.from_dict(body[METADATA_KEY])
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise OffsetStoreError(f"unreadable offsets in a commit's userMetadata: {exc}") from exc


def _newest(row: Row) -> int:
    return -int(row["version"])


class DeltaResultTable:
    """The Delta table at ``path``: read its offsets and result type, merge a run into it,
    maintain it."""

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        progress: Callable[[str], None] | None = None,
        *,
        deletion_vectors: bool = True,
    ) -> None:
        self.spark = spark
        self.path = path.rstrip("/")
        self._progress = progress or logger.info
        self.deletion_vectors = deletion_vectors
        """Create the table with deletion vectors (the default): a ``MERGE`` then marks
        the rows it replaces or deletes as deleted instead of rewriting their files
        (readers must support the ``deletionVectors`` feature: Spark with Delta 2.3+,
        Trino, DuckDB, delta-rs's ``QueryBuilder``; not delta-rs's
        ``DeltaTable.to_pyarrow_table`` as of deltalake 1.6). Set when the table is
        created; an existing table keeps what it was created with."""

    def exists(self) -> bool:
        return bool(DeltaTable.isDeltaTable(self.spark, self.path))

    def latest(self) -> StoredOffsets | None:
        """The offsets of the newest commit the job made (``None`` before the first).
        Looks at the newest 50 commits first, then at the whole history Delta keeps."""
        if not self.exists():
            return None
        table = DeltaTable.forPath(self.spark, self.path)
        for limit in (50, None):  # DeltaTable.history reads the commits at once
            history = table.history(limit) if limit else table.history()
            rows = history.where(F.col("userMetadata").isNotNull())
            for row in sorted(rows.select("version", "userMetadata").collect(), key=_newest):
                stored = parse_metadata(row["userMetadata"])
                if stored is not None:
                    return stored
        return None

    def result_type(self) -> StructType | None:
        """The table's ``result`` struct, if it has one yet."""
        if not self.exists():
            return None
        schema = DeltaTable.forPath(self.spark, self.path).toDF().schema
        if "result" not in schema.fieldNames():
            return None
        kind = schema["result"].dataType
        return kind if isinstance(kind, StructType) else None

    def kind(self) -> str | None:
        """``window`` (a window result table), ``upsert`` (an upsert stream's table,
        :mod:`.upserts`), or ``None`` before the first run."""
        if not self.exists():
            return None
        columns = DeltaTable.forPath(self.spark, self.path).toDF().columns
        return "window" if "window_start" in columns else "upsert"

    def upsert_pipelines(self, topics: Sequence[str]) -> dict[str, str]:
        """An upsert table's topic -> pipeline, for those of ``topics`` it holds rows of."""
        if not topics or self.kind() != "upsert":
            return {}
        rows = (
            DeltaTable.forPath(self.spark, self.path)
            .toDF()
            .where(F.col("source_topic").isin(list(topics)))
            .select("source_topic", "pipeline")
            .distinct()
            .collect()
        )
        return upserts.one_pipeline_per_topic(
            (str(r["source_topic"]), str(r["pipeline"])) for r in rows
        )

    def merge(
        self,
        rows: DataFrame,
        partitions: Mapping[str, Sequence[datetime.date]],
        offsets: Mapping[TopicPartition, int],
        planned_from: StoredOffsets | None,
    ) -> DeltaCommit:
        """One commit: ``rows`` (one per id, :func:`job.delta_rows`) merged by ``id``,
        updating a row only when the incoming rank is higher, and ``offsets`` (merged
        over ``planned_from``, the stored offsets the run was planned from) as the run
        after it. ``partitions`` (pipeline -> days) are those ``rows`` fall in: the
        ``MERGE`` reads only their files. Raises :class:`OffsetStoreError` when another
        run planned from the same offsets committed first."""

        def update() -> None:
            target = DeltaTable.forPath(self.spark, self.path).alias("t")
            (
                target.merge(rows.alias("s"), self._merge_condition(partitions))
                .withSchemaEvolution()
                .whenMatchedUpdateAll(job.rank("s.") > job.rank("t."))
                .whenNotMatchedInsertAll()
                .execute()
            )

        return self._commit_run(rows, job.PARTITION_COLUMNS, offsets, planned_from, update)

    def merge_upserts(
        self,
        rows: DataFrame,
        pipelines: Sequence[str],
        offsets: Mapping[TopicPartition, int],
        planned_from: StoredOffsets | None,
    ) -> DeltaCommit:
        """One commit of an upsert stream's run: ``rows`` (the newest record per key,
        :data:`.upserts.STAGED_COLUMNS` typed by :func:`job.delta_rows`) merged by
        ``id``: ``MERGE ... WHEN MATCHED AND op = 'delete' THEN DELETE WHEN MATCHED THEN
        UPDATE WHEN NOT MATCHED AND op = 'upsert' THEN INSERT``, with ``op`` left out of
        the table; the target limited to the ``pipelines`` of ``rows``. The run's records
        are all newer than the table's rows (runs read each partition's offsets in
        order), so the newest record of a key always wins: the table is the fold of the
        topic. The offsets are committed with it as :meth:`merge` does."""
        columns = [c for c in rows.columns if c != "op"]
        assign: dict[str, str | Column] = {c: F.col(f"s.{c}") for c in columns}
        upsert = F.col("op") == F.lit(UPSERT_OP)

        def update() -> None:
            target = DeltaTable.forPath(self.spark, self.path).alias("t")
            same = (F.col("t.id") == F.col("s.id")) & (F.col("t.pipeline") == F.col("s.pipeline"))
            scope = F.col("t.pipeline").isin(sorted(pipelines))
            (
                target.merge(rows.alias("s"), same & scope)
                .withSchemaEvolution()
                .whenMatchedDelete(F.col("s.op") == F.lit(upserts.DELETE_OP))
                .whenMatchedUpdate(set=assign)
                .whenNotMatchedInsert(condition=F.col("s.op") == F.lit(UPSERT_OP), values=assign)
                .execute()
            )

        created = rows.where(upsert).select(*columns)
        return self._commit_run(created, upserts.PARTITION_COLUMNS, offsets, planned_from, update)

    def _commit_run(
        self,
        rows: DataFrame,
        partition_columns: Sequence[str],
        offsets: Mapping[TopicPartition, int],
        planned_from: StoredOffsets | None,
        update: Callable[[], None],
    ) -> DeltaCommit:
        """The run after ``planned_from`` as one commit holding ``offsets`` (merged over
        ``planned_from``'s): ``rows`` written as the new table (partitioned by
        ``partition_columns``), or ``update`` (a ``MERGE``) on an existing one."""
        merged = dict(planned_from.offsets) if planned_from else {}
        merged.update(offsets)
        run = (planned_from.run if planned_from else 0) + 1
        stored = StoredOffsets(run=run, offsets=merged, written_at_ms=int(time.time() * 1000))
        attempt = uuid.uuid4().hex
        with self._commit_settings(stored, transaction=True, attempt=attempt):
            if not self.exists():
                self._progress(f"delta: creating the table with run {run}")
                writer = (
                    rows.repartition(*partition_columns)
                    .sortWithinPartitions(*partition_columns, "id")
                    .write.format("delta")
                    .mode("append")
                    .partitionBy(*partition_columns)
                )
                vectors = "true" if self.deletion_vectors else "false"
                with self._settings({_DELETION_VECTORS_DEFAULT: vectors}):
                    writer.save(self.path)
            else:
                self._progress(f"delta: merging run {run}")
                update()
        return self._committed(run, attempt)

    def optimize(self, *, zorder: bool = False) -> None:
        """Compact small files (bin-packing; with ``zorder``, rewrite each partition's
        files Z-ordered by ``key``)."""
        latest = self.latest()
        if latest is None:
            return
        with self._commit_settings(latest, transaction=False):
            optimizer = DeltaTable.forPath(self.spark, self.path).optimize()
            metrics = optimizer.executeZOrderBy("key") if zorder else optimizer.executeCompaction()
        row = metrics.select("metrics.numFilesAdded", "metrics.numFilesRemoved").first()
        added, removed = (row[0], row[1]) if row is not None else (0, 0)
        self._progress(f"optimize: {removed} files rewritten into {added}")

    def vacuum(self, hours: float) -> None:
        """Delete files no snapshot of the last ``hours`` refers to (those of replaced
        rows, and the orphans of runs killed before their commit). Below Delta's 168-hour
        safety margin, a reader or a run older than ``hours`` may lose files it needs."""
        latest = self.latest()
        if latest is None:
            return
        below = hours < _DEFAULT_RETENTION_HOURS
        if below:
            logger.warning("vacuum: retention %sh is below Delta's %sh", hours, 168)
        unchecked = {_RETENTION_CHECK: "false"} if below else {}
        with self._settings(unchecked), self._commit_settings(latest, transaction=False):
            DeltaTable.forPath(self.spark, self.path).vacuum(hours)
        self._progress(f"vacuum: files older than {hours}h and unreferenced removed")

    def _merge_condition(self, partitions: Mapping[str, Sequence[datetime.date]]) -> Any:
        """Same id (and so the same partition), with the target limited to the partitions
        the rows fall in: literal predicates Delta prunes files with."""
        same = (
            (F.col("t.id") == F.col("s.id"))
            & (F.col("t.pipeline") == F.col("s.pipeline"))
            & (F.col("t.window_date") == F.col("s.window_date"))
        )
        scope = None
        for pipeline, days in sorted(partitions.items()):
            here = (F.col("t.pipeline") == F.lit(pipeline)) & F.col("t.window_date").isin(
                list(days)
            )
            scope = here if scope is None else scope | here
        return same if scope is None else same & scope

    def _committed(self, run: int, attempt: str) -> DeltaCommit:
        """The commit of ``run`` made by this ``attempt``, found in the newest versions;
        raises when Delta skipped it (its transaction version was already taken)."""
        history = DeltaTable.forPath(self.spark, self.path).history(20).collect()
        for row in sorted(history, key=_newest):
            if metadata_attempt(row["userMetadata"]) != attempt:
                continue
            metrics = {k: int(v) for k, v in (row["operationMetrics"] or {}).items()}
            commit = DeltaCommit(
                version=int(row["version"]),
                run=run,
                rows_inserted=metrics.get("numTargetRowsInserted", metrics.get("numOutputRows", 0)),
                rows_updated=metrics.get("numTargetRowsUpdated", 0),
                rows_deleted=metrics.get("numTargetRowsDeleted", 0),
                rows_written=metrics.get("numOutputRows", 0),
            )
            commit.partitions = self._partitions_of(commit.version)
            self._progress(
                f"delta: version {commit.version} holds run {run}: "
                f"{commit.rows_inserted} rows inserted, {commit.rows_updated} updated, "
                f"{commit.rows_deleted} deleted"
            )
            return commit
        raise OffsetStoreError(
            f"{self.path}: run {run} was not committed: Delta skipped it, since the "
            f"transaction {APP_ID!r} is already at {run} or later (another run committed "
            "from the same offsets first, or the commit naming the offsets left the log)"
        )

    def _partitions_of(self, version: int) -> list[str]:
        """``column=value/...`` of the partitions the commit ``version`` added or
        removed files in (``pipeline=P/window_date=D``; an upsert table's ``pipeline=P``)."""
        log = f"{self.path}/_delta_log/{version:020d}.json"
        actions = self.spark.read.json(log)
        found: set[str] = set()
        for action in ("add", "remove"):
            if action not in actions.columns:
                continue
            values = actions.where(F.col(action).isNotNull()).select(
                F.col(f"{action}.partitionValues").alias("p")
            )
            for row in values.distinct().collect():
                if row["p"] is not None:
                    found.add("/".join(f"{k}={v}" for k, v in row["p"].asDict().items()))
        return sorted(found)

    @contextlib.contextmanager
    def _commit_settings(
        self, stored: StoredOffsets, *, transaction: bool, attempt: str | None = None
    ) -> Iterator[None]:
        """The session settings that make the next commit carry ``stored`` (and, with
        ``transaction``, the idempotent-write transaction of its run); restored after."""
        settings = {_USER_METADATA: commit_metadata(stored, attempt)}
        if transaction:
            settings |= {_TXN_APP_ID: APP_ID, _TXN_VERSION: str(stored.run)}
        with self._settings(settings):
            yield

    @contextlib.contextmanager
    def _settings(self, settings: Mapping[str, str]) -> Iterator[None]:
        """Session settings for the block, restored after it."""
        previous = {key: self.spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, before in previous.items():
                self._restore(key, before)

    def _restore(self, key: str, value: str | None) -> None:
        if value is None:
            self.spark.conf.unset(key)
        else:
            self.spark.conf.set(key, value)
