"""`python -m service.compaction` as an operator runs it: a subprocess, its own Spark."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from service.runtime.kafka.clients import KafkaCluster
from tests.integration.kafka_utils import create_topic as create_kafka_topic
from tests.integration.kafka_utils import json_record
from tests.integration.kafka_utils import produce as produce_records
from tests.integration.secure_kafka import SECRETS, Pki, scram_env, scram_security
from tests.kafka.kafka_broker import KafkaBroker

from .conftest import T0, create_topic, on_apache_kafka_only, produce, record
from .spark_jars import read_jars

pytestmark = pytest.mark.spark


def test_cli_compacts_a_topic_and_prints_a_summary(
    broker_name: str, bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
    on_apache_kafka_only(broker_name)  # the CLI's side; reading is checked on both brokers
    create_topic(bootstrap_servers, topic_name, 2)
    firings = [
        record("cli", key, T0 + w * 60_000, seq, {"n": seq + 1})
        for key in ("a", "b")
        for w in range(2)
        for seq in range(2)
    ]
    produce(bootstrap_servers, topic_name, firings)
    output = tmp_path / "tables"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.compaction",
            "--bootstrap-servers",
            bootstrap_servers,
            "--topics",
            topic_name,
            "--output",
            str(output),
            "--format",
            "parquet",
            "--master",
            "local[1]",
            "--result-schema",
            "cli=n long",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            "spark.ui.enabled=false",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary = completed.stdout
    assert "rows read          8" in summary
    assert "rows written       4" in summary
    assert "partitions touched 1" in summary
    table = pq.read_table(output / "pipeline=cli").to_pylist()
    assert sorted((row["key"], row["seq"], row["result"]["n"]) for row in table) == [
        ("a", 1, 2),
        ("a", 1, 2),
        ("b", 1, 2),
        ("b", 1, 2),
    ]


@pytest.mark.integration
@pytest.mark.timeout(600)
async def test_cli_reads_over_sasl_ssl_with_both_sources(
    sasl_ssl_kafka: KafkaBroker, kafka_pki: Pki, topic_name: str, tmp_path: Path
) -> None:
    """The job's clients (librdkafka on the driver and in the Python source, the Java
    client in Spark's source) from the service's KAFKA_* variables, the password from a
    file; no secret in its output."""
    cluster = KafkaCluster(sasl_ssl_kafka.bootstrap_servers, scram_security(kafka_pki))
    await create_kafka_topic(cluster, topic_name, 2)
    firings = [
        record("sec", key, T0 + w * 60_000, seq, {"n": seq + 1})
        for key in ("a", "b")
        for w in range(2)
        for seq in range(2)
    ]
    await produce_records(
        cluster,
        topic_name,
        [json_record(i % 2, f["key"], f, T0 + i) for i, f in enumerate(firings)],
    )
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        **scram_env(kafka_pki, tmp_path / "password"),
    }
    for source in ("python", "kafka"):
        output = tmp_path / source
        completed = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "service.compaction",
                "--bootstrap-servers",
                sasl_ssl_kafka.bootstrap_servers,
                "--topics",
                topic_name,
                "--output",
                str(output),
                "--format",
                "parquet",
                "--source",
                source,
                "--master",
                "local[1]",
                "--result-schema",
                "sec=n long",
                "--conf",
                "spark.sql.shuffle.partitions=2",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",  # Spark's Kafka source, resolved by `make spark-jars`
                f"spark.jars={','.join(read_jars())}",
            ],
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
            env=env,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert "rows read          8" in completed.stdout, source
        table = pq.read_table(output / "pipeline=sec").to_pylist()
        assert sorted((row["key"], row["result"]["n"]) for row in table) == [
            ("a", 2),
            ("a", 2),
            ("b", 2),
            ("b", 2),
        ]
        for secret in SECRETS:
            assert secret not in completed.stdout + completed.stderr
