"""A local-mode session lists files with as many tasks as its master has threads
(Spark's default, 10,000 tasks, is made for clusters: Delta's VACUUM of a small table
took 31 s on ``local[2]`` with it, 4 s without)."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

from service.compaction.cli import local_threads

LISTING = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def test_a_local_master_s_threads_are_read_from_its_brackets() -> None:
    assert local_threads("local") == 1
    assert local_threads("local[2]") == 2
    assert local_threads("local[3,4]") == 3  # threads, then task failures allowed
    assert local_threads("local[*]") == (os.cpu_count() or 1)
    assert local_threads("local[0]") == 1


def test_the_suite_s_local_session_lists_files_with_two_tasks(spark: SparkSession) -> None:
    assert spark.conf.get(LISTING) == "2"  # conftest's local[2]
