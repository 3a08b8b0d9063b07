"""``python -m benchmarks.nexmark.bench [--events N] [--rounds R] [--queries q3,q7]``: the
Nexmark queries Clockwork's SQL runs (:mod:`benchmarks.nexmark.queries`), in Clockwork
and in Flink SQL, side by side in one run, round robin (per query and round: Clockwork,
then Flink).

The events: the generator's (:mod:`benchmarks.nexmark.generate`, 10,000 events/s of event
time), generated once, written to Kafka (one partition per topic, on the embedded
broker) for Clockwork and to JSON-lines files for Flink (PyFlink's package has no Kafka
connector: see benchmarks/peers/flink.py).

Each peer as its documentation runs it:

- Clockwork: the query's script compiled to its spec and run on the runtime, bounded,
  in this process; the time is from the pipeline's start to its finish (every result
  written to the sink topic).
- Flink: PyFlink's local MiniCluster, streaming mode, parallelism 1, the results into
  the ``blackhole`` connector as nexmark-flink's queries write them, in a process of its
  own per run; the time is the job's net run time (start-up of the JVM and the
  cluster left out, as for Clockwork, whose process is already up).

Events/s counts the events the query reads (bids: 46 in 50 of the generated events).
The result rows are not checked here; tests/integration/test_nexmark_flink.py checks
that both give the same rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from benchmarks.nexmark.generate import KINDS, NexmarkConfig, by_kind, produce
from benchmarks.nexmark.queries import QUERIES, Query, flink_table, script

BY_NAME = {q.name: q for q in QUERIES}


def write_files(config: NexmarkConfig, folder: Path) -> dict[str, int]:
    """Each kind's events as Flink's tables read them; how many of each."""
    counts = {}
    for kind, found in by_kind(config).items():
        with (folder / f"{kind}.json").open("w") as out:
            for e in found:
                record = {k: v for k, v in e.record.items() if k != "dateTime"}
                out.write(json.dumps({**record, "dateTime_ms": e.record["dateTime"]}) + "\n")
        counts[kind] = len(found)
    return counts


def clockwork_seconds(bootstrap: str, query: Query, prefix: str) -> tuple[float, int]:
    """Run the query's script to the end of its input (after the query whose results it
    reads, to its end: the seconds of both): seconds, result rows."""
    from benchmarks.nexmark.in_process import run_spec
    from service.pipeline_spec.sql.compiler import compile_sql

    stages = [BY_NAME[query.after], query] if query.after else [query]
    total, rows, upstream = 0.0, 0, ""
    for stage in stages:
        spec = compile_sql(
            f"{stage.name.replace('_', '-')}-{uuid.uuid4().hex[:6]}", script(stage, prefix)
        ).spec
        if upstream:
            spec["source"]["topics"] = [upstream]
        spec["sink"]["topic"] = upstream = f"{spec['sink']['topic']}.{uuid.uuid4().hex[:6]}"
        seconds, results = asyncio.run(run_spec(bootstrap, spec))
        total, rows = total + seconds, len(results)
    return total, rows


def flink_seconds(query: Query, folder: Path) -> float:
    """Run the query in Flink SQL in a process of its own: the job's net run time."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.nexmark.bench",
            "--flink-query",
            query.name,
            str(folder),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def _flink_job(name: str, folder: Path) -> None:
    """In the Flink process: run one query into a blackhole sink; print its net seconds."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    query = next(q for q in QUERIES if q.name == name)
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", "1")
    config.set("table.local-time-zone", "UTC")
    for kind in query.tables:
        env.execute_sql(flink_table(kind, folder / f"{kind}.json"))
    columns = env.sql_query(query.flink).get_schema().get_field_names()
    types = env.sql_query(query.flink).get_schema().get_field_data_types()
    fields = ", ".join(f"`{c}` {t}" for c, t in zip(columns, types, strict=True))
    env.execute_sql(f"CREATE TABLE sink ({fields}) WITH ('connector' = 'blackhole')")
    result = env.execute_sql(f"INSERT INTO sink {query.flink}")
    client = result.get_job_client()
    if client is None:  # pragma: no cover (an INSERT always submits a job)
        raise RuntimeError("Flink submitted no job")
    print(client.get_job_execution_result().result().get_net_runtime() / 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", help="a comma-separated subset (default: every query)")
    parser.add_argument("--flink-query", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flink_query:
        _flink_job(args.flink_query[0], Path(args.flink_query[1]))
        return 0
    from service.runtime.kafka.embedded_broker import EmbeddedBroker

    config = NexmarkConfig(events=args.events)
    prefix = f"nexmark-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="nexmark-") as tmp, EmbeddedBroker() as broker:
        folder = Path(tmp)
        counts = write_files(config, folder)
        topics = {k: f"{prefix}.{k}" for k in KINDS}
        asyncio.run(produce(broker.bootstrap_servers, topics, config))
        print(f"{args.events:,} events ({counts}), {args.rounds} rounds, median events/s")
        print(f"{'query':<14} {'Clockwork':>12} {'Flink SQL':>12} {'ratio':>7}  rows")
        chosen = set(args.queries.split(",")) if args.queries else {q.name for q in QUERIES}
        for query in (q for q in QUERIES if q.name in chosen):
            read = sum(counts[k] for k in query.tables)
            ours, theirs, rows = [], [], 0
            for _ in range(args.rounds):
                seconds, rows = clockwork_seconds(broker.bootstrap_servers, query, prefix)
                ours.append(read / seconds)
                theirs.append(read / flink_seconds(query, folder))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"{query.name:<14} {a:>12,.0f} {b:>12,.0f} {a / b:>7.2f}  {rows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
