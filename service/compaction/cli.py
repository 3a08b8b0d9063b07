"""``python -m service.compaction``: compact result topics into a Delta Lake table (or a
Parquet dataset).

Local::

    python -m service.compaction --bootstrap-servers localhost:9092 \\
        --topics revenue-per-user,clicks --output /data/results --master 'local[*]'

Cluster: see ``service/compaction/README.md`` (spark-submit, ``--source kafka``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from service.compaction.compactor import FORMATS, CompactionConfig, Compactor
from service.compaction.delta_session import (
    SESSION_SETTINGS,
    delta_package,
    lists_delta_jar,
    with_package,
)
from service.compaction.errors import CompactionError
from service.compaction.schemas import parse_result_schemas
from service.compaction.security import REDACTED_OPTIONS, ClientSecurity, SecurityConfigError

logger = logging.getLogger("service.compaction")


def _key_values(items: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what}: expected KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m service.compaction",
        description="Compact Clockwork result topics (newest seq per window id) into a "
        "Delta Lake table (or a Parquet dataset) partitioned by pipeline and window_date.",
    )
    p.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)",
    )
    p.add_argument("--topics", required=True, help="comma-separated result topics")
    p.add_argument("--output", required=True, help="table path (any Hadoop FS URI)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="delta",
        help="delta (default): a Delta Lake table, one MERGE commit per run holding the "
        "offsets; parquet: a plain Parquet dataset with the offsets beside it",
    )
    p.add_argument(
        "--optimize", action="store_true", help="delta: compact small files after the run"
    )
    p.add_argument(
        "--zorder",
        action="store_true",
        help="delta: OPTIMIZE Z-ordered by key after the run (rewrites whole partitions)",
    )
    p.add_argument(
        "--deletion-vectors",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="delta: create the table with deletion vectors (default: on; a MERGE then "
        "writes only the rows it changes; readers must support them: delta-rs's "
        "QueryBuilder does, its to_pyarrow_table does not); --no-deletion-vectors: "
        "without them",
    )
    p.add_argument(
        "--upsert",
        action="store_true",
        help="the topics are upsert streams (running aggregates): compact them into their "
        "final table, one row per key, a tombstone deleting the key's row (delta only; "
        "its own --output, not a window table's)",
    )
    p.add_argument(
        "--vacuum-hours",
        type=float,
        metavar="N",
        help="delta: after the run, delete files unreferenced for N hours (Delta's safety "
        "margin is 168)",
    )
    p.add_argument(
        "--source",
        choices=("python", "kafka"),
        default="python",
        help="python: the bundled Python data source (default); kafka: Spark's Kafka "
        "source (needs spark-sql-kafka-0-10 via --packages)",
    )
    p.add_argument("--master", help="Spark master, e.g. local[*] (default: spark-submit's)")
    p.add_argument(
        "--result-schema",
        action="append",
        default=[],
        metavar="PIPELINE=SCHEMA",
        help="type the result of PIPELINE as a struct: Spark DDL ('orders long, revenue "
        "double'), Spark JSON schema or JSON Schema; repeatable",
    )
    p.add_argument(
        "--infer-result-schema",
        action="store_true",
        help="type results from the data for pipelines without --result-schema",
    )
    p.add_argument("--max-records-per-split", type=int, default=1_000_000)
    p.add_argument("--max-records-per-file", type=int, default=0, help="0: one file per partition")
    p.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Kafka client property (librdkafka name; passed as kafka.KEY to Spark's source)",
    )
    p.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="start at the earliest kept offset when stored offsets were deleted by retention",
    )
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting")
    return p


SHIPPED_JARS = "CLOCKWORK_COMPACTION_JARS"
"""A directory of jars resolved ahead of time (the compaction image's Delta jars): they
become ``spark.jars`` unless the run sets it, so a run resolves nothing (and writes
nothing to an Ivy cache: the image runs on a read-only root filesystem)."""


def local_threads(master: str) -> int:
    """The worker threads of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]``
    master (Spark's forms; ``*``: the machine's CPUs)."""
    inside = master.partition("[")[2].partition("]")[0].split(",")[0].strip()
    if not inside:
        return 1
    if inside == "*":
        return os.cpu_count() or 1
    try:
        return max(1, int(inside))
    except ValueError:
        return 1


def build_session(master: str | None, conf: dict[str, str], *, delta: bool = False) -> SparkSession:
    """A SparkSession for the job: UTC session time zone, dynamic partition overwrite;
    with ``delta``, Delta Lake's extension and catalog, and its jar added to
    ``spark.jars.packages`` (resolved from Maven Central when the session starts; under
    spark-submit, pass it with ``--packages``) unless ``spark.jars`` already has one.

    In local mode the Python workers run this interpreter (they need pyarrow and
    confluent-kafka), unless ``PYSPARK_PYTHON`` says otherwise, the driver binds to
    loopback (nothing outside the machine needs to reach a local-mode job), and a file
    listing runs as many tasks as the master has threads: Spark's default (10,000,
    ``spark.sql.sources.parallelPartitionDiscovery.parallelism``, made for clusters) made
    Delta's ``VACUUM`` of a small table take 31 s on ``local[2]``, against 4 s.
    """
    local = master is not None and master.startswith("local")
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("clockwork-compaction")
    if master is not None:
        builder = builder.master(master)
    settings = {
        # The Kafka secrets are options of the read (the executors need them): redact
        # them where Spark shows options (plans, the UI), beside its default patterns.
        "spark.redaction.regex": rf"(?i)secret|password|token|access[.]key|{REDACTED_OPTIONS}",
        "spark.sql.redaction.options.regex": rf"(?i)url|{REDACTED_OPTIONS}",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        **(
            {
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
                "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(
                    local_threads(master or "local")
                ),
            }
            if local
            else {}
        ),
        **(SESSION_SETTINGS if delta else {}),
        **conf,
    }
    shipped = os.environ.get(SHIPPED_JARS)
    if shipped and "spark.jars" not in settings:
        settings["spark.jars"] = ",".join(sorted(str(j) for j in Path(shipped).glob("*.jar")))
    if delta and not lists_delta_jar(settings.get("spark.jars")):
        packages = with_package(settings.get("spark.jars.packages"), delta_package())
        settings["spark.jars.packages"] = packages
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.bootstrap_servers:
        raise SystemExit("--bootstrap-servers (or KAFKA_BOOTSTRAP_SERVERS) is required")
    try:
        security = ClientSecurity.from_env(os.environ)
    except SecurityConfigError as exc:
        raise SystemExit(str(exc)) from None
    if args.deletion_vectors is not None and args.format != "delta":
        raise SystemExit("--deletion-vectors and --no-deletion-vectors need --format delta")
    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip())
    if not topics:
        raise SystemExit("--topics: at least one topic")
    try:
        config = CompactionConfig(
            bootstrap_servers=args.bootstrap_servers,
            topics=topics,
            output=args.output,
            format=args.format,
            source=args.source,
            result_schemas=parse_result_schemas(args.result_schema),
            infer_result_schema=args.infer_result_schema,
            max_records_per_split=args.max_records_per_split,
            max_records_per_file=args.max_records_per_file,
            client_options=_key_values(args.kafka_option, "--kafka-option"),
            fail_on_data_loss=not args.allow_data_loss,
            security=security,
            optimize=args.optimize,
            zorder=args.zorder,
            vacuum_hours=args.vacuum_hours,
            deletion_vectors=args.deletion_vectors is not False,
            upsert=args.upsert,
        )
    except CompactionError as exc:
        raise SystemExit(str(exc)) from exc
    started = time.monotonic()
    spark = build_session(
        args.master, _key_values(args.conf, "--conf"), delta=config.format == "delta"
    )
    logger.info("spark %s up in %.1fs", spark.version, time.monotonic() - started)
    try:
        summary = Compactor(spark, config, progress=logger.info).run()
    except CompactionError as exc:
        logger.error("%s", exc)
        return 1
    finally:
        spark.stop()
    print(summary.text())
    return 0
