"""``python -m benchmarks.nexmark.bench [--events N] [--rounds R] [--queries q3,q7]
[--flink-source files|kafka|both] [--broker tansu|kafka]``: the Nexmark queries
Clockwork's SQL runs (:mod:`benchmarks.nexmark.queries`), in Clockwork and in Flink SQL,
side by side in one run, round robin (per query and round: Clockwork, then Flink, from
files then from Kafka), beside Flink's published per-core figures
(:mod:`benchmarks.nexmark.published`).

The events: the generator's (:mod:`benchmarks.nexmark.generate`, 10,000 events/s of event
time), generated once, written to Kafka (one partition per topic) for Clockwork, and
for Flink:

- ``--flink-source files`` (the default): to JSON-lines files, Flink's ``filesystem``
  connector reading them ("Flink (files)"; PyFlink's package has no Kafka connector);
- ``--flink-source kafka``: Flink reads the same topics Clockwork reads, through Flink's
  Kafka connector (``flink-sql-connector-kafka`` 5.0.0-2.2 from Maven Central, ``make
  flink-kafka``), bounded at the offsets current when its job starts ("Flink (Kafka)";
  :func:`benchmarks.nexmark.queries.flink_kafka_tables`);
- ``both``: a column of each.

The broker (``--broker``): the embedded Tansu, or Apache Kafka from its jars
(:class:`tests.kafka.kafka_broker.KafkaBroker`), the default when Flink reads Kafka and
the only broker it may (Flink's Kafka source does not run against Tansu: it read 4 of
20,000 records and finished).

Each run is a process of its own (:mod:`benchmarks.nexmark.jobs`), each peer as its
documentation runs it:

- Clockwork: the query's script compiled to its spec and run on the runtime, bounded;
  the time is from the pipeline's start to its finish (every result written to the
  sink topic), every stage's for a query of several pipelines (q5's two, q4's three,
  q6's four: each reads the one before's results, run to its end first).
- Flink: PyFlink's local MiniCluster, streaming mode, parallelism 1, the results into
  the ``blackhole`` connector as nexmark-flink's queries write them; the time is the
  job's net run time (start-up of the JVM and the cluster left out, as Clockwork's
  start-up is).

Per query, medians over the rounds:

- events/s: the events the query reads (bids: 46 in 50 of the generated events) over
  the job's time.
- CPU s per 1M events read, two ways: over the job's time (measured inside the run:
  Clockwork's process; Flink's Python driver and its JVM), and over the whole process
  tree from start to exit (:func:`benchmarks.peers.measure.run_measured`: interpreter,
  imports, the JVM's start-up and shut-down included). The broker is a process of this
  bench, in neither tree: no engine's figure has the broker's work (Flink reading
  files has none to do).
- peak RSS: of the process tree, sampled every 50 ms (a peak shorter than that can be
  missed).
- the broker's CPU while Clockwork's process ran (start to exit), and Flink's reading
  Kafka, per 1M events read: apart, in neither engine's figures, to say how much of
  each one's time off its own CPU the broker's work on the shared cores explains.
- generated events per CPU second (the job's CPU): every generated event counted,
  whichever the query reads, as the published ``Throughput/Cores`` counts them.

q6 is Beam's Query6, which Flink does not run (nexmark-flink's text is an ``OVER`` window
over an updating join, and Flink's ``OVER`` window cannot take retractions): its Flink
cells are n/a, and a line under the table says so. An updating query's result (q4's,
q6's) is folded into its table before it is checked (Clockwork's upserts by Kafka key,
Flink's collected rows with their retractions applied).

Every engine's rows are checked against the Python reference
(:mod:`benchmarks.nexmark.reference`, every query; :mod:`benchmarks.nexmark.check`),
outside the measured processes: Clockwork's every round (its result topic read back
after the run's process has ended), Flink's once per query and source after the rounds,
by a run of its own that collects the rows instead of writing them to ``blackhole``
(``jobs.py flink-rows``: the same environment, source and query, unmeasured). The
table's last column: Clockwork's row count and whether every engine's rows are the
reference's ("both the reference's", "all the reference's" with Flink from both
sources, or "NOT the reference's:" and whose are not; what differs goes to stderr).
tests/integration/test_nexmark_flink.py checks every query the same way at 3,000
events, and Clockwork's rows against Flink's (from files), and some queries with Flink
reading Apache Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.nexmark.check import (
    COLUMNS,
    clockwork_rows,
    difference,
    folded,
    normalised,
    reference,
)
from benchmarks.nexmark.generate import KINDS, Event, NexmarkConfig, by_kind, produce
from benchmarks.nexmark.published import PER_CORE, SOURCE
from benchmarks.nexmark.queries import QUERIES, Query
from benchmarks.nexmark.reference import Row
from benchmarks.peers.measure import descendants, run_measured, tree_usage
from benchmarks.workload import read_keyed

TIMEOUT_S = 1800.0


@dataclass(frozen=True, slots=True)
class Run:
    seconds: float
    job_cpu_s: float
    process_cpu_s: float
    peak_rss_mb: float
    rows: int | None
    broker_cpu_s: float = 0.0
    """The broker's CPU seconds while the run's process lived (Clockwork's runs)."""
    sink: str = ""
    """The topic of Clockwork's results."""


def write_files(events: dict[str, list[Event]], folder: Path) -> dict[str, int]:
    """Each kind's events as Flink's tables read them; how many of each."""
    counts = {}
    for kind, found in events.items():
        with (folder / f"{kind}.json").open("w") as out:
            for e in found:
                record = {k: v for k, v in e.record.items() if k != "dateTime"}
                out.write(json.dumps({**record, "dateTime_ms": e.record["dateTime"]}) + "\n")
        counts[kind] = len(found)
    return counts


def _cpu(pids: list[int]) -> float:
    return sum(tree_usage(p)[1] for p in pids)


def _job(engine: str, query: Query, folder: Path, options: list[str]) -> tuple[Any, Any]:
    """``jobs.py ENGINE QUERY`` in a process of its own, measured from outside: what it
    wrote, and the measurement (:func:`~benchmarks.peers.measure.run_measured`)."""
    out = folder / f"{engine}-{query.name}-{uuid.uuid4().hex[:6]}.json"
    cmd = [sys.executable, "-m", "benchmarks.nexmark.jobs", engine, query.name, str(out)]
    done = run_measured(cmd + options, out.with_suffix(".log"), TIMEOUT_S)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"{engine} {query.name} failed:\n{done.log_tail}")
    return json.loads(out.read_text()), done


