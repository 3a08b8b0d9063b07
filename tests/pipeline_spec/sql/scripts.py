"""Scripts the SQL tests share, and helpers to compile them."""

from __future__ import annotations

from typing import Any

import pytest

from service.pipeline_spec.sql import SqlError, SqlProblem, validate_sql

ORDERS = """CREATE SOURCE orders (
  order_id VARCHAR, "user" VARCHAR, region VARCHAR, amount DOUBLE, status VARCHAR, ts BIGINT,
  payload STRUCT<a STRUCT<b INT>>,
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (topic = 'orders', timestamp_format = 'epoch_millis', partitioned_by = 'user');
"""

PAYMENTS = """CREATE SOURCE payments (
  order_id VARCHAR, paid DOUBLE, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (topic = 'payments');
"""

RATES = """CREATE SOURCE rates (
  currency VARCHAR, rate DOUBLE, ts BIGINT, WATERMARK FOR ts AS ts
) WITH (topic = 'rates');
"""


def compiled(sql: str, name: str = "p") -> dict[str, Any]:
    """The spec ``sql`` compiles to (validated as any spec)."""
    _, result = validate_sql(name, sql, ())
    return result.spec


def problems(sql: str) -> list[SqlProblem]:
    """Every problem of ``sql`` (it must have some)."""
    with pytest.raises(SqlError) as caught:
        validate_sql("p", sql, ())
    return caught.value.problems


def only_problem(sql: str) -> SqlProblem:
    found = problems(sql)
    assert len(found) == 1, found
    return found[0]


def where(sql: str, fragment: str, occurrence: int = 0) -> tuple[int, int]:
    """The 1-based line and column of ``fragment`` (its ``occurrence``-th) in ``sql``."""
    offset = -1
    for _ in range(occurrence + 1):
        offset = sql.index(fragment, offset + 1)
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return line, column
