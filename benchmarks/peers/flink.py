"""Flink SQL (PyFlink) runner: ``TUMBLE`` over a filesystem JSON source with
``WATERMARK FOR rowtime AS rowtime - INTERVAL '2' SECOND``, count and sum per user,
written by the filesystem sink as JSON lines. Streaming mode, parallelism 1.

PyFlink reads a file rather than the topic here: Flink's Kafka connector is a separate
jar (flink-sql-connector-kafka, not shipped with the PyPI package), which flink_kafka.py
adds to run the same job (:func:`run_w1`) over Kafka. The file holds the same records
in the same order as the topic (one partition's worth of ordering: the whole input in
order). At the end of the bounded input Flink emits the final watermark, so every window
fires once. The filesystem sink commits its files on checkpoints, so checkpointing is on
(the final checkpoint commits).

Timing: the job's net run time (``JobExecutionResult.get_net_runtime``), from the
job's start to its end, so JVM and mini-cluster start-up are left out of the rate;
the process's wall time includes them.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from _common import OUT_OF_ORDERNESS_MS, WINDOW_MS, Report, parse_args


def main() -> int:
    args = parse_args(__doc__ or "")
    from importlib.metadata import version

    from pyflink.table import EnvironmentSettings, TableEnvironment

    report = Report("Flink SQL (PyFlink)", version("apache-flink"))
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", "1")
    conf.set("table.local-time-zone", "UTC")
    conf.set("execution.checkpointing.interval", "1 s")
    conf.set("pipeline.name", "clockwork-bench")
    source = f"'connector' = 'filesystem', 'path' = '{args.input_file}', 'format' = 'json'"
    sink = f"'connector' = 'filesystem', 'path' = '{args.output_dir}', 'format' = 'json'"
    return run_w1(env, args, report, source, sink)


def run_w1(env: Any, args: Any, report: Report, source: str, sink: str) -> int:
    """W1 in Flink SQL over the ``events`` table ``source`` (a WITH clause's options)
    into the ``results`` table ``sink``, timed by the job's net run time into ``report``:
    the same job whatever the connectors (flink_kafka.py runs it over Kafka)."""
    env.execute_sql(f"""
        CREATE TABLE events (
            `user` STRING,
            `ts` BIGINT,
            `amount` DOUBLE,
            rowtime AS TO_TIMESTAMP_LTZ(`ts`, 3),
            WATERMARK FOR rowtime AS rowtime - INTERVAL '{OUT_OF_ORDERNESS_MS // 1000}' SECOND
        ) WITH ({source})
    """)
    env.execute_sql(f"""
        CREATE TABLE results (
            `user` STRING, `start` BIGINT, `end` BIGINT, `count` BIGINT, `sum` DOUBLE
        ) WITH ({sink})
    """)
    epoch = "TIMESTAMP '1970-01-01 00:00:00'"
    t0 = time.time()
    result = env.execute_sql(f"""
        INSERT INTO results
        SELECT `user`,
               CAST(TIMESTAMPDIFF(SECOND, {epoch}, window_start) AS BIGINT) * 1000,
               CAST(TIMESTAMPDIFF(SECOND, {epoch}, window_end) AS BIGINT) * 1000,
               COUNT(*),
               SUM(amount)
        FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rowtime),
                          INTERVAL '{WINDOW_MS // 1000}' SECOND))
        GROUP BY `user`, window_start, window_end
    """)
    result.wait()
    report.finished = time.time()
    try:
        net_ms = result.get_job_client().get_job_execution_result().result().get_net_runtime()
        report.first_record = report.finished - net_ms / 1000
        report.notes.append(f"net run time {net_ms} ms; submit to end {report.finished - t0:.2f}s")
    except Exception as exc:  # the job client may be gone in some versions: fall back
        report.first_record = t0
        report.notes.append(f"no net run time ({exc!r}); rate from submission")
    report.records_in = args.records
    report.write(args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
