"""Paths of the output dataset, through Hadoop's FileSystem API (any scheme Spark writes)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


class Storage:
    """Existence checks and partition paths under ``output``."""

    def __init__(self, spark: SparkSession, output: str) -> None:
        jvm: Any = spark.sparkContext._jvm
        self._jvm = jvm
        self.output = output.rstrip("/")
        root = self._jvm.org.apache.hadoop.fs.Path(self.output)
        self._fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._jvm.org.apache.hadoop.fs.Path(path)))

    def partition_path(self, *parts: tuple[str, object]) -> str:
        """``output/name=value/...`` with values escaped as Spark names the directories."""
        escape = self._jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils
        segments = [f"{escape.escapePathName(k)}={escape.escapePathName(str(v))}" for k, v in parts]
        return "/".join([self.output, *segments])