def measured(engine: str, query: Query, folder: Path, options: list[str], broker: list[int]) -> Run:
    """One run of ``engine`` on ``query`` in a process of its own, measured from outside;
    ``broker``: its processes, whose CPU meanwhile the run reports apart."""
    broker_started = _cpu(broker)
    found, done = _job(engine, query, folder, options)
    broker_cpu = _cpu(broker) - broker_started
    return Run(
        found["seconds"],
        found["cpu_s"],
        done.cpu_s,
        done.peak_rss_bytes / 1e6,
        found["rows"],
        broker_cpu,
        found.get("sink", ""),
    )


def _report(engine: str, query: Query, got: list[Row], want: list[Row]) -> bool:
    """Whether ``got`` is ``want``; if not, what differs, on stderr."""
    if got == want:
        return True
    print(f"{query.name}, {engine}: {difference(got, want)}", file=sys.stderr, flush=True)
    return False


def clockwork_checked(bootstrap: str, query: Query, run: Run, want: list[Row]) -> bool:
    """Whether the run's results are the reference's rows ``want`` (read back here, after
    the run's process has ended and been measured; an updating query's upsert stream
    folded into its table first)."""
    found = asyncio.run(read_keyed(bootstrap, run.sink))
    decoded = [(k, None if v is None else json.loads(v)) for k, v in found]
    records = folded(decoded) if query.updating else [v for _, v in decoded if v is not None]
    return _report("Clockwork", query, clockwork_rows(query, records), want)


FLINK_SOURCES = {"files": "Flink (files)", "kafka": "Flink (Kafka)"}
"""Where Flink reads the events (``--flink-source``), and its columns' name."""


def flink_options(source: str, folder: Path, bootstrap: str, prefix: str) -> list[str]:
    """``jobs.py flink``'s options for reading the events' files or their topics."""
    if source == "kafka":
        return ["--bootstrap", bootstrap, "--prefix", prefix]
    return ["--folder", str(folder)]


