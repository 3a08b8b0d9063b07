"""Flink SQL (PyFlink) runner on Kafka: ``TUMBLE`` over a Kafka source table with
``WATERMARK FOR rowtime AS rowtime - INTERVAL '2' SECOND``, count and sum per user,
written by a Kafka sink table as JSON ``{"user","start","end","count","sum"}``.
Streaming mode, parallelism 1.

Flink's Kafka connector, ``flink-sql-connector-kafka`` 5.0.0-2.2 from Maven Central
(``make flink-kafka`` puts it in ``benchmarks/peers/flink-kafka/jars/``), passed as
``pipeline.jars``. The source reads from the earliest offsets and stops at those current
when the job starts (``scan.bounded.mode = latest-offset``): at the end of the bounded
input Flink emits the final watermark, so every window fires once, and the sink flushes
its producer when the job ends. Every other setting is Flink's and the connector's
default (their throughput defaults: periodic watermarks every 200 ms, 100 ms network
buffer timeout, the sink at-least-once with kafka-clients' batching, no checkpoints),
but the group consumer's settings every peer gets against the embedded broker
(``_common.py``).

Timing: as the file-reading runner (flink.py), the job's net run time
(``JobExecutionResult.get_net_runtime``), from the job's start to its end, so JVM and
mini-cluster start-up are left out of the rate; the process's wall time includes them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _common import (
    FETCH_MAX_WAIT_MS,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    Report,
    parse_args,
)
from flink import run_w1

JARS = Path(__file__).resolve().parent / "flink-kafka" / "jars"


def main() -> int:
    args = parse_args(__doc__ or "")
    from importlib.metadata import version

    from pyflink.table import EnvironmentSettings, TableEnvironment

    jars = sorted(JARS.glob("flink-sql-connector-kafka-*.jar"))
    if not jars:
        raise SystemExit(f"no connector jar in {JARS}: run `make flink-kafka`")
    report = Report("Flink SQL (PyFlink), Kafka connector", version("apache-flink"))
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("pipeline.jars", ";".join(j.as_uri() for j in jars))
    conf.set("parallelism.default", "1")
    conf.set("table.local-time-zone", "UTC")
    conf.set("pipeline.name", "clockwork-bench-kafka")
    source = ", ".join(
        f"'{k}' = '{v}'"
        for k, v in {
            "connector": "kafka",
            "topic": args.input_topic,
            "properties.bootstrap.servers": args.bootstrap,
            "properties.group.id": args.group,
            "properties.fetch.max.wait.ms": FETCH_MAX_WAIT_MS,
            "properties.session.timeout.ms": SESSION_TIMEOUT_MS,
            "properties.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "scan.startup.mode": "earliest-offset",
            "scan.bounded.mode": "latest-offset",
            "format": "json",
        }.items()
    )
    sink = ", ".join(
        f"'{k}' = '{v}'"
        for k, v in {
            "connector": "kafka",
            "topic": args.output_topic,
            "properties.bootstrap.servers": args.bootstrap,
            "format": "json",
        }.items()
    )
    return run_w1(env, args, report, source, sink)


if __name__ == "__main__":
    sys.exit(main())
