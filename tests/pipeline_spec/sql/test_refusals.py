"""Each construct the spec cannot run is refused by name, at its statement, line and column,
and every problem of a script comes in one answer."""

from __future__ import annotations

from .scripts import ORDERS, PAYMENTS, only_problem, problems, where

WINDOW = (
    "INSERT INTO out\n"
    "SELECT region, window_start, window_end, COUNT(*) AS n\n"
    "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)\n"
    "GROUP BY region, window_start, window_end"
)


def assert_at(sql: str, fragment: str, statement: int, kind: str, words: str) -> None:
    problem = only_problem(sql)
    assert (problem.at.line, problem.at.column) == where(sql, fragment), problem
    assert problem.at.statement == statement
    assert problem.type == kind
    assert words in problem.message


def test_having_is_refused() -> None:
    sql = ORDERS + WINDOW + "\nHAVING COUNT(*) > 1"
    assert_at(sql, "HAVING", 2, "sql_unsupported", "HAVING is not supported")


def test_order_by_is_refused() -> None:
    sql = ORDERS + WINDOW + "\nORDER BY region"
    assert_at(sql, "ORDER BY", 2, "sql_unsupported", "ORDER BY is not supported")


def test_a_window_setting_on_a_group_by_without_a_window_is_refused() -> None:
    """A GROUP BY without a window is a running aggregate (#50): it has no lateness."""
    sql = (
        ORDERS
        + "SET allowed_lateness = INTERVAL '5' SECOND;\n"
        + "INSERT INTO out SELECT region, COUNT(*) AS n FROM orders GROUP BY region"
    )
    assert_at(sql, "'5' SECOND", 2, "sql_option", "is for windows")


def test_emit_interval_on_a_window_is_refused() -> None:
    sql = ORDERS + "SET emit_interval = '5 s';\n" + WINDOW
    assert_at(sql, "'5 s'", 2, "sql_option", "emit_interval is for a GROUP BY without a window")


def test_emit_changes_is_refused() -> None:
    sql = ORDERS + WINDOW + "\nEMIT CHANGES"
    assert_at(sql, "EMIT CHANGES", 2, "sql_unsupported", "EMIT CHANGES is not supported")


def test_a_window_over_a_source_without_watermark_is_refused() -> None:
    sql = ORDERS.replace(",\n  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND", "") + WINDOW
    assert_at(sql, "TUMBLE(", 2, "sql_no_watermark", "a window needs a watermark")


def test_an_outer_joins_condition_that_is_not_a_key_or_time_bound_is_refused() -> None:
    """An outer join's ON decides which rows match (and which are padded): the operators
    match on the key and time only. (An inner join's is its where: below.)"""
    sql = (
        ORDERS + PAYMENTS + "INSERT INTO paid SELECT * FROM orders o LEFT JOIN payments p "
        "ON o.order_id = p.order_id "
        "AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE AND o.amount > p.paid"
    )
    assert_at(sql, "o.amount > p.paid", 3, "sql_join_condition", "is not supported")


def test_an_unknown_column_is_refused_at_it() -> None:
    sql = ORDERS + WINDOW.replace("COUNT(*) AS n", "SUM(price) AS n")
    assert_at(sql, "price", 2, "sql_unknown_column", "unknown column 'price'")


def test_an_unknown_source_is_refused_at_it() -> None:
    sql = ORDERS + WINDOW.replace("TUMBLE(orders", "TUMBLE(sales")
    assert_at(sql, "sales", 2, "sql_unknown_source", "unknown source 'sales'")


def test_comparing_a_declared_number_with_a_string_is_a_type_mismatch() -> None:
    sql = ORDERS + WINDOW.replace("GROUP BY", "WHERE amount = 'high'\nGROUP BY")
    assert_at(sql, "amount = 'high'", 2, "sql_type_mismatch", "amount is DOUBLE")


def test_summing_a_declared_string_is_a_type_mismatch() -> None:
    sql = ORDERS + WINDOW.replace("COUNT(*) AS n", "SUM(status) AS n")
    assert_at(sql, "status)", 2, "sql_type_mismatch", "SUM takes numbers")


def test_a_syntax_error_is_placed_at_its_token() -> None:
    sql = ORDERS + "INSERT INTO out SELECT FROM FROM"
    problem = only_problem(sql)
    assert problem.type == "sql_syntax"
    assert problem.at.statement == 2
    assert problem.at.line == where(sql, "INSERT")[0]


def test_a_spec_rule_is_placed_at_the_sql_it_came_from() -> None:
    sql = ORDERS + WINDOW.replace(
        "TUMBLE(orders, ts, INTERVAL '1' MINUTE)",
        "HOP(orders, ts, INTERVAL '5' MINUTE, INTERVAL '1' MINUTE)",
    )
    problem = only_problem(sql)
    assert problem.type == "slide_greater_than_size"
    assert problem.spec_loc == ("operator", "assigner", "slide_ms")
    assert (problem.at.line, problem.at.column) == where(sql, "HOP(")


