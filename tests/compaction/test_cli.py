"""`python -m service.compaction` as an operator runs it: a subprocess, its own Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from .conftest import T0, create_topic, produce, record

pytestmark = pytest.mark.spark


def test_cli_compacts_a_topic_and_prints_a_summary(
    bootstrap_servers: str, topic_name: str, tmp_path: Path
) -> None:
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
