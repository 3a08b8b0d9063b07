"""The compaction job into a Delta Lake table (``--format delta``): the table equals a
reference (the newest firing per id) after runs with late firings and replays, read back
by Spark and by delta-rs (the ``deltalake`` package, no Spark: its ``QueryBuilder``,
which reads the deletion vectors the tables have by default), with one commit per run
holding the offsets and nothing committed when nothing is new (on both brokers; both
sources on Apache Kafka); a job killed after its data files are written and before its
commit, then rerun; a reader polling during a run sees whole snapshots only; OPTIMIZE,
VACUUM, schema evolution, and a second commit of one run refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RustDeltaTable
from deltalake import QueryBuilder
from pyspark.sql import SparkSession

from service.compaction import CompactionConfig, Compactor, Summary
from service.compaction.delta_table import APP_ID, DeltaResultTable, parse_metadata
from service.compaction.errors import OffsetStoreError

from .conftest import DAY_MS, T0, create_topic, on_apache_kafka_only, produce, record
from .spark_jars import read_jars

pytestmark = [pytest.mark.spark, pytest.mark.integration]


CRASH_SOURCE = Path(__file__).with_name("crash") / "CrashBeforeCommitLogStore.java"
CRASH_CLASS = "clockwork.tests.CrashBeforeCommitLogStore"


def compactor(
    spark: SparkSession, bootstrap: str, topic: str, output: Path, **options: Any
) -> Compactor:
    config = CompactionConfig(
        bootstrap_servers=bootstrap,
        topics=(topic,),
        output=str(output),
        format="delta",
        max_records_per_split=options.pop("max_records_per_split", 40),
        **options,
    )
    return Compactor(spark, config)


def firings(days: Sequence[int], keys: Sequence[str], seq: int, fire: str) -> list[dict[str, Any]]:
    return [
        record(pipeline, key, T0 + day * DAY_MS + w * 60_000, seq, {"n": seq, "k": key}, fire=fire)
        for pipeline in ("typed", "loose")
        for day in days
        for key in keys
        for w in range(2)
    ]


def reference(produced: Sequence[dict[str, Any]]) -> dict[str, tuple[int, str, int]]:
    """id -> (seq, fire, result n) of the newest firing; replays repeat a firing as it
    was, so on a seq tie any copy is the same."""
    newest: dict[str, dict[str, Any]] = {}
    for value in produced:
        held = newest.get(value["id"])
        if held is None or value["seq"] >= held["seq"]:
            newest[value["id"]] = value
    return {i: (v["seq"], v["fire"], v["result"]["n"]) for i, v in newest.items()}


def as_reference(rows: Sequence[dict[str, Any]]) -> dict[str, tuple[int, str, int]]:
    """Table rows in :func:`reference`'s form; no id may appear twice."""
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)), "duplicate ids in the table"
    table = {}
    for row in rows:
        if row["pipeline"] == "typed":
            n = row["result"]["n"]
            assert row["result_json"] is None
        else:
            n = json.loads(row["result_json"])["n"]
            assert row.get("result") is None
        table[row["id"]] = (row["seq"], row["fire"], n)
    return table


def spark_rows(spark: SparkSession, output: Path) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").load(str(output))
    return [row.asDict(recursive=True) for row in frame.collect()]


def rust_rows(output: Path, version: int | None = None) -> list[dict[str, Any]]:
    """The table's rows read by delta-rs's own query engine (DataFusion, its
    ``QueryBuilder``): it applies deletion vectors (on by default), which
    ``DeltaTable.to_pyarrow_table`` refuses, and fills a struct field added by schema
    evolution with nulls in the older files, which that pyarrow dataset scan refuses on
    pyarrow 16."""
    table = RustDeltaTable(str(output), version=version)
    batches = QueryBuilder().register("t", table).execute("SELECT * FROM t")
    rows: list[dict[str, Any]] = pa.table(batches).to_pylist()
    return rows


def versions(output: Path) -> list[int]:
    return sorted(int(entry["version"]) for entry in RustDeltaTable(str(output)).history())


def data_files(output: Path) -> set[str]:
    return {
        str(p.relative_to(output)) for p in output.rglob("*.parquet") if "_delta_log" not in p.parts
    }


def referenced_files(output: Path) -> set[str]:
    root = RustDeltaTable(str(output))
    return {uri.split(str(output).rstrip("/") + "/", 1)[1] for uri in root.file_uris()}


def assert_table_is(spark: SparkSession, output: Path, expected: dict[str, Any]) -> None:
    assert as_reference(spark_rows(spark, output)) == expected
    assert as_reference(rust_rows(output)) == expected