def flink_checked(
    query: Query, folder: Path, options: list[str], want: list[Row], name: str = "Flink"
) -> bool:
    """Whether Flink's rows of the query are the reference's rows ``want``: the query run
    once more, its measurement unused, its rows collected (``jobs.py flink-rows``) rather
    than written to ``blackhole``; in the reference's columns. ``options``: where it
    reads the events (:func:`flink_options`)."""
    found, _ = _job("flink-rows", query, folder, options)
    if found["columns"] != list(COLUMNS[query.name]):
        print(f"{query.name}, {name}: columns {found['columns']}", file=sys.stderr, flush=True)
        return False
    return _report(name, query, normalised(found["rows"]), want)


def verdict(clockwork: list[bool], flink: dict[str, bool]) -> str:
    """The table's word on the checks: Clockwork's rows every round, each Flink run's
    once (by its name; none: Flink does not run the query)."""
    if not flink:
        return (
            ", the reference's (Flink: not run)"
            if all(clockwork)
            else ", NOT the reference's: Clockwork"
        )
    checks = {"Clockwork": all(clockwork), **flink}
    wrong = [name for name, ok in checks.items() if not ok]
    every = "both" if len(checks) == 2 else "all"
    return (
        f", {every} the reference's" if not wrong else f", NOT the reference's: {', '.join(wrong)}"
    )


def _median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def row(
    query: Query,
    read: int,
    generated: int,
    ours: list[Run],
    theirs: dict[str, list[Run]],
    check: str,
) -> str:
    """The query's line of the markdown table (:func:`header`'s columns): medians of its
    rounds; ``theirs``: Flink's runs per source (:data:`FLINK_SOURCES`), in the table's
    order; ``check``: what the checks of the engines' rows found. No Flink runs (q6):
    its cells say n/a."""
    a = read / _median(ours, "seconds")

    def rate(runs: list[Run]) -> float:
        return read / _median(runs, "seconds")

    def per_source(cell: Callable[[list[Run]], str]) -> list[str]:
        """A cell for each of Flink's sources, n/a where Flink did not run."""
        return [cell(runs) if runs else "n/a" for runs in theirs.values()]

    def each(ours_cell: str, cell: Callable[[list[Run]], str]) -> str:
        """Clockwork's figure, then Flink's per source, in one cell."""
        return " / ".join([ours_cell, *per_source(cell)])

    def per_million(field: str) -> Callable[[list[Run]], str]:
        return lambda runs: f"{_median(runs, field) * 1e6 / read:.1f}"

    kafka = theirs.get("kafka")
    cells = [
        query.name,
        f"{read:,}",
        f"{a:,.0f}",
        *per_source(lambda runs: f"{rate(runs):,.0f}"),
        *per_source(lambda runs: f"{a / rate(runs):.2f}"),
        *(each(per_million(f)(ours), per_million(f)) for f in ("job_cpu_s", "process_cpu_s")),
        each(
            f"{_median(ours, 'peak_rss_mb'):,.0f}",
            lambda runs: f"{_median(runs, 'peak_rss_mb'):,.0f}",
        ),
        per_million("broker_cpu_s")(ours)
        + (
            ""
            if kafka is None
            else " / " + (per_million("broker_cpu_s")(kafka) if kafka else "n/a")
        ),
        each(
            f"{generated / _median(ours, 'job_cpu_s'):,.0f}",
            lambda runs: f"{generated / _median(runs, 'job_cpu_s'):,.0f}",
        ),
        f"{PER_CORE[query.name]:,}" if query.name in PER_CORE else "n/a",
        f"{ours[-1].rows:,}{check}",
    ]
    return "| " + " | ".join(cells) + " |"


def header(sources: list[str]) -> str:
    """The table's header, Flink's columns for each of ``sources`` (:data:`FLINK_SOURCES`'
    keys, in order)."""
    names = [FLINK_SOURCES[s] for s in sources]
    engines = " / ".join(["Clockwork", *names])
    broker = "Clockwork" + (" / Flink (Kafka)" if "kafka" in sources else "")
    columns = [
        "query",
        "events read",
        "events/s Clockwork",
        *(f"events/s {n}" for n in names),
        *(f"ratio Clockwork / {n}" for n in names),
        f"CPU s per 1M read, job: {engines}",
        "CPU s per 1M read, whole process tree",
        f"peak RSS MB: {engines}",
        f"broker CPU s per 1M read, while {broker} ran",
        f"generated events per CPU s: {engines}",
        "Flink published, generated events per core-second",
        "Clockwork rows; every engine's checked against the reference",
    ]
    return "| " + " | ".join(columns) + " |\n" + "| --- " * len(columns) + "|"


