"""Whatever the text, the compiler answers a spec or problems: never another exception.

Random text, and valid scripts mutated token by token (cut, repeated, replaced by
another SQL word or symbol), go through the whole path a request takes: compile,
validate as a spec, build the runtime's definition (:meth:`PipelineRegistry.parse_body`).
Every problem must be placed (statement >= 0, line and column >= 1) and say something.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.api.registry import PipelineRegistry, SpecInvalid
from service.pipeline_spec.sql import SqlError, validate_sql
from service.settings import Settings

from .scripts import ORDERS, PAYMENTS, RATES

VALID = [
    ORDERS + 'INSERT INTO revenue SELECT "user", window_start, window_end, COUNT(*) AS n, '
    "SUM(amount * 1.1) AS revenue FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) "
    "WHERE status = 'paid' GROUP BY \"user\", window_start, window_end;",
    ORDERS + "SET allowed_lateness = '5 s';\nINSERT INTO out SELECT region, payload.a.b, "
    "window_start, window_end, AVG(amount) AS a, COUNT(DISTINCT order_id) AS d "
    "FROM HOP(orders, ts, INTERVAL '10' SECOND, INTERVAL '1' MINUTE) "
    "GROUP BY region, payload.a.b, window_start, window_end EMIT ON WINDOW CLOSE;",
    ORDERS + PAYMENTS + "INSERT INTO paid SELECT o.order_id, p.paid FROM orders o LEFT JOIN "
    "payments p ON o.order_id = p.order_id AND p.ts BETWEEN o.ts - INTERVAL '1' MINUTE AND "
    "o.ts + INTERVAL '5' MINUTE WHERE o.amount > 10;",
    ORDERS.replace("region", "currency") + RATES + "INSERT INTO eur SELECT o.order_id, "
    "o.amount * r.rate AS eur FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r "
    "ON o.currency = r.currency;",
]

WORDS = [
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "HAVING",
    "ORDER",
    "JOIN",
    "LEFT",
    "ON",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "AS",
    "INSERT",
    "INTO",
    "CREATE",
    "SOURCE",
    "SINK",
    "TABLE",
    "WITH",
    "WATERMARK",
    "FOR",
    "SYSTEM_TIME",
    "OF",
    "PROCTIME()",
    "TUMBLE",
    "HOP",
    "SESSION",
    "INTERVAL",
    "'1'",
    "SECOND",
    "MONTH",
    "EMIT",
    "CHANGES",
    "CAST",
    "CASE",
    "WHEN",
    "END",
    "COUNT(*)",
    "SUM",
    "(",
    ")",
    ",",
    ";",
    ".",
    "*",
    "-",
    "+",
    "=",
    "<",
    "'",
    '"',
    "`",
    "0",
    "-1",
    "1e999",
    "99999999999999999999",
    "ts",
    "amount",
    "window_start",
    "window_end",
    "orders",
    "payments",
    "x",
    "SET",
    "BETWEEN",
    "DISTINCT",
    "UNION",
    "LIMIT",
    "\n",
    "--",
    "/*",
    "__class__",
    "TRUE",
    "STRUCT<a INT>",
    "$",
    "\\",
    "\x00",
]


def registry() -> PipelineRegistry:
    registry = PipelineRegistry.__new__(PipelineRegistry)
    registry._settings = Settings(udf_modules=())
    return registry


def assert_answers(sql: str) -> None:
    """A spec or placed problems, through compile + validate and through the registry."""
    try:
        validate_sql("fuzzed", sql, ())
    except SqlError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.at.statement >= 0
            assert problem.at.line >= 1 and problem.at.column >= 1
            assert problem.message
    try:
        registry().parse_body({"name": "fuzzed", "sql": sql})
    except SpecInvalid as exc:
        assert exc.errors
        for error in exc.errors:
            assert error["msg"] and error["loc"]


@st.composite
def mutated(draw: Any) -> str:
    """A valid script with a few token-level edits."""
    tokens = draw(st.sampled_from(VALID)).replace("(", " ( ").replace(")", " ) ").split(" ")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(tokens) - 1))
        edit = draw(st.sampled_from(["cut", "repeat", "replace", "insert"]))
        if edit == "cut":
            del tokens[i : i + draw(st.integers(1, 6))]
        elif edit == "repeat":
            tokens[i:i] = tokens[i : i + draw(st.integers(1, 6))]
        elif edit == "replace":
            tokens[i] = draw(st.sampled_from(WORDS))
        else:
            tokens.insert(i, draw(st.sampled_from(WORDS)))
        if not tokens:
            tokens = [""]
    return " ".join(tokens)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_a_mutated_script_compiles_or_gets_placed_problems(sql: str) -> None:
    assert_answers(sql)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_random_text_gets_placed_problems(sql: str) -> None:
    assert_answers(sql)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=40).map(" ".join))
def test_a_random_sequence_of_sql_words_gets_placed_problems(sql: str) -> None:
    assert_answers(sql)


def test_every_valid_script_of_the_fuzzer_compiles() -> None:
    for sql in VALID:
        validate_sql("fuzzed", sql, ())
