"""A refused part of a statement does not hide the rest of it (issue 47, part 3): every
check of a statement runs, its names and columns are resolved even after an earlier
check failed, and the one answer lists each problem at its place (and no spec comes
out while any problem exists)."""

from __future__ import annotations

from .scripts import ORDERS, PAYMENTS, RATES, problems, where

NO_WATERMARK = ORDERS.replace(",\n  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND", "")
WINDOW_OF = (
    "INSERT INTO out SELECT window_start, window_end, {aggregate}\n"
    "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY window_start, window_end"
)
JOIN = (
    "INSERT INTO paid SELECT o.order_id, p.paid FROM orders o JOIN payments p "
    "ON o.order_id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE"
)


def placed(sql: str) -> list[tuple[str, int, int, int]]:
    """Each problem of ``sql`` as (type, statement, line, column), in script order."""
    return [(p.type, p.at.statement, p.at.line, p.at.column) for p in problems(sql)]


def at(sql: str, kind: str, statement: int, fragment: str, occurrence: int = 0) -> tuple:
    return (kind, statement, *where(sql, fragment, occurrence))


def test_a_window_without_watermark_with_having_still_names_its_unknown_column() -> None:
    """The issue's script: the watermark and the HAVING were named, the column not."""
    sql = NO_WATERMARK + (
        "INSERT INTO out\n"
        "SELECT region, window_start, window_end, SUM(no_such_column) AS n\n"
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)\n"
        "GROUP BY region, window_start, window_end\n"
        "HAVING COUNT(*) > 1"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 2, "no_such_column"),
        at(sql, "sql_no_watermark", 2, "TUMBLE("),
        at(sql, "sql_unsupported", 2, "HAVING"),
    ]


def test_a_window_on_another_time_column_still_resolves_its_columns() -> None:
    sql = ORDERS + (
        "INSERT INTO out SELECT window_start, window_end, SUM(price) AS n\n"
        "FROM TUMBLE(orders, amount, INTERVAL '1' MINUTE) GROUP BY window_start, window_end"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 2, "price"),
        at(sql, "sql_unsupported", 2, "amount,"),
    ]


def test_a_window_with_a_bad_size_still_resolves_its_columns() -> None:
    sql = ORDERS + (
        "INSERT INTO out SELECT window_start, window_end, SUM(price) AS n\n"
        "FROM TUMBLE(orders, ts, 'soon') GROUP BY window_start, window_end"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 2, "price"),
        at(sql, "sql_unsupported", 2, "'soon'"),
    ]


def test_a_window_over_an_unknown_source_still_checks_its_aggregates() -> None:
    sql = ORDERS + (
        "INSERT INTO out SELECT window_start, window_end, STDDEV(amount) AS n\n"
        "FROM TUMBLE(sales, ts, INTERVAL '1' MINUTE) GROUP BY window_start, window_end"
    )
    assert placed(sql) == [
        at(sql, "sql_unsupported", 2, "STDDEV"),
        at(sql, "sql_unknown_source", 2, "sales"),
    ]


def test_a_group_by_without_a_window_still_names_an_unknown_column() -> None:
    """A running aggregate (#50), no longer refused: its unknown group key is named at
    the GROUP BY (the select list's mention of a group key is the key's)."""
    sql = ORDERS + "INSERT INTO out SELECT price, COUNT(*) AS n FROM orders GROUP BY price"
    assert placed(sql) == [at(sql, "sql_unknown_column", 2, "price", 1)]


def test_an_aggregate_without_a_window_still_names_an_unknown_column() -> None:
    sql = ORDERS + "INSERT INTO out SELECT SUM(price) AS n FROM orders WHERE colour = 'red'"
    assert sorted(placed(sql)) == sorted(
        [at(sql, "sql_unknown_column", 2, "price"), at(sql, "sql_unknown_column", 2, "colour")]
    )


def test_a_refused_subquery_in_where_does_not_hide_an_unknown_column_beside_it() -> None:
    sql = ORDERS + (
        "INSERT INTO out SELECT order_id FROM orders WHERE amount > (SELECT 1) AND colour = 'red'"
    )
    assert placed(sql) == [  # the subquery at the first of its tokens with an offset
        at(sql, "sql_unsupported", 2, "1) AND"),
        at(sql, "sql_unknown_column", 2, "colour"),
    ]


