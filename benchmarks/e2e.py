"""End-to-end benchmark of the runtime: Kafka in, windows, Kafka out, bounded mode.

``python -m benchmarks.e2e [--events N] [--broker tansu|kafka | --bootstrap HOST:PORT]
[--profile] [--steps] [--shuffle] [--exactly-once] [--state-backend rocksdb]``

The standard workload (``benchmarks/workload.py``: 1M JSON records ``{"user","ts",
"amount"}``, 10k users, ts ~1 ms apart, up to 1.5 s out of order, seeded) is produced
to a 4-partition topic keyed by user. Then, in the same run and against the same topic:

1. the raw ceiling: an aiokafka consumer ``getmany``-ing every partition up to its fetch
   high watermark, nothing else;
2. the pipeline: tumbling 60 s count + sum, bounded out-of-orderness 2 s, bounded mode,
   timed from ``start_pipeline`` to the state ``finished`` (consumer group join and
   changelog restore included), and its output checked against the expected windows.

The ratio of the two rates is the number to watch (target: at least 60%).
Without ``--bootstrap`` a broker is started and stopped: ``--broker tansu`` (default)
the embedded one, ``--broker kafka`` Apache Kafka 4 as the integration tests run it
(one KRaft node from the jars ``make kafka`` resolves, ``tests/kafka/kafka_broker.py``).

``--steps`` then runs the same pipeline again with steps (:data:`STEPS`: a filter, two
computed fields and a projection) on the same topic, checked the same way, and reports
its rate and CPU per record beside the plain pipeline's.

``--operator`` runs a keyed process pipeline on the same input instead of the windows:
``inactivity_timeout`` (the built-in, 10 minutes) or ``quiet`` (the user function
``examples.udf.quiet:CountUntilQuiet``, 10 minutes: two value states and an event-time
timer moved per record). The bounded end fires every key's timer, so the output is one
record per key, checked exactly (the key's last event time, and its count for ``quiet``).

``--shuffle`` adds, in the same run, the same events keyed by order id (so every user is
spread over all partitions) to a second topic, and runs the same windows over it as a
shuffled pipeline (two stages through the shuffle topic, semantics.md section 8),
checked as exactly; the number to watch is its rate against the unshuffled pipeline's
(target: at least 50%).

``--format avro|protobuf|json_schema`` (issue 35) re-encodes the same events in that
format (Confluent's wire format, the schema registered in an Apicurio Registry started
for the run: tests/registry/, ``make registry``) to a second topic, and runs the same
pipeline over it with ``source.format`` set, checked the same way; the number to watch
is its rate against the JSON pipeline's over the same events in the same run (target: at
least 1.0).

``--running`` (issue 50) runs the same count and sum per user with no window on the same
topic (a running aggregate, an upsert per changed user every second), its upserts folded
by key and checked against each user's totals; the numbers to watch are its rate against
the windowed pipeline's in the same run (target: at least 1.0) and its output records
per second, bounded by the users changed per second.

``--state-backend rocksdb`` (issue 53) runs the same pipeline again on the same topic
with its windows' keys in RocksDB (``state.backend: rocksdb``, the stores in a temporary
directory, ``--cache-bytes`` per partition, default 64 MiB), checked the same way, and
reports its rate beside the memory backend's (target: at least 0.6 of it).

``--exactly-once`` runs the same pipeline again on the same topic with
``delivery: exactly_once`` (Kafka transactions: ``--broker kafka``), its output read
``read_committed`` and checked the same way, and reports its rate beside the
at-least-once pipeline's: the cost of exactly-once.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
import tempfile
import time
import uuid
from typing import Any

from benchmarks.workload import (
    Workload,
    check_results,
    end_markers,
    expected_results,
    generate,
    kafka_records,
    keyed_by_order,
    normalise,
    produce,
    read_topic,
)

OPERATOR = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 60_000},
    "time": "event",
    "trigger": {"type": "event_time"},
    "aggregations": {"count": {"fn": "count"}, "sum": {"fn": "sum", "field": "amount"}},
}


RUNNING = {
    "type": "aggregate",
    "aggregations": OPERATOR["aggregations"],
    "emit_interval_ms": 1000,
}
"""``--running``: the same count and sum per user with no window, an upsert per changed
user every second (issue 50)."""


STEPS: list[dict[str, Any]] = [
    {"filter": "amount >= 0"},  # keeps every record: the windows stay checkable
    {
        "set": {
            "cents": "CAST(amount * 100 AS BIGINT)",
            "tier": "CASE WHEN amount >= 250 THEN 'high' ELSE 'low' END",
        }
    },
    {"select": ["user", "ts", "amount", "cents", "tier"]},
]
"""``--steps``: a filter, two computed fields and a projection (benchmarks/steps.py's,
keeping ``amount`` for the sum)."""

PROCESS_FUNCTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "inactivity_timeout": ("inactivity_timeout", {"timeout_ms": 600_000}),
    "quiet": ("examples.udf.quiet:CountUntilQuiet", {"quiet_ms": 600_000}),
}


def expected_per_key(workload: Workload) -> dict[str, tuple[int, int]]:
    """``key -> (records, last event time)`` of the input, end markers included."""
    seen: dict[str, tuple[int, int]] = {}
    for event in (*generate(workload), *end_markers(workload)):
        count, last = seen.get(event.user, (0, event.ts))
        seen[event.user] = (count + 1, max(last, event.ts))
    return seen


def check_process_results(
    operator: str, values: list[dict[str, Any]], expected: dict[str, tuple[int, int]]
) -> tuple[bool, str]:
    """One output per key with its last event time (and count, for ``quiet``)."""
    got: dict[str, tuple[int | None, int]] = {}
    for row in values:
        value = row["value"]
        count = value.get("count") if operator == "quiet" else None
        got[row["key"]] = (count, value["last_seen"])
    want = {
        key: (count if operator == "quiet" else None, last)
        for key, (count, last) in expected.items()
    }
    wrong = sum(1 for key in want if got.get(key) != want[key])
    ok = len(values) == len(want) and wrong == 0
    return ok, f"{len(values)} outputs for {len(want)} keys, {wrong} wrong"


def check_running(values: list[dict[str, Any]], workload: Workload) -> tuple[bool, str]:
    """The upserts folded by key (a key's are in one partition, in order) against each
    user's count and sum over the whole input, end markers included."""
    want: dict[str, tuple[int, int]] = {}
    for event in (*generate(workload), *end_markers(workload)):
        count, cents = want.get(event.user, (0, 0))
        want[event.user] = (count + 1, cents + event.cents)
    folded = {row["key"]: row["result"] for row in values}
    got = {key: (r["count"], round(r["sum"] * 100)) for key, r in folded.items()}
    wrong = sum(1 for key in want if got.get(key) != want[key])
    ok = wrong == 0 and len(got) == len(want)
    return ok, f"{len(values)} upserts fold to {len(got)} keys of {len(want)}, {wrong} wrong"


async def raw_consume(bootstrap: str, topic: str) -> tuple[int, float, float]:
    """Read ``topic`` to its high watermark; returns (records, seconds, CPU seconds)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
        max_partition_fetch_bytes=4 << 20,
    )
    started = time.perf_counter()
    cpu_started = time.process_time()
    await consumer.start()
    seen = 0
    try:
        parts = await consumer._client._wait_on_metadata(topic)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        remaining = set(tps)
        while remaining:
            batch = await consumer.getmany(timeout_ms=100, max_records=20_000)
            for records in batch.values():
                seen += len(records)
            for tp in list(remaining):
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= highwater:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return seen, time.perf_counter() - started, time.process_time() - cpu_started


async def run_pipeline(
    bootstrap: str,
    topic: str,
    name: str,
    workload: Workload,
    checkpoint_interval_ms: int,
    prefetch_max_records: int | None = None,
    operator: str = "window",
    shuffle: bool = False,
    steps: list[dict[str, Any]] | None = None,
    delivery: str = "at_least_once",
    fmt: str = "json",
    registry_url: str | None = None,
    state: tuple[str, int] | None = None,
) -> tuple[float, float, float]:
    """Run the bounded pipeline to ``finished``; returns (seconds, CPU seconds, startup
    seconds: from the start to the first processed records, i.e. the group join and
    the changelog restore, within 20 ms).

    CPU seconds are this process's (the broker is another process): on a loaded machine
    they vary much less than the wall time, so they compare changes better. ``state``:
    the state backend and its cache bytes (None: memory), the stores in a temporary
    directory removed after the run.
    """
    from service.operators.steps import StepProgram
    from service.runtime.definition import (
        FormatSettings,
        PipelineDefinition,
        ShuffleSettings,
        SinkSettings,
        StateSettings,
        TimestampSettings,
        WatermarkSettings,
    )
    from service.runtime.factories import process_operator_factory, window_operator_factory
    from service.runtime.lifecycle.manager import Runtime
    from service.runtime.observability.status import PipelineState
    from service.runtime.settings import RuntimeSettings, SchemaRegistrySettings

    if operator == "window":
        factory = window_operator_factory(name, OPERATOR, late_output=False)
    elif operator == "running":
        from service.runtime.factories import running_aggregate_factory

        factory = running_aggregate_factory(
            name, RUNNING, emit_at_checkpoint=delivery == "exactly_once"
        )
    else:
        function, params = PROCESS_FUNCTIONS[operator]
        factory = process_operator_factory(name, function, params, ("examples",))
    definition = PipelineDefinition(
        name=name,
        topics=(topic,),
        sink=SinkSettings(topic=f"{name}.out", dead_letter_topic=f"{name}.dlq"),
        operator_factory=factory,
        key_field="user",
        shuffle=ShuffleSettings() if shuffle else None,
        timestamp=TimestampSettings(source="field", field="ts"),
        watermark=WatermarkSettings(
            max_out_of_orderness_ms=workload.out_of_orderness_ms, interval_ms=200
        ),
        bounded=True,
        steps=StepProgram(steps) if steps else None,
        delivery="exactly_once" if delivery == "exactly_once" else "at_least_once",
        format=FormatSettings(kind=fmt),  # type: ignore[arg-type]
    )
    directory = tempfile.TemporaryDirectory(prefix="bench-e2e-state-")
    if state is not None:
        backend, cache_bytes = state
        definition = dataclasses.replace(
            definition,
            state=StateSettings(backend, cache_bytes),  # type: ignore[arg-type]
        )
    settings = RuntimeSettings(
        bootstrap_servers=bootstrap,
        session_timeout_ms=2000,  # the group join on Tansu waits half of it
        checkpoint_interval_ms=checkpoint_interval_ms,
        schema_registry=SchemaRegistrySettings(url=registry_url) if registry_url else None,
        state_dir=directory.name,
    )
    if prefetch_max_records is not None:
        settings = dataclasses.replace(settings, prefetch_max_records=prefetch_max_records)
    runtime = Runtime(settings)
    await runtime.start()
    try:
        started = time.perf_counter()
        cpu_started = time.process_time()
        runtime.start_pipeline(definition)
        finished = asyncio.ensure_future(
            runtime.runner(name).wait_for_state(PipelineState.FINISHED, timeout_s=600)
        )
        first_records = None
        while not finished.done():  # when the first records were processed: startup ends
            if first_records is None and runtime.status(name).records_in:
                first_records = time.perf_counter()
            await asyncio.sleep(0.02)
        await finished
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        status = runtime.status(name)
        if status.records_in != workload.events + workload.partitions:
            raise RuntimeError(f"pipeline read {status.records_in} records")
    finally:
        await runtime.shutdown()
        directory.cleanup()
    startup = (first_records or started) - started
    return elapsed, cpu, startup


async def bench(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    workload = Workload(events=args.events)
    records = kafka_records(workload)
    topic = f"bench-e2e-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    await produce(records, bootstrap, topic, workload.partitions)
    produce_s = time.perf_counter() - started
    total = len(records)

    raw_records, raw_s, raw_cpu_s = await raw_consume(bootstrap, topic)
    if raw_records != total:
        raise RuntimeError(f"raw consume read {raw_records} of {total}")
    name = topic.replace("bench-e2e", "e2e")
    pipeline = run_pipeline(
        bootstrap,
        topic,
        name,
        workload,
        args.checkpoint_interval_ms,
        args.prefetch_max_records,
        args.operator,
    )
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        pipeline_s, pipeline_cpu_s, startup_s = await pipeline
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    else:
        pipeline_s, pipeline_cpu_s, startup_s = await pipeline

    stepped: dict[str, Any] = {}
    if args.steps:  # the same pipeline with steps, on the same topic, right after
        steps_name = f"{name}-steps"
        steps_s, steps_cpu_s, steps_startup_s = await run_pipeline(
            bootstrap,
            topic,
            steps_name,
            workload,
            args.checkpoint_interval_ms,
            args.prefetch_max_records,
            args.operator,
            steps=STEPS,
        )
        rows = [json.loads(v) for v in await read_topic(bootstrap, f"{steps_name}.out")]
        steps_check = check_results([normalise(r) for r in rows], expected_results(workload))
        stepped = {
            "steps": STEPS,
            "steps_pipeline_records_per_s": round(total / steps_s),
            "steps_pipeline_after_startup_records_per_s": round(
                total / (steps_s - steps_startup_s)
            ),
            "steps_pipeline_cpu_us_per_record": round(steps_cpu_s / total * 1e6, 2),
            "steps_check": steps_check.summary(),
            "steps_ok": steps_check.ok,
        }

    ok, summary = await check_outputs(bootstrap, f"{name}.out", args.operator, workload)
    report = {
        "operator": args.operator,
        "records": total,
        "produce_records_per_s": round(total / produce_s),
        "raw_consume_records_per_s": round(total / raw_s),
        "pipeline_records_per_s": round(total / pipeline_s),
        "pipeline_seconds": round(pipeline_s, 3),
        "pipeline_startup_seconds": round(startup_s, 3),
        "pipeline_after_startup_records_per_s": round(total / (pipeline_s - startup_s)),
        "ratio": round(raw_s / pipeline_s, 3),
        "raw_cpu_us_per_record": round(raw_cpu_s / total * 1e6, 2),
        "pipeline_cpu_us_per_record": round(pipeline_cpu_s / total * 1e6, 2),
        "checkpoint_interval_ms": args.checkpoint_interval_ms,
        "check": summary,
        "ok": ok and stepped.get("steps_ok", True),
        **stepped,
    }
    if args.exactly_once:  # the same pipeline in transactions, on the same topic, right after
        eos_name = f"{name}-eos"
        eos_s, eos_cpu_s, _ = await run_pipeline(
            bootstrap,
            topic,
            eos_name,
            workload,
            args.checkpoint_interval_ms,
            args.prefetch_max_records,
            args.operator,
            delivery="exactly_once",
        )
        eos_ok, eos_summary = await check_outputs(
            bootstrap, f"{eos_name}.out", args.operator, workload, "read_committed"
        )
        report.update(
            {
                "exactly_once_records_per_s": round(total / eos_s),
                "exactly_once_seconds": round(eos_s, 3),
                "exactly_once_vs_at_least_once": round(pipeline_s / eos_s, 3),
                "exactly_once_cpu_us_per_record": round(eos_cpu_s / total * 1e6, 2),
                "exactly_once_check": eos_summary,
                "ok": report["ok"] and eos_ok,
            }
        )
    if args.state_backend == "rocksdb":  # the same windows' keys in RocksDB, right after
        rocks = f"{name}-rocksdb"
        rocks_s, rocks_cpu_s, _ = await run_pipeline(
            bootstrap,
            topic,
            rocks,
            workload,
            args.checkpoint_interval_ms,
            args.prefetch_max_records,
            args.operator,
            state=("rocksdb", args.cache_bytes),
        )
        rocks_ok, rocks_summary = await check_outputs(
            bootstrap, f"{rocks}.out", args.operator, workload
        )
        report.update(
            {
                "rocksdb_records_per_s": round(total / rocks_s),
                "rocksdb_seconds": round(rocks_s, 3),
                "rocksdb_vs_memory": round(pipeline_s / rocks_s, 3),
                "rocksdb_cpu_us_per_record": round(rocks_cpu_s / total * 1e6, 2),
                "rocksdb_cache_bytes": args.cache_bytes,
                "rocksdb_check": rocks_summary,
                "ok": report["ok"] and rocks_ok,
            }
        )
    if args.running:  # the same aggregates with no window, on the same topic, right after
        running = f"{name}-running"
        running_s, running_cpu_s, _ = await run_pipeline(
            bootstrap,
            topic,
            running,
            workload,
            args.checkpoint_interval_ms,
            args.prefetch_max_records,
            "running",
        )
        values = [json.loads(v) for v in await read_topic(bootstrap, f"{running}.out")]
        running_ok, running_summary = check_running(values, workload)
        report.update(
            {
                "running_records_per_s": round(total / running_s),
                "running_vs_windowed": round(pipeline_s / running_s, 3),
                "running_cpu_us_per_record": round(running_cpu_s / total * 1e6, 2),
                "running_output_records": len(values),
                "running_output_records_per_s": round(len(values) / running_s),
                "running_check": running_summary,
                "ok": report["ok"] and running_ok,
            }
        )
    if args.format:
        formatted = await bench_format(args, bootstrap, records, topic, workload, pipeline_s)
        report.update(formatted, ok=report["ok"] and formatted["format_ok"])
    if args.shuffle:
        by_order = f"{topic}-by-order"
        await produce(
            keyed_by_order(records, workload.partitions), bootstrap, by_order, workload.partitions
        )
        shuffled = by_order.replace("bench-e2e", "e2e")
        shuffled_s, shuffled_cpu_s, _ = await run_pipeline(
            bootstrap,
            by_order,
            shuffled,
            workload,
            args.checkpoint_interval_ms,
            args.prefetch_max_records,
            args.operator,
            shuffle=True,
        )
        shuffled_ok, shuffled_summary = await check_outputs(
            bootstrap, f"{shuffled}.out", args.operator, workload
        )
        report.update(
            {
                "shuffled_records_per_s": round(total / shuffled_s),
                "shuffled_seconds": round(shuffled_s, 3),
                "shuffled_vs_unshuffled": round(pipeline_s / shuffled_s, 3),
                "shuffled_cpu_us_per_record": round(shuffled_cpu_s / total * 1e6, 2),
                "shuffled_check": shuffled_summary,
                "ok": report["ok"] and shuffled_ok,
            }
        )
    return report


async def bench_format(
    args: argparse.Namespace,
    bootstrap: str,
    records: list[Any],
    topic: str,
    workload: Workload,
    json_s: float,
) -> dict[str, Any]:
    """The same events in ``args.format``, the same pipeline over them, checked."""
    from benchmarks.formats import encode_records, register

    fmt = args.format
    encoded_topic = f"{topic}-{fmt.replace('_', '-')}"
    schema_id = await register(args.registry_url, f"{encoded_topic}-value", fmt)
    encoded = encode_records(records, fmt, schema_id)
    await produce(encoded, bootstrap, encoded_topic, workload.partitions)
    name = encoded_topic.replace("bench-e2e", "e2e")
    fmt_s, fmt_cpu_s, _ = await run_pipeline(
        bootstrap,
        encoded_topic,
        name,
        workload,
        args.checkpoint_interval_ms,
        args.prefetch_max_records,
        fmt=fmt,
        registry_url=args.registry_url,
    )
    ok, summary = await check_outputs(bootstrap, f"{name}.out", "window", workload)
    total = len(records)
    return {
        "format": fmt,
        "format_value_bytes": sum(len(r[2]) for r in encoded),
        "json_value_bytes": sum(len(r[2]) for r in records),
        "format_records_per_s": round(total / fmt_s),
        "format_seconds": round(fmt_s, 3),
        "format_vs_json": round(json_s / fmt_s, 3),
        "format_cpu_us_per_record": round(fmt_cpu_s / total * 1e6, 2),
        "format_check": summary,
        "format_ok": ok,
    }


async def check_outputs(
    bootstrap: str,
    topic: str,
    operator: str,
    workload: Workload,
    isolation_level: str = "read_uncommitted",
) -> tuple[bool, str]:
    """Whether ``topic`` holds exactly the expected results; and a summary."""
    values = await read_topic(bootstrap, topic, isolation_level=isolation_level)
    outputs = [json.loads(v) for v in values]
    if operator == "window":
        check = check_results([normalise(row) for row in outputs], expected_results(workload))
        return check.ok, check.summary()
    return check_process_results(operator, outputs, expected_per_key(workload))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", default=None, help="an existing broker (no --broker)")
    parser.add_argument(
        "--broker",
        choices=["tansu", "kafka"],
        default="tansu",
        help="the broker to start when --bootstrap is not given (default: tansu)",
    )
    parser.add_argument("--checkpoint-interval-ms", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="cProfile the pipeline run")
    parser.add_argument(
        "--steps",
        action="store_true",
        help="also run the same pipeline with steps (filter, 2 computed fields, projection)",
    )
    parser.add_argument(
        "--prefetch-max-records",
        type=int,
        default=None,
        help="records read during the group join (default: the runtime's; 0: none)",
    )
    parser.add_argument(
        "--operator",
        choices=["window", *PROCESS_FUNCTIONS],
        default="window",
        help="the pipeline's operator (default: the standard tumbling windows)",
    )
    parser.add_argument(
        "--running",
        action="store_true",
        help="also the same count and sum per user with no window (an upsert stream)",
    )
    parser.add_argument(
        "--shuffle",
        action="store_true",
        help="also run the same events keyed by order id through a shuffled pipeline",
    )
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="also run the same pipeline with delivery exactly_once (needs --broker kafka)",
    )
    parser.add_argument(
        "--state-backend",
        choices=["memory", "rocksdb"],
        default="memory",
        help="rocksdb: also run the same pipeline with its keys in RocksDB",
    )
    parser.add_argument(
        "--cache-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="with --state-backend rocksdb: each partition's write-back cache",
    )
    parser.add_argument(
        "--format",
        choices=["avro", "protobuf", "json_schema"],
        default=None,
        help="also run the same events in this format through a schema registry",
    )
    args = parser.parse_args(argv)
    args.registry_url = None
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.profile:
        logging.getLogger("service.runtime").setLevel(logging.INFO)
    registry = None
    if args.format:
        from tests.registry.apicurio_registry import ApicurioRegistry

        registry = ApicurioRegistry().start()
        args.registry_url = registry.url
    try:
        report = run_bench(args)
    finally:
        if registry is not None:
            registry.close()
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    if args.bootstrap:
        report = asyncio.run(bench(args, args.bootstrap))
        report["broker"] = args.bootstrap
    else:
        from service.runtime.kafka.embedded_broker import EmbeddedBroker
        from tests.kafka.kafka_broker import KafkaBroker

        with EmbeddedBroker() if args.broker == "tansu" else KafkaBroker() as broker:
            report = asyncio.run(bench(args, broker.bootstrap_servers))
        report["broker"] = args.broker
    return report


if __name__ == "__main__":
    sys.exit(main())