@pytest.mark.parametrize("source", ["python", "kafka"])
def test_runs_with_late_firings_and_replays_equal_the_reference(
    spark: SparkSession,
    bootstrap_servers: str,
    broker_name: str,
    topic_name: str,
    tmp_path: Path,
    source: str,
) -> None:
    if source == "kafka" and broker_name != "kafka":
        pytest.skip("Spark's Kafka source is checked on Apache Kafka")
    create_topic(bootstrap_servers, topic_name, 2)
    output = tmp_path / "table"
    job = compactor(
        spark,
        bootstrap_servers,
        topic_name,
        output,
        source=source,
        result_schemas={"typed": "n long, k string"},
    )
    produced: list[dict[str, Any]] = []
    batches = [
        firings([0, 1], ["a", "b", "c"], 0, "on_time"),
        # late firings of old windows, replays of the first batch, new windows
        [*firings([0], ["a", "c"], 1, "late"), *firings([2], ["a"], 0, "on_time")],
        # later firings again, and a replay of everything so far
        firings([0, 1], ["b"], 2, "late"),
    ]
    batches[1] += batches[0][::3]
    batches[2] += batches[0] + batches[1]
    for run, batch in enumerate(batches, start=1):
        produce(bootstrap_servers, topic_name, batch, batch=9)
        produced += batch
        summary = job.run()
        assert summary.offsets_run == run, summary.text()
        assert summary.rows_read == len(batch)
        assert_table_is(spark, output, reference(produced))
    history = RustDeltaTable(str(output)).history()
    assert [h["operation"] for h in sorted(history, key=lambda h: h["version"])] == [
        "WRITE",
        "MERGE",
        "MERGE",
    ]
    stored = DeltaResultTable(spark, str(output)).latest()
    assert stored is not None and stored.run == 3
    assert sum(stored.offsets.values()) == len(produced)
    for version in range(3):  # each run's commit holds its transaction, the first too
        assert RustDeltaTable(str(output), version=version).transaction_version(APP_ID) == (
            version + 1
        )

    # Nothing new: no commit, no file.
    before = (versions(output), data_files(output))
    again = job.run()
    assert (again.rows_read, again.offsets_run, again.table_version) == (0, None, None)
    assert (versions(output), data_files(output)) == before


def test_a_new_result_field_is_added_by_schema_evolution(
    spark: SparkSession, broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 1)
    output = tmp_path / "table"
    produce(bootstrap_servers, topic_name, [record("typed", "a", T0, 0, {"n": 1, "extra": 5})])
    compactor(
        spark, bootstrap_servers, topic_name, output, result_schemas={"typed": "n long"}
    ).run()
    produce(bootstrap_servers, topic_name, [record("typed", "b", T0, 0, {"n": 2, "extra": 6})])
    compactor(
        spark,
        bootstrap_servers,
        topic_name,
        output,
        result_schemas={"typed": "n long, extra long"},
    ).run()
    frame = spark.read.format("delta").load(str(output))
    assert frame.schema["result"].dataType.simpleString() == "struct<n:bigint,extra:bigint>"
    rows = {r["key"]: r["result"].asDict() for r in frame.collect()}
    assert rows == {"a": {"n": 1, "extra": None}, "b": {"n": 2, "extra": 6}}
    assert {r["key"]: r["result"] for r in rust_rows(output)} == rows


