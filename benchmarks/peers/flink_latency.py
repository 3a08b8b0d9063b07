"""The latency benchmark's pipeline in Flink SQL with Flink's Kafka connector (issue #51).

``python -m benchmarks.peers.flink_latency BOOTSTRAP IN OUT default|low-latency
window|stateless [bounded]``

Run by ``benchmarks/latency.py`` with PyFlink (``apache-flink``, the ``flink`` extra) and
the connector jar ``benchmarks/peers/flink-kafka/jars/flink-sql-connector-kafka-*.jar``
(``make flink-kafka``: Maven Central through ``benchmarks/peers/flink-kafka/pom.xml``).
A Kafka source table over IN (JSON ``{"user","ts","amount"}``, event time ``ts``,
``WATERMARK FOR rowtime AS rowtime - INTERVAL '0.2' SECOND``), ``TUMBLE`` 1 s count
and sum per user, a Kafka sink table over OUT writing JSON
``{"window": {"start","end"}, "key", "result": {"n","total"}}``; or (``stateless``) the
records with ``amount < 6`` as ``{"key", "value"}``. Parallelism 1 (one process, as
Clockwork's one worker and Kafka Streams' one stream thread).

Prints ``{"running_ms": ...}`` once the job is RUNNING. With ``bounded`` the source
stops at the offsets current at the start (``scan.bounded.mode = latest-offset``), and
the job's net run time is printed as ``{"net_ms", "records"}`` when it finished: the
maximum-rate measurement over input written beforehand.

The settings (:func:`settings`): Flink's defaults, or with ``low-latency`` those Flink's
documentation gives for latency; docs/performance.md cites them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

JARS = Path(__file__).resolve().parent / "flink-kafka" / "jars"


def settings(low_latency: bool) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(job configuration, source table options, sink table options) beyond the
    pipeline's own."""
    conf: dict[str, str] = {}
    source: dict[str, str] = {}
    sink: dict[str, str] = {}
    if low_latency:
        # Watermarks from every record rather than every 200 ms (FLIP-296: the source
        # table's watermark emit strategy; the default is on-periodic, at
        # pipeline.auto-watermark-interval).
        source["scan.watermark.emit.strategy"] = "on-event"
        # Network buffers are sent when full or after this timeout (default 100 ms);
        # docs: "To minimize latency, set the timeout to a value close to 0 (for example
        # 5 or 10 ms)".
        conf["execution.buffer-timeout.interval"] = "5 ms"
        # The Kafka producer sends at once (kafka-clients' default linger.ms is 5).
        sink["properties.linger.ms"] = "0"
    return conf, source, sink


def with_clause(options: dict[str, str]) -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in options.items())


def main(argv: list[str]) -> int:
    bootstrap, topic_in, topic_out, mode, pipeline = argv[:5]
    bounded = len(argv) > 5 and argv[5] == "bounded"
    from pyflink.common import JobStatus
    from pyflink.table import EnvironmentSettings, TableEnvironment

    jars = sorted(JARS.glob("flink-sql-connector-kafka-*.jar"))
    if not jars:
        raise SystemExit(f"no connector jar in {JARS}: run `make flink-kafka`")
    conf, source_opts, sink_opts = settings(mode == "low-latency")
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("pipeline.jars", ";".join(j.as_uri() for j in jars))
    config.set("parallelism.default", "1")
    config.set("table.local-time-zone", "UTC")
    config.set("pipeline.name", f"clockwork-latency-{mode}")
    for key, value in conf.items():
        config.set(key, value)
    source = {
        "connector": "kafka",
        "topic": topic_in,
        "properties.bootstrap.servers": bootstrap,
        "properties.group.id": f"flink-{topic_in}",
        "scan.startup.mode": "earliest-offset",
        "format": "json",
        **({"scan.bounded.mode": "latest-offset"} if bounded else {}),
        **source_opts,
    }
    sink = {
        "connector": "kafka",
        "topic": topic_out,
        "properties.bootstrap.servers": bootstrap,
        "format": "json",
        **sink_opts,
    }
    env.execute_sql(f"""
        CREATE TABLE events (
            `user` STRING,
            `ts` BIGINT,
            `amount` BIGINT,
            rowtime AS TO_TIMESTAMP_LTZ(`ts`, 3),
            WATERMARK FOR rowtime AS rowtime - INTERVAL '0.2' SECOND
        ) WITH ({with_clause(source)})
    """)
    if pipeline == "stateless":
        env.execute_sql(f"""
            CREATE TABLE results (
                `key` STRING,
                `value` ROW<`user` STRING, `ts` BIGINT, `amount` BIGINT>
            ) WITH ({with_clause(sink)})
        """)
        result = env.execute_sql("""
            INSERT INTO results
            SELECT `user`, ROW(`user`, `ts`, `amount`) FROM events WHERE amount < 6
        """)
    else:
        env.execute_sql(f"""
            CREATE TABLE results (
                `window` ROW<`start` BIGINT, `end` BIGINT>,
                `key` STRING,
                `result` ROW<`n` BIGINT, `total` BIGINT>
            ) WITH ({with_clause(sink)})
        """)
        epoch = "TIMESTAMP '1970-01-01 00:00:00'"
        result = env.execute_sql(f"""
            INSERT INTO results
            SELECT ROW(CAST(TIMESTAMPDIFF(SECOND, {epoch}, window_start) AS BIGINT) * 1000,
                       CAST(TIMESTAMPDIFF(SECOND, {epoch}, window_end) AS BIGINT) * 1000),
                   `user`,
                   ROW(COUNT(*), SUM(amount))
            FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rowtime), INTERVAL '1' SECOND))
            GROUP BY `user`, window_start, window_end
        """)
    client = result.get_job_client()
    assert client is not None
    if bounded:
        net_ms = client.get_job_execution_result().result().get_net_runtime()
        print(json.dumps({"net_ms": net_ms}), flush=True)
        return 0
    while client.get_job_status().result() != JobStatus.RUNNING:
        time.sleep(0.05)
    print(json.dumps({"running_ms": int(time.time() * 1000)}), flush=True)
    result.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
