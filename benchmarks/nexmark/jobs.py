"""One Nexmark query run by one engine in this process, for :mod:`benchmarks.nexmark.bench`
to measure from outside (the process tree's CPU and peak RSS, start to exit):

``python -m benchmarks.nexmark.jobs clockwork QUERY OUT --bootstrap B --prefix P``
``python -m benchmarks.nexmark.jobs flink QUERY OUT --folder F``
``python -m benchmarks.nexmark.jobs flink-rows QUERY OUT --folder F``
``python -m benchmarks.nexmark.jobs flink[-rows] QUERY OUT --bootstrap B --prefix P``

Flink reads the events' JSON-lines files (``--folder``), or with ``--bootstrap`` the
generator's topics on Apache Kafka through Flink's Kafka connector (the jar ``make
flink-kafka`` fetches: :func:`connector_jars`), bounded at the offsets current when the
job starts (:func:`benchmarks.nexmark.queries.flink_kafka_tables`).

Each writes ``OUT``: a JSON object. The first two, the measured runs: ``seconds`` (the
job's time: Clockwork's pipelines from start to finish, Flink's net job run time),
``cpu_s`` (CPU seconds spent meanwhile by this process and its descendants: for Flink
the Python driver and its JVM) and ``rows`` (how many result records Clockwork wrote, to
the topic ``sink``; Flink writes into ``blackhole``: ``null``). ``flink-rows``, not
measured: the same query in the same Flink setup, its rows collected instead
(``columns``, and ``rows`` with each cell :func:`benchmarks.nexmark.check.cell`'s), for
the bench to check Flink's output as it checks Clockwork's.

A process per run, so neither engine's figures carry the other's (or the bench's) memory,
and the broker (a process of the bench's) counts for neither.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.nexmark.queries import (
    QUERIES,
    Query,
    flink_kafka_tables,
    flink_table,
    pipeline,
    stages,
)
from benchmarks.peers.measure import tree_usage

BY_NAME = {q.name: q for q in QUERIES}

JARS = Path(__file__).resolve().parents[1] / "peers" / "flink-kafka" / "jars"
"""Where ``make flink-kafka`` puts Flink's Kafka connector (Maven Central's
``flink-sql-connector-kafka``, benchmarks/peers/flink-kafka/pom.xml)."""


def connector_jars() -> list[Path]:
    """The Kafka connector's jar, for ``pipeline.jars``; an error naming ``make
    flink-kafka`` when it is missing."""
    jars = sorted(JARS.glob("flink-sql-connector-kafka-*.jar"))
    if not jars:
        raise FileNotFoundError(
            f"no flink-sql-connector-kafka jar in {JARS}: run `make flink-kafka`"
        )
    return jars


@dataclass(frozen=True)
class Source:
    """Where Flink reads the events: ``folder``'s JSON-lines files, or (``bootstrap``
    set) the topics ``<prefix>.<kind>`` on that Apache Kafka broker."""

    folder: Path | None = None
    bootstrap: str = ""
    prefix: str = ""

    def statements(self, query: Query) -> list[str]:
        """The DDL of the query's tables."""
        if not self.bootstrap:
            assert self.folder is not None
            return [flink_table(kind, self.folder / f"{kind}.json") for kind in query.tables]
        group = f"nexmark-flink-{uuid.uuid4().hex[:8]}"
        return [
            statement
            for kind in query.tables
            for statement in flink_kafka_tables(
                kind, f"{self.prefix}.{kind}", self.bootstrap, group
            )
        ]


def clockwork(query: Query, bootstrap: str, prefix: str) -> dict[str, Any]:
    """Run the query's script to the end of its input (after the queries whose results it
    reads, each to its end: the seconds and CPU of all)."""
    from benchmarks.nexmark.in_process import run_spec
    from service.pipeline_spec.sql.compiler import compile_sql

    seconds, cpu, rows, upstream = 0.0, 0.0, 0, ""
    for stage in stages(query):
        body = pipeline(stage, prefix, f"{stage.name.replace('_', '-')}-{uuid.uuid4().hex[:6]}")
        spec = compile_sql(body["name"], body["sql"]).spec if "sql" in body else body
        if upstream:
            spec["source"]["topics"] = [upstream]
        spec["sink"]["topic"] = upstream = f"{spec['sink']['topic']}.{uuid.uuid4().hex[:6]}"
        run = asyncio.run(run_spec(bootstrap, spec))
        seconds, cpu, rows = seconds + run.seconds, cpu + run.cpu_s, run.rows
    return {"seconds": seconds, "cpu_s": cpu, "rows": rows, "sink": upstream}


