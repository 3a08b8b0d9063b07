"""Delta Lake on the session: the jar that matches the ``delta-spark`` package, and the
settings a session needs to read and write Delta tables (delta-spark's own advice:
its SQL extension and its catalog).

``delta-spark`` on PyPI and ``io.delta:delta-spark_<spark>_2.13`` on Maven Central are
released together; the jar must be the same Delta version as the Python package and be
built for the session's Spark (major.minor), as ``delta.configure_spark_with_delta_pip``
also computes it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from service.compaction.errors import CompactionError

SESSION_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""Static settings: they must be set before the session starts."""


def delta_package() -> str:
    """The Maven coordinates of the Delta jar for the installed ``delta-spark`` and
    ``pyspark``, e.g. ``io.delta:delta-spark_4.2_2.13:4.4.0``."""
    try:
        delta = version("delta-spark")
        spark = version("pyspark")
    except PackageNotFoundError as exc:
        raise CompactionError(
            f"--format delta needs the spark extra: {exc.name} is missing"
        ) from exc
    major_minor = ".".join(spark.split(".")[:2])
    return f"io.delta:delta-spark_{major_minor}_2.13:{delta}"


def lists_delta_jar(jars: str | None) -> bool:
    """Whether ``spark.jars`` already holds a ``delta-spark`` jar (an image that ships
    it, jars resolved ahead of time): then no package is added and nothing is resolved
    when the session starts."""
    names = (j.strip().rsplit("/", 1)[-1] for j in (jars or "").split(","))
    return any("delta-spark_" in name and name.endswith(".jar") for name in names)


def with_package(packages: str | None, package: str) -> str:
    """``spark.jars.packages`` with ``package`` added unless some version of its
    artifact is already there (the caller's choice wins)."""
    listed = [p.strip() for p in (packages or "").split(",") if p.strip()]
    artifact = package.rsplit(":", 1)[0]
    if not any(p.rsplit(":", 1)[0] == artifact for p in listed):
        listed.append(package)
    return ",".join(listed)
