"""Flink SQL's interval join over ``benchmarks/e2e_join.py``'s orders and payments.

``python -m benchmarks.flink_join ORDERS PAYMENTS [--rows OUT_DIR]`` runs, on PyFlink's
local MiniCluster (streaming mode, parallelism 1, every other setting Flink's default),

    SELECT ... FROM orders o LEFT JOIN payments p
      ON o.`order` = p.`order`
     AND p.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '60' SECOND

over JSON-lines files holding the same records as the Kafka topics, in the same order,
each side's watermark 2 s behind its largest event time, as Clockwork's join runs it.
Without ``--rows`` the rows go to the ``blackhole`` connector (the timed run, as
nexmark-flink's queries write) and the job's net run time and the process tree's CPU
seconds while it ran (the JVM is this process's child) are printed as JSON; with
``--rows`` they are collected (``to_pandas``: Arrow batches) and written to the file
OUT as JSON lines instead (the check's run, not timed).

Flink reads files because PyFlink's package has no Kafka connector (see
benchmarks/peers/flink.py): neither side's time then includes a broker's, but
Clockwork's includes its Kafka reads and writes, so the comparison favours Flink.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks.peers.measure import tree_usage

UPPER_S = 60
BOUND_S = 2


def tables(env: object, orders: str, payments: str) -> None:
    for name, path, ts in (("orders", orders, "ts"), ("payments", payments, "paid_at")):
        env.execute_sql(  # type: ignore[attr-defined]
            f"""
            CREATE TABLE {name} (
                `order` STRING, `user` STRING, `{ts}` BIGINT, `amount` BIGINT,
                rowtime AS TO_TIMESTAMP_LTZ(`{ts}`, 3),
                WATERMARK FOR rowtime AS rowtime - INTERVAL '{BOUND_S}' SECOND
            ) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')
            """
        )


QUERY = f"""
    SELECT o.`order`, o.`user`, o.ts, p.paid_at
    FROM orders o LEFT JOIN payments p
      ON o.`order` = p.`order`
     AND p.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '{UPPER_S}' SECOND
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("orders")
    parser.add_argument("payments")
    parser.add_argument("--rows", default=None, help="write the rows to this file (not timed)")
    args = parser.parse_args(argv)
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", "1")
    config.set("table.local-time-zone", "UTC")
    tables(env, args.orders, args.payments)
    if args.rows:
        frame = env.sql_query(QUERY).to_pandas()
        with open(args.rows, "w") as out:
            for order, paid_at in zip(frame["order"], frame["paid_at"], strict=True):
                paid = None if paid_at is None or paid_at != paid_at else int(paid_at)
                out.write(json.dumps({"order": order, "paid_at": paid}) + "\n")
        return 0
    columns = "`order` STRING, `user` STRING, ts BIGINT, paid_at BIGINT"
    env.execute_sql(f"CREATE TABLE sink ({columns}) WITH ('connector' = 'blackhole')")
    result = env.execute_sql(f"INSERT INTO sink {QUERY}")
    cpu_started = tree_usage(os.getpid())[1]
    client = result.get_job_client()
    if client is None:  # pragma: no cover (an INSERT always submits a job)
        raise RuntimeError("Flink submitted no job")
    net_ms = client.get_job_execution_result().result().get_net_runtime()
    cpu = tree_usage(os.getpid())[1] - cpu_started
    print(json.dumps({"seconds": net_ms / 1000, "cpu_s": cpu}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