NOT_IN_FLINK = (
    "q6 is Beam's Query6 (per seller, the average price of its last 10 winning bids), "
    "as Beam runs it: Flink does not run q6 (nexmark-flink's text is an OVER window over "
    "an updating join, and Flink's OVER window cannot take retractions); its rows are "
    "checked against the reference only."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", help="a comma-separated subset (default: every query)")
    parser.add_argument(
        "--flink-source",
        choices=("files", "kafka", "both"),
        default="files",
        help="where Flink reads the events: JSON-lines files (default), the generator's "
        "topics on Apache Kafka through Flink's Kafka connector (`make flink-kafka`), or "
        "both, a column each",
    )
    parser.add_argument(
        "--broker",
        choices=("tansu", "kafka"),
        help="the broker holding the topics Clockwork (and Flink reading Kafka) reads: the "
        "embedded Tansu, or Apache Kafka from its jars (`make kafka`); default tansu, or "
        "kafka when Flink reads Kafka (its Kafka source does not run against Tansu)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="instead: Clockwork alone, each query once under cProfile, stats to "
        "PROFILE/<query>.prof",
    )
    args = parser.parse_args(argv)
    sources = ["files", "kafka"] if args.flink_source == "both" else [args.flink_source]
    broker_name = args.broker or ("kafka" if "kafka" in sources else "tansu")
    if broker_name == "tansu" and "kafka" in sources:
        parser.error(
            "--flink-source kafka needs --broker kafka: Flink's Kafka source does not run "
            "against Tansu (it read 4 of 20,000 records and finished)"
        )
    from service.runtime.kafka.embedded_broker import EmbeddedBroker
    from tests.kafka.kafka_broker import KafkaBroker

    config = NexmarkConfig(events=args.events)
    prefix = f"nexmark-{uuid.uuid4().hex[:6]}"
    chosen = set(args.queries.split(",")) if args.queries else {q.name for q in QUERIES}
    with (
        tempfile.TemporaryDirectory(prefix="nexmark-") as tmp,
        EmbeddedBroker() if broker_name == "tansu" else KafkaBroker() as broker,
    ):
        folder = Path(tmp)
        events = by_kind(config)
        counts = write_files(events, folder)
        topics = {k: f"{prefix}.{k}" for k in KINDS}
        asyncio.run(produce(broker.bootstrap_servers, topics, config))
        clockwork = ["--bootstrap", broker.bootstrap_servers, "--prefix", prefix]
        # This process's only children yet: the broker (Apache Kafka's JVM, or Tansu).
        brokers = [p for p in descendants(os.getpid()) if p != os.getpid()]
        print(
            f"{args.events:,} events ({counts}), {args.rounds} rounds, medians; broker "
            f"{'Apache Kafka' if broker_name == 'kafka' else 'Tansu'}; Flink reads "
            + " and ".join("the events' files" if s == "files" else "Kafka" for s in sources)
        )
        if not args.profile:
            print(f"published: {SOURCE}\n{header(sources)}", flush=True)
        for query in (q for q in QUERIES if q.name in chosen):
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                profile = ["--profile", str(args.profile / f"{query.name}.prof")]
                run = measured("clockwork", query, folder, clockwork + profile, brokers)
                print(f"{query.name}: {run.seconds:.2f} s under cProfile", flush=True)
                continue
            want = reference(query, events)
            options = {
                s: flink_options(s, folder, broker.bootstrap_servers, prefix) for s in sources
            }
            ours: list[Run] = []
            theirs: dict[str, list[Run]] = {s: [] for s in sources}
            equal = []
            for _ in range(args.rounds):
                ours.append(measured("clockwork", query, folder, clockwork, brokers))
                equal.append(clockwork_checked(broker.bootstrap_servers, query, ours[-1], want))
                if query.flink:
                    for s in sources:
                        theirs[s].append(measured("flink", query, folder, options[s], brokers))
            flink = {
                FLINK_SOURCES[s]: flink_checked(query, folder, options[s], want, FLINK_SOURCES[s])
                for s in sources
                if query.flink
            }
            check = verdict(equal, flink)
            read = sum(counts[k] for k in query.tables)
            print(row(query, read, args.events, ours, theirs, check), flush=True)
        if not args.profile and any(not q.flink for q in QUERIES if q.name in chosen):
            print(NOT_IN_FLINK, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
