"""A pull query in SQL (pipeline_spec/sql/pull_query.py): one key or a key range of one
pipeline, and every other form refused at its place."""

from __future__ import annotations

import pytest

from service.pipeline_spec.sql.problems import SqlError
from service.pipeline_spec.sql.pull_query import PullQuery, compile_pull_query


def problems(sql: str) -> list[tuple[int, int, str]]:
    with pytest.raises(SqlError) as caught:
        compile_pull_query(sql)
    return [(p.at.line, p.at.column, p.type) for p in caught.value.problems]


def test_key_equal_is_a_lookup_of_one_key() -> None:
    assert compile_pull_query("SELECT * FROM orders WHERE key = 'u/1'") == PullQuery(
        "orders", key="u/1"
    )


def test_a_quoted_pipeline_name_keeps_its_hyphens() -> None:
    assert compile_pull_query("""select * from "rev-1" where KEY = 'a'""").pipeline == "rev-1"


def test_between_includes_both_ends_as_a_half_open_range() -> None:
    query = compile_pull_query("SELECT * FROM t WHERE key BETWEEN 'a' AND 'm' LIMIT 5")
    assert query == PullQuery("t", None, "a", "m\u0000", 5)


def test_comparisons_narrow_the_range() -> None:
    query = compile_pull_query("SELECT * FROM t WHERE key > 'a' AND key <= 'q' AND key < 'p'")
    assert query == PullQuery("t", None, "a\u0000", "p")


def test_no_where_reads_every_key() -> None:
    assert compile_pull_query("SELECT * FROM t LIMIT 10") == PullQuery("t", limit=10)


def test_every_unsupported_part_is_refused_at_its_place() -> None:
    assert problems("SELECT a FROM t\nWHERE x = 1 GROUP BY a") == [
        (1, 8, "sql_pull_query"),
        (2, 7, "sql_pull_query"),
        (2, 13, "sql_pull_query"),
    ]


def test_a_lookup_compared_with_a_range_is_refused() -> None:
    assert problems("SELECT * FROM t WHERE key = 'a' AND key > 'b'") == [(1, 23, "sql_pull_query")]


def test_a_limit_out_of_range_is_refused() -> None:
    assert problems("SELECT * FROM t LIMIT 1001") == [(1, 23, "sql_pull_query")]


def test_a_syntax_error_is_the_front_ends() -> None:
    assert [kind for _, _, kind in problems("SELECT * FROM t WHERE key = ")] == ["sql_syntax"]


def test_two_statements_are_refused() -> None:
    assert problems("SELECT * FROM t; SELECT * FROM u") == [(1, 1, "sql_pull_query")]