def test_a_sink_topic_that_is_a_source_topic_is_refused_at_the_insert() -> None:
    sql = ORDERS + WINDOW.replace("INSERT INTO out", "INSERT INTO orders")
    found = problems(sql)
    assert found and all(p.at.statement == 2 for p in found)
    assert (found[0].at.line, found[0].at.column) == where(sql, "orders", 2)


def test_every_problem_of_every_statement_comes_together_in_order() -> None:
    sql = (
        "CREATE SOURCE s (a INT, ts BIGINT, WATERMARK FOR ts AS ts) WITH (topic = 't', nope = 1);\n"
        "SET flavour = 'x';\n"
        "INSERT INTO out SELECT window_start, window_end, SUM(b) AS n\n"
        "FROM TUMBLE(s, ts, INTERVAL '1' MINUTE) GROUP BY window_start, window_end\n"
        "HAVING SUM(a) > 1 ORDER BY n;"
    )
    found = problems(sql)
    assert [(p.at.statement, p.type) for p in found] == [
        (1, "sql_option"),
        (2, "sql_option"),
        (3, "sql_unknown_column"),
        (3, "sql_unsupported"),
        (3, "sql_unsupported"),
    ]


def test_a_plain_select_names_each_computed_column() -> None:
    sql = ORDERS + "INSERT INTO out SELECT order_id, amount * 2 FROM orders"
    assert_at(sql, "amount * 2", 2, "sql_unsupported", "AS <name>")


def test_a_plain_select_takes_a_column_once() -> None:
    sql = ORDERS + "INSERT INTO out SELECT order_id, amount AS order_id FROM orders"
    assert_at(sql, "amount AS order_id", 2, "sql_unsupported", "selected twice")


def test_a_script_without_insert_is_refused() -> None:
    problem = only_problem(ORDERS)
    assert problem.type == "sql_missing"
    assert problem.at.statement == 0


def test_an_expression_over_aggregates_is_refused() -> None:
    sql = ORDERS + WINDOW.replace("COUNT(*) AS n", "COUNT(*) * 2 AS n")
    assert_at(sql, "COUNT(*) * 2", 2, "sql_unsupported", "neither a group key")


def test_an_unterminated_string_is_placed_where_it_opens() -> None:
    sql = ORDERS + "INSERT INTO out SELECT 'abc"
    problem = only_problem(sql)
    assert problem.type == "sql_syntax"
    assert (problem.at.line, problem.at.column) == where(sql, "'abc")


def test_half_a_time_bound_is_refused_as_an_interval_join_without_its_other_bound() -> None:
    sql = (
        ORDERS + PAYMENTS + "INSERT INTO paid SELECT * FROM orders o JOIN payments p "
        "ON o.order_id = p.order_id AND p.ts >= o.ts"
    )
    assert_at(sql, "o.order_id = p.order_id AND", 3, "sql_unsupported", "an interval join")


def test_a_state_ttl_on_a_join_bounded_in_time_is_refused_at_the_setting() -> None:
    sql = (
        ORDERS
        + PAYMENTS
        + "SET state_ttl = INTERVAL '1' HOUR;\n"
        + "INSERT INTO paid SELECT * FROM orders o JOIN payments p ON o.order_id = p.order_id "
        "AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE"
    )
    assert_at(sql, "'1' HOUR", 3, "state_ttl_unused", "regular joins")


def test_max_by_with_one_argument_is_refused_at_it() -> None:
    sql = ORDERS + WINDOW.replace("COUNT(*) AS n", "MAX_BY(amount) AS n")
    found = problems(sql)
    assert [(p.at.statement, p.type) for p in found] == [(2, "sql_unsupported")]
    assert "takes two arguments" in found[0].message


def test_an_unknown_format_is_refused_at_its_value() -> None:
    sql = ORDERS.replace("topic = 'orders'", "topic = 'orders', format = 'csv'") + (
        "INSERT INTO out SELECT order_id FROM orders"
    )
    assert_at(sql, "'csv'", 1, "sql_option", "'avro'")


def test_a_sink_format_over_a_plain_select_is_refused_at_the_sink() -> None:
    """Results in a format with a schema need a window's aggregations (the rule
    sink_format_needs_aggregations), placed at the CREATE SINK that asked for it."""
    sql = (
        ORDERS
        + "CREATE SINK out WITH (topic = 'out', format = 'avro');\n"
        + "INSERT INTO out SELECT order_id FROM orders"
    )
    problem = only_problem(sql)
    assert problem.type == "sink_format_needs_aggregations"
    assert problem.at.statement == 2