def test_a_join_over_a_source_without_watermark_still_resolves_its_select() -> None:
    sql = NO_WATERMARK + PAYMENTS + JOIN.replace("p.paid", "p.price")
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 3, "p.price"),
        at(sql, "sql_no_watermark", 3, "orders o"),
    ]


def test_a_window_join_over_a_source_without_watermark_still_resolves_its_select() -> None:
    sql = (
        NO_WATERMARK + PAYMENTS + "INSERT INTO paid SELECT o.order_id, p.price "
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) o "
        "JOIN TUMBLE(payments, ts, INTERVAL '1' MINUTE) p ON o.order_id = p.order_id "
        "AND o.window_start = p.window_start AND o.window_end = p.window_end"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 3, "p.price"),
        at(sql, "sql_no_watermark", 3, "TUMBLE(orders"),
    ]


def test_a_refused_join_condition_does_not_hide_the_select_or_the_where() -> None:
    # A LEFT join: an inner join's ON takes a condition over both sides (as its where)
    sql = ORDERS + PAYMENTS + JOIN.replace("p.paid", "p.price").replace(" JOIN ", " LEFT JOIN ")
    sql += " AND o.amount > p.paid WHERE o.colour = 'red'"
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 3, "p.price"),
        at(sql, "sql_join_condition", 3, "o.amount > p.paid"),
        at(sql, "sql_unknown_column", 3, "o.colour"),
    ]


def test_a_problem_in_an_earlier_statement_does_not_hide_a_joins_select() -> None:
    sql = (
        ORDERS.replace("topic = 'orders'", "topic = 'orders', colour = 'red'")
        + PAYMENTS
        + JOIN.replace("p.paid", "p.price")
    )
    assert placed(sql) == [
        at(sql, "sql_option", 1, "'red'"),
        at(sql, "sql_unknown_column", 3, "p.price"),
    ]


def test_a_right_temporal_join_still_resolves_its_select() -> None:
    sql = (
        ORDERS.replace("region VARCHAR", "currency VARCHAR")
        + RATES
        + "INSERT INTO eur SELECT o.order_id, r.price FROM orders o "
        "RIGHT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 3, "r.price"),
        at(sql, "how_not_for_kind", 3, "RIGHT JOIN"),  # the spec's rule, at the RIGHT
    ]


def test_a_semi_join_without_windows_still_resolves_its_select() -> None:
    sql = (
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.price FROM orders o LEFT SEMI JOIN payments p "
        "ON o.order_id = p.order_id"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 3, "o.price"),
        at(sql, "how_not_for_kind", 3, "payments p"),
    ]


def test_a_self_join_still_resolves_its_select() -> None:
    sql = ORDERS + (
        "INSERT INTO paid SELECT a.order_id, b.price FROM orders a JOIN orders b "
        "ON a.order_id = b.order_id AND b.ts BETWEEN a.ts AND a.ts + INTERVAL '1' MINUTE"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 2, "b.price"),
        at(sql, "sql_unsupported", 2, "orders b"),
    ]


def test_a_join_using_still_resolves_its_select() -> None:
    sql = (
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id, p.price FROM orders o JOIN payments p "
        "USING (order_id)"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 3, "p.price"),
        at(sql, "sql_unsupported", 3, "payments p"),
    ]


def test_a_lookup_join_without_max_rows_still_resolves_its_select() -> None:
    sql = (
        ORDERS.replace("region VARCHAR", "currency VARCHAR")
        + RATES
        + "INSERT INTO eur SELECT o.order_id, r.price FROM orders o "
        "JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency"
    )
    assert placed(sql) == [
        at(sql, "missing", 2, "rates ("),  # the spec's rule (lookup_max_rows), at the table
        at(sql, "sql_unknown_column", 3, "r.price"),
    ]


def test_an_unknown_column_in_a_joins_where_is_named_as_one() -> None:
    """It reads neither side: it is unknown, not a condition over both sides."""
    sql = ORDERS + PAYMENTS + JOIN + " WHERE colour = 'red'"
    assert placed(sql) == [at(sql, "sql_unknown_column", 3, "colour")]


