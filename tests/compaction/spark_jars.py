"""The jars the compaction tests add to Spark (its Kafka source and Delta Lake with their
dependencies), resolved once by ``make spark-jars`` (part of ``make test``), not by each
JVM a test starts.

``python -m tests.compaction.spark_jars`` lets Spark itself resolve the packages, as a
job does with ``spark.jars.packages`` (from Maven Central through
``tests/compaction/ivysettings.xml``; the downloads are cached in ``~/.ivy2*``), copies
the resolved jars into ``tests/compaction/jars/`` (git-ignored) and lists them in
``tests/compaction/jars/jars.txt``. The tests' session and the CLI runs they start pass
that list as ``spark.jars``: no Ivy resolution at test time, and the same jars as the
packages would give. ``make`` resolves again when ``pyproject.toml`` (the pyspark and
delta-spark versions) or this file changed, or a jar is missing.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
IVY_SETTINGS = HERE / "ivysettings.xml"
JARS_DIR = HERE / "jars"
JARS_LIST = JARS_DIR / "jars.txt"

SPARK_KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
"""Spark's own Kafka source for ``--source kafka`` (in production, use the version of the
cluster's Spark; here it is pyspark's, 4.2.0)."""


def read_jars() -> list[str]:
    """The resolved jars, absolute paths; an error naming ``make spark-jars`` when they
    were not resolved (or a jar is gone)."""
    if not JARS_LIST.is_file():
        raise FileNotFoundError(f"no {JARS_LIST}: run `make spark-jars` (or `make test`)")
    jars = [line for line in JARS_LIST.read_text().splitlines() if line]
    missing = [jar for jar in jars if not Path(jar).is_file()]
    if missing or not jars:
        raise FileNotFoundError(f"{missing or 'no jar'} in {JARS_LIST}: run `make spark-jars`")
    return jars


def resolve() -> list[str]:
    """Start Spark once with the packages, copy the jars it resolved into ``jars/``, write
    the list; returns it."""
    from service.compaction.cli import build_session
    from service.compaction.delta_session import delta_package

    session = build_session(
        "local[1]",
        {
            "spark.ui.enabled": "false",
            "spark.jars.packages": f"{SPARK_KAFKA_PACKAGE},{delta_package()}",
            "spark.jars.ivySettings": str(IVY_SETTINGS),
        },
    )
    try:
        resolved = [j for j in session.conf.get("spark.jars", "").split(",") if j]
    finally:
        session.stop()
    if JARS_DIR.exists():
        shutil.rmtree(JARS_DIR)
    JARS_DIR.mkdir()
    jars = []
    for jar in resolved:
        source = Path(jar.removeprefix("file://").removeprefix("file:"))
        target = JARS_DIR / source.name
        shutil.copyfile(source, target)
        jars.append(str(target))
    JARS_LIST.write_text("".join(f"{jar}\n" for jar in jars))
    return jars


if __name__ == "__main__":
    listed = resolve()
    print(f"{len(listed)} jars in {JARS_DIR}", file=sys.stderr)