@pytest.fixture(scope="session")
def crash_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/compaction/crash/CrashBeforeCommitLogStore.java compiled against the Delta
    storage jar ``make spark-jars`` resolved and pyspark's Hadoop client."""
    import pyspark

    if shutil.which("javac") is None:
        pytest.skip("javac (a JDK 17) is needed to build the crash point")
    jars = read_jars()
    storage = [j for j in jars if "delta-storage" in j]
    hadoop = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    assert storage and hadoop, (jars, hadoop)
    out = tmp_path_factory.mktemp("crash-classes")
    subprocess.run(
        ["javac", "-cp", f"{storage[0]}:{hadoop[0]}", "-d", str(out), str(CRASH_SOURCE)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    jar = out / "crash.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        for path in out.rglob("*.class"):
            archive.write(path, str(path.relative_to(out)))
    return jar


def cli_run(
    bootstrap: str, topic: str, output: Path, *, crash_jar: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m service.compaction`` into ``output``, with the jars ``make spark-jars``
    resolved (Delta's among them: the job resolves nothing); with ``crash_jar``, its
    first MERGE commit kills it (SIGKILL) after the data files are written."""
    jars = [*read_jars(), *([str(crash_jar)] if crash_jar is not None else [])]
    argv = [
        sys.executable,
        "-m",
        "service.compaction",
        *("--bootstrap-servers", bootstrap, "--topics", topic, "--output", str(output)),
        *("--master", "local[2]", "--result-schema", "typed=n long, k string"),
        *("--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.ui.enabled=false"),
        *("--conf", "spark.databricks.delta.snapshotPartitions=2"),
        *("--conf", f"spark.jars={','.join(jars)}"),
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    if crash_jar is not None:
        argv += ["--conf", f"spark.delta.logStore.file.impl={CRASH_CLASS}"]
        env["CLOCKWORK_TEST_CRASH_BEFORE_COMMIT"] = "MERGE"
    return subprocess.run(argv, capture_output=True, text=True, timeout=400, check=False, env=env)


@pytest.mark.timeout(900)
def test_a_job_killed_before_its_commit_then_rerun_gives_the_reference(
    spark: SparkSession,
    broker_name: str,
    bootstrap_servers: str,
    topic_name: str,
    tmp_path: Path,
    crash_jar: Path,
) -> None:
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 2)
    output = tmp_path / "table"
    first = firings([0, 1], ["a", "b"], 0, "on_time")
    produce(bootstrap_servers, topic_name, first)
    job = compactor(
        spark, bootstrap_servers, topic_name, output, result_schemas={"typed": "n long, k string"}
    )
    job.run()
    committed = (versions(output), referenced_files(output))
    second = [*firings([0], ["a"], 1, "late"), *firings([3], ["c"], 0, "on_time"), *first[::2]]
    produce(bootstrap_servers, topic_name, second)

    killed = cli_run(bootstrap_servers, topic_name, output, crash_jar=crash_jar)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert "SIGKILL before writing" in killed.stderr
    # Its data files were written; no snapshot refers to them; the table is as before.
    orphans = data_files(output) - referenced_files(output)
    assert orphans, "the killed run wrote no data file"
    assert (versions(output), referenced_files(output)) == committed
    assert as_reference(rust_rows(output)) == reference(first)

    # Run again in this process (the CLI's Delta session is the killed run's, above).
    rerun = compactor(
        spark, bootstrap_servers, topic_name, output, result_schemas={"typed": "n long, k string"}
    ).run()
    assert (rerun.rows_read, rerun.offsets_run, rerun.table_version) == (len(second), 2, 1)
    assert_table_is(spark, output, reference(first + second))

    # VACUUM removes the killed run's files (and those the MERGE replaced), nothing else.
    vacuumed = compactor(spark, bootstrap_servers, topic_name, output, vacuum_hours=0).run()
    assert vacuumed.rows_read == 0
    assert data_files(output) == referenced_files(output)
    assert not orphans & data_files(output)
    assert_table_is(spark, output, reference(first + second))


def test_a_reader_polling_during_a_run_sees_whole_snapshots(
    spark: SparkSession, broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 2)
    output = tmp_path / "table"
    first = firings(range(4), ["a", "b", "c"], 0, "on_time")
    produce(bootstrap_servers, topic_name, first)
    job = compactor(
        spark, bootstrap_servers, topic_name, output, result_schemas={"typed": "n long, k string"}
    )
    job.run()
    second = [*firings(range(4), ["a", "c"], 1, "late"), *firings([5, 6], ["d"], 0, "on_time")]
    produce(bootstrap_servers, topic_name, second)
    expected = {0: reference(first), 1: reference(first + second)}

    seen: list[tuple[int, int]] = []
    problems: list[str] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                version = RustDeltaTable(str(output)).version()
                rows = rust_rows(output, version)
                seen.append((version, len(rows)))
                if as_reference(rows) != expected.get(version):
                    problems.append(f"version {version}: {len(rows)} rows, not the reference")
            except Exception as exc:  # reported by the test, not lost in the thread
                problems.append(f"reading failed: {exc!r}")
            done.wait(0.02)

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        summary: Summary = job.run()
    finally:
        done.set()
        reader.join()
    assert summary.table_version == 1
    assert problems == []
    assert seen[0] == (0, len(expected[0])), "the reader started after the commit"
    assert {v for v, _ in seen} <= {0, 1}
    assert as_reference(rust_rows(output)) == expected[1]


def test_optimize_compacts_small_files_and_keeps_the_offsets(
    spark: SparkSession, broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 1)
    output = tmp_path / "table"
    produced = []
    for key in ("a", "b", "c"):  # inserts only: each run adds a file to the partition
        batch = [record("loose", key, T0, 0, {"n": 0})]
        produce(bootstrap_servers, topic_name, batch)
        produced += batch
        compactor(spark, bootstrap_servers, topic_name, output).run()
    assert len(referenced_files(output)) == 3
    summary = compactor(spark, bootstrap_servers, topic_name, output, optimize=True).run()
    assert summary.offsets_run is None  # nothing new: maintenance only
    assert len(referenced_files(output)) == 1
    history = sorted(RustDeltaTable(str(output)).history(), key=lambda h: h["version"])
    assert history[-1]["operation"] == "OPTIMIZE"
    optimized = parse_metadata(history[-1].get("userMetadata"))
    assert optimized is not None and optimized.run == 3  # the newest commit names the offsets
    stored = DeltaResultTable(spark, str(output)).latest()
    assert stored is not None and (stored.run, sum(stored.offsets.values())) == (3, 3)
    assert as_reference(rust_rows(output)) == reference(produced)


def test_two_jobs_planned_from_the_same_offsets_commit_once(
    spark: SparkSession, broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    """Two jobs plan run 2 from the same stored offsets: the first to commit wins; Delta
    skips the second's transaction, and that job fails saying so instead of reporting a
    success. The next run starts where the winner stopped."""
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 1)
    output = tmp_path / "table"
    produced = [record("loose", "a", T0, 0, {"n": 0})]
    produce(bootstrap_servers, topic_name, produced)
    compactor(spark, bootstrap_servers, topic_name, output).run()
    late = [record("loose", "a", T0, 1, {"n": 1}, fire="late")]
    produce(bootstrap_servers, topic_name, late)
    first, second = (compactor(spark, bootstrap_servers, topic_name, output) for _ in range(2))
    first_ranges, second_ranges = first.plan(), second.plan()
    assert first_ranges == second_ranges
    assert first.compact(first_ranges).offsets_run == 2
    with pytest.raises(OffsetStoreError, match="run 2 was not committed"):
        second.compact(second_ranges)
    assert versions(output) == [0, 1]
    assert as_reference(rust_rows(output)) == reference(produced + late)
    again = compactor(spark, bootstrap_servers, topic_name, output).run()
    assert (again.rows_read, again.offsets_run) == (0, None)


@pytest.mark.parametrize("deletion_vectors", [True, False])
def test_with_deletion_vectors_a_merge_writes_only_the_changed_rows(
    spark: SparkSession,
    broker_name: str,
    bootstrap_servers: str,
    topic_name: str,
    tmp_path: Path,
    deletion_vectors: bool,
) -> None:
    """Deletion vectors (the default): the late firing's MERGE marks the replaced row
    deleted instead of rewriting its file; read back by Spark and delta-rs's QueryBuilder
    (``DeltaTable.to_pyarrow_table`` refuses the table). ``--no-deletion-vectors``: the
    MERGE copies the file's other rows, and delta-rs's pyarrow reader reads it too."""
    on_apache_kafka_only(broker_name)
    create_topic(bootstrap_servers, topic_name, 1)
    output = tmp_path / "table"
    first = [record("loose", key, T0, 0, {"n": 0}) for key in ("a", "b", "c", "d")]
    late = [record("loose", "b", T0, 1, {"n": 1}, fire="late")]
    job = compactor(spark, bootstrap_servers, topic_name, output, deletion_vectors=deletion_vectors)
    for batch in (first, late):
        produce(bootstrap_servers, topic_name, batch)
        job.run()
    assert_table_is(spark, output, reference(first + late))
    (merge,) = spark.sql(f"DESCRIBE HISTORY delta.`{output}`").where("version = 1").collect()
    metrics = merge["operationMetrics"]
    assert merge["operation"] == "MERGE"
    table = RustDeltaTable(str(output))
    if deletion_vectors:
        assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsCopied"]) == ("1", "0")
        assert int(metrics["numTargetDeletionVectorsAdded"]) == 1
        assert table.metadata().configuration.get("delta.enableDeletionVectors") == "true"
        with pytest.raises(Exception, match="deletionVectors"):
            table.to_pyarrow_table()
    else:
        assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsCopied"]) == ("1", "3")
        assert "numTargetDeletionVectorsAdded" not in metrics or (
            int(metrics["numTargetDeletionVectorsAdded"]) == 0
        )
        assert as_reference(table.to_pyarrow_table().to_pylist()) == reference(first + late)