def _flink_env(query: Query, source: Source) -> Any:
    """A streaming ``TableEnvironment`` on PyFlink's local MiniCluster, parallelism 1,
    time zone UTC, with the query's tables over the events' files or topics (then the
    Kafka connector's jar in ``pipeline.jars``)."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", "1")
    config.set("table.local-time-zone", "UTC")
    if source.bootstrap:
        config.set("pipeline.jars", ";".join(j.as_uri() for j in connector_jars()))
    for statement in source.statements(query):
        env.execute_sql(statement)
    return env


def flink(query: Query, source: Source) -> dict[str, Any]:
    """Run the query in Flink SQL into a ``blackhole`` sink, as nexmark-flink's queries
    write, PyFlink's local MiniCluster, parallelism 1."""
    env = _flink_env(query, source)
    schema = env.sql_query(query.flink).get_schema()
    columns, types = schema.get_field_names(), schema.get_field_data_types()
    fields = ", ".join(f"`{c}` {t}" for c, t in zip(columns, types, strict=True))
    env.execute_sql(f"CREATE TABLE sink ({fields}) WITH ('connector' = 'blackhole')")
    result = env.execute_sql(f"INSERT INTO sink {query.flink}")
    # Submitted: planned and code generated, as Clockwork's script is compiled before its
    # clock starts. The JVM is this process's child: the tree's CPU holds both.
    cpu_started = tree_usage(os.getpid())[1]
    client = result.get_job_client()
    if client is None:  # pragma: no cover (an INSERT always submits a job)
        raise RuntimeError("Flink submitted no job")
    net_ms = client.get_job_execution_result().result().get_net_runtime()
    cpu = tree_usage(os.getpid())[1] - cpu_started
    return {"seconds": net_ms / 1000, "cpu_s": cpu, "rows": None}


def flink_rows(query: Query, source: Source) -> dict[str, Any]:
    """Run the query as :func:`flink` does (the same environment and plan), its rows
    collected instead of written to ``blackhole``: to check them, apart from the timed
    runs (collecting adds the rows' trip to Python, which the timed runs leave out).

    Collected with ``to_pandas`` (Arrow batches; ``collect()``'s one py4j call per row
    took 2.5 min for q0's 92,000 rows). It applies retractions (Flink's
    ``ArrowUtils.collectAsPandasDataFrame`` keeps an updating table's final rows), so an
    updating query's (q4's) rows are its final table, as Clockwork's folded upserts."""
    from benchmarks.nexmark.check import cell

    frame = _flink_env(query, source).sql_query(query.flink).to_pandas()
    columns = [str(c) for c in frame.columns]
    values = zip(*(frame[c].tolist() for c in columns), strict=True)
    return {"columns": columns, "rows": [[cell(v) for v in row] for row in values]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("engine", choices=("clockwork", "flink", "flink-rows"))
    parser.add_argument("query", choices=sorted(BY_NAME))
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--bootstrap",
        help="clockwork (and flink, flink-rows reading Kafka): the broker holding the topics",
    )
    parser.add_argument("--prefix", help="with --bootstrap: the topics' prefix")
    parser.add_argument(
        "--folder", type=Path, help="flink, flink-rows: the events' JSON-lines files"
    )
    parser.add_argument("--profile", type=Path, help="clockwork: cProfile stats to this file")
    args = parser.parse_args(argv)
    query = BY_NAME[args.query]
    source = Source(args.folder, args.bootstrap or "", args.prefix or "")
    if args.engine == "flink":
        found = flink(query, source)
    elif args.engine == "flink-rows":
        found = flink_rows(query, source)
    elif args.profile:
        profile = cProfile.Profile()
        found = profile.runcall(clockwork, query, args.bootstrap, args.prefix)
        profile.dump_stats(args.profile)
    else:
        found = clockwork(query, args.bootstrap, args.prefix)
    args.out.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
