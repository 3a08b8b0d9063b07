"""The job on a cluster: ``spark-submit`` to a Spark standalone master with one worker,
both started from pyspark's own ``spark-class``, so the executors run in their own JVM
(and their own Python workers); the project shipped with ``--py-files`` (a zip of
``service/`` built here; the driver runs a copy of ``__main__.py`` outside the checkout,
so both sides import the zip's code), the jars with ``--jars``. It compacts an upsert
topic (``--upsert``, Delta) and the table equals the fold of the topic."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Tombstone, create_topic, on_apache_kafka_only, produce, upsert
from .spark_jars import read_jars
from .test_upserts import as_fold, fold, rust_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 90


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def state(webui: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as answer:
        body: dict[str, object] = json.load(answer)
        return body


def spark_class(main: str, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A Spark daemon in its own process group (stopped with everything it started)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), main, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=30)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A master and one worker (1 core, 1 GiB) on loopback; yields the master URL and
    the environment to submit with."""
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        pytest.skip("Java 17 is needed for Spark")
    home = spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    env.pop("PYTHONPATH", None)
    port, webui = free_port(), free_port()
    master = spark_class(
        "org.apache.spark.deploy.master.Master",
        *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)),
        env=env,
        log=tmp_path / "master.log",
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        url = f"spark://127.0.0.1:{port}"
        worker = spark_class(
            "org.apache.spark.deploy.worker.Worker",
            url,
            *("--cores", "1", "--memory", "1g", "--host", "127.0.0.1"),
            *("--port", str(free_port()), "--webui-port", str(free_port())),
            *("--work-dir", str(tmp_path / "work")),
            env=env,
            log=tmp_path / "worker.log",
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                workers = state(webui).get("workers")
                if isinstance(workers, list) and any(w.get("state") == "ALIVE" for w in workers):
                    break
            except OSError:
                pass
            for process, name in ((master, "master"), (worker, "worker")):
                assert process.poll() is None, (tmp_path / f"{name}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no worker registered with the master"
            time.sleep(0.5)
        yield url, env
    finally:
        if worker is not None:
            stop(worker)
        stop(master)


def project_zip(target: Path) -> Path:
    """``service/``'s Python files, as ``zip -r clockwork.zip service`` would hold them."""
    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted((REPO / "service").rglob("*.py")):
            archive.write(path, str(path.relative_to(REPO)))
    return target


@pytest.mark.timeout(600)
def test_spark_submit_to_a_standalone_cluster_compacts_an_upsert_topic(
    standalone: tuple[str, dict[str, str]],
    broker_name: str,
    bootstrap_servers: str,
    topic_name: str,
    tmp_path: Path,
) -> None:
    on_apache_kafka_only(broker_name)
    master, env = standalone
    create_topic(bootstrap_servers, topic_name, 2)
    produced = [
        *(upsert("totals", f"k{i % 7}", i // 7, {"orders": i, "revenue": 1.5}) for i in range(35)),
        Tombstone("k3"),
        Tombstone("k5"),
        upsert("totals", "k5", 0, {"orders": 100, "revenue": 2.5}),
    ]
    produce(bootstrap_servers, topic_name, produced)
    shipped = project_zip(tmp_path / "clockwork.zip")
    entry = tmp_path / "submit" / "compaction_main.py"
    entry.parent.mkdir()
    shutil.copyfile(REPO / "service" / "compaction" / "__main__.py", entry)
    output = tmp_path / "table"
    argv = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--master", master, "--deploy-mode", "client"),
        *("--jars", ",".join(read_jars()), "--py-files", str(shipped)),
        *("--conf", f"spark.pyspark.python={sys.executable}"),
        *("--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1"),
        *("--conf", "spark.executor.memory=768m", "--conf", "spark.cores.max=1"),
        *("--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"),
        *("--conf", "spark.databricks.delta.snapshotPartitions=2"),
        str(entry),
        *("--bootstrap-servers", bootstrap_servers, "--topics", topic_name),
        *("--output", str(output), "--upsert"),
        *("--result-schema", "totals=orders long, revenue double"),
    ]
    started = time.monotonic()
    completed = subprocess.run(
        argv, capture_output=True, text=True, timeout=480, check=False, cwd=entry.parent, env=env
    )
    seconds = time.monotonic() - started
    assert completed.returncode == 0, completed.stderr[-4000:]
    print(f"spark-submit to the standalone cluster: {seconds:.0f}s")
    assert f"rows read          {len(produced)}\n" in completed.stdout
    # k0..k6: k3's newest record is a tombstone (the first run creates the table
    # without it), k5 came back after its tombstone.
    assert "  distinct keys    7\n" in completed.stdout
    # The executors ran on the worker, in their own JVMs: the worker's work dir has the
    # application's executor logs.
    apps = list((tmp_path / "work").glob("app-*/*/stderr"))
    assert apps, "no executor ran on the worker"
    expected = fold(produced)
    assert len(expected) == 6
    assert as_fold(rust_rows(output)) == expected
