"""Fixtures shared by the integration tests of several modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.flink_sql import FlinkSql


@pytest.fixture(scope="session")
def flink() -> Iterator[FlinkSql]:
    """The session's one Flink SQL process (and JVM), shared by every module that checks
    against Flink SQL (test_sql_flink.py, test_nexmark_flink.py)."""
    process = FlinkSql()
    try:
        yield process
    finally:
        process.close()