def test_a_refused_watermark_is_not_reported_again_at_the_window() -> None:
    """The WATERMARK was written (and refused at its place): the window does not add
    that the source declares none, and its columns are still resolved."""
    sql = ORDERS.replace("AS ts - INTERVAL '2' SECOND", "AS ts * 2") + (
        "INSERT INTO out SELECT window_start, window_end, SUM(price) AS n\n"
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY window_start, window_end"
    )
    assert placed(sql) == [
        at(sql, "sql_unsupported", 1, "ts * 2"),
        at(sql, "sql_unknown_column", 2, "price"),
    ]


def test_each_key_of_a_composite_group_key_is_resolved() -> None:
    sql = ORDERS + (
        "INSERT INTO out SELECT window_start, window_end, COUNT(*) AS n\n"
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)\n"
        "GROUP BY colour, size, window_start, window_end"
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 2, "colour"),
        at(sql, "sql_unknown_column", 2, "size"),
    ]


def test_a_refused_aggregate_still_resolves_its_argument() -> None:
    sql = ORDERS + WINDOW_OF.format(aggregate="STDDEV(price) AS n")
    assert placed(sql) == [
        at(sql, "sql_unsupported", 2, "STDDEV"),
        at(sql, "sql_unknown_column", 2, "price"),
    ]


def test_each_refused_duration_of_a_window_is_reported() -> None:
    sql = ORDERS + WINDOW_OF.format(aggregate="COUNT(*) AS n").replace(
        "TUMBLE(orders, ts, INTERVAL '1' MINUTE)", "HOP(orders, ts, 'soon', 'later')"
    )
    assert placed(sql) == [
        at(sql, "sql_unsupported", 2, "'soon'"),
        at(sql, "sql_unsupported", 2, "'later'"),
    ]


def test_a_cumulate_window_still_resolves_its_columns() -> None:
    sql = ORDERS + WINDOW_OF.format(aggregate="SUM(price) AS n").replace(
        "TUMBLE(orders, ts, INTERVAL '1' MINUTE)",
        "CUMULATE(orders, ts, INTERVAL '1' MINUTE, INTERVAL '1' HOUR)",
    )
    assert placed(sql) == [
        at(sql, "sql_unknown_column", 2, "price"),
        at(sql, "sql_unsupported", 2, "CUMULATE"),
    ]


def test_a_select_item_refused_for_its_name_still_resolves_its_columns() -> None:
    """A duplicate or missing name is one problem; the item's unknown column another."""
    plain = ORDERS + "INSERT INTO out SELECT order_id, price AS order_id, colour * 2 FROM orders"
    assert placed(plain) == [
        at(plain, "sql_unsupported", 2, "price AS"),
        at(plain, "sql_unknown_column", 2, "price AS"),
        at(plain, "sql_unsupported", 2, "colour"),
        at(plain, "sql_unknown_column", 2, "colour"),
    ]
    window = ORDERS + WINDOW_OF.format(aggregate="SUM(amount) AS n, SUM(price) AS n")
    assert placed(window) == [
        at(window, "sql_duplicate", 2, "SUM(price)"),
        at(window, "sql_unknown_column", 2, "price"),
    ]
    join = ORDERS + PAYMENTS + JOIN.replace("p.paid", "p.paid, p.price AS paid, o.colour * 2")
    assert placed(join) == [
        at(join, "sql_duplicate", 3, "p.price"),
        at(join, "sql_unknown_column", 3, "p.price"),
        at(join, "sql_unsupported", 3, "o.colour"),
        at(join, "sql_unknown_column", 3, "o.colour"),
    ]


def test_a_second_insert_is_refused_and_its_columns_still_resolved() -> None:
    sql = (
        ORDERS
        + "INSERT INTO a SELECT order_id FROM orders;\nINSERT INTO b SELECT price FROM orders"
    )
    assert placed(sql) == [
        at(sql, "sql_unsupported", 3, "b SELECT"),
        at(sql, "sql_unknown_column", 3, "price"),
    ]
