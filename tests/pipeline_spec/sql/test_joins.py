"""Joins compile to the inputs and the join operator of the kind their form names."""

from __future__ import annotations

import pytest

from .scripts import ORDERS, PAYMENTS, RATES, compiled, only_problem, where


def test_between_bounds_compile_to_an_interval_join_with_inputs_and_select() -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id, p.paid AS paid, p.ts - o.ts AS delay "
        "FROM orders o LEFT JOIN payments p ON o.order_id = p.order_id "
        "AND p.ts BETWEEN o.ts - INTERVAL '1' MINUTE AND o.ts + INTERVAL '5' MINUTE "
        "WHERE o.amount > 10 AND p.paid > 0"
    )
    assert spec["operator"] == {
        "type": "join",
        "kind": "interval",
        "how": "left",
        "left": "orders",
        "right": "payments",
        "between": {"lower_ms": -60000, "upper_ms": 300000},
        "select": {
            "order_id": "`orders`.`order_id`",
            "paid": "`payments`.`paid`",
            "delay": "`payments`.`ts` - `orders`.`ts`",
        },
    }
    assert spec["inputs"]["orders"] == {
        "source": {"topics": ["orders"], "format": "json"},
        "steps": [{"filter": "`amount` > 10"}],
        "key": {"field": "order_id"},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {"strategy": "bounded_out_of_orderness", "max_out_of_orderness_ms": 1999},
    }
    assert spec["inputs"]["payments"]["steps"] == [{"filter": "`paid` > 0"}]


def test_two_time_comparisons_compile_to_the_same_interval_bounds() -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT * FROM orders o JOIN payments p ON o.order_id = p.order_id "
        "AND p.ts >= o.ts AND o.ts + INTERVAL '1' HOUR >= p.ts"
    )
    assert spec["operator"]["between"] == {"lower_ms": 0, "upper_ms": 3_600_000}
    assert "select" not in spec["operator"]


def test_two_windows_joined_on_their_bounds_compile_to_a_window_join() -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT * FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) o "
        "FULL JOIN TUMBLE(payments, ts, INTERVAL '1' MINUTE) p ON o.order_id = p.order_id "
        "AND o.window_start = p.window_start AND o.window_end = p.window_end"
    )
    assert spec["operator"] == {
        "type": "join",
        "kind": "window",
        "how": "full",
        "left": "orders",
        "right": "payments",
        "assigner": {"type": "tumbling", "size_ms": 60000},
    }


def test_for_system_time_as_of_the_left_time_compiles_to_a_temporal_join() -> None:
    spec = compiled(
        ORDERS.replace("region VARCHAR", "currency VARCHAR")
        + RATES
        + "INSERT INTO eur SELECT o.order_id, o.amount * r.rate AS eur FROM orders o "
        "LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency"
    )
    assert spec["operator"]["kind"] == "temporal"
    assert spec["operator"]["how"] == "left"
    assert spec["inputs"]["orders"]["key"] == {"field": "currency"}
    assert spec["inputs"]["rates"]["key"] == {"field": "currency"}


def test_as_of_proctime_compiles_to_a_lookup_join_bounded_by_the_tables_max_rows() -> None:
    spec = compiled(
        ORDERS.replace("region VARCHAR", "currency VARCHAR")
        + RATES.replace("topic = 'rates'", "topic = 'rates', max_rows = 1000")
        + "INSERT INTO eur SELECT o.order_id, r.rate FROM orders o "
        "LEFT JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency"
    )
    operator = spec["operator"]
    assert (operator["kind"], operator["how"], operator["max_rows"]) == ("lookup", "left", 1000)
    assert (operator["left"], operator["right"]) == ("orders", "rates")
    assert spec["inputs"]["rates"]["key"] == {"field": "currency"}


def test_a_lookup_join_without_the_tables_max_rows_is_refused_at_the_table() -> None:
    sql = (
        ORDERS.replace("region VARCHAR", "currency VARCHAR")
        + RATES
        + "INSERT INTO eur SELECT o.order_id FROM orders o "
        "JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency"
    )
    problem = only_problem(sql)
    assert "max_rows" in problem.message and "rates" in problem.message
    assert (problem.at.statement, problem.at.line) == (2, where(sql, "rates (")[0])


def test_several_key_equalities_compile_to_one_composite_key_per_input() -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS.replace("paid DOUBLE", "paid DOUBLE, region VARCHAR")
        + "INSERT INTO paid SELECT * FROM orders o JOIN payments p ON o.order_id = p.order_id "
        "AND o.region = p.region AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE"
    )
    for name in ("orders", "payments"):
        assert spec["inputs"][name]["key"] == {"field": "_sql_key"}
        assert spec["inputs"][name]["steps"] == [
            {"set": {"_sql_key": "CAST(`order_id` AS VARCHAR) || '|' || CAST(`region` AS VARCHAR)"}}
        ]


def test_a_join_without_time_bounds_compiles_to_a_regular_join() -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id, p.paid FROM orders o JOIN payments p "
        "ON o.order_id = p.order_id WHERE o.amount > 10"
    )
    assert spec["operator"] == {
        "type": "join",
        "kind": "regular",
        "how": "inner",
        "left": "orders",
        "right": "payments",
        "select": {"order_id": "`orders`.`order_id`", "paid": "`payments`.`paid`"},
    }
    assert spec["inputs"]["orders"]["steps"] == [{"filter": "`amount` > 10"}]


@pytest.mark.parametrize(
    ("join", "how"),
    [("LEFT JOIN", "left"), ("RIGHT OUTER JOIN", "right"), ("FULL OUTER JOIN", "full")],
)
def test_an_outer_join_without_time_bounds_compiles_to_an_outer_regular_join(
    join: str, how: str
) -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS
        + f"INSERT INTO paid SELECT o.order_id, p.paid FROM orders o {join} payments p "
        "ON o.order_id = p.order_id"
    )
    assert (spec["operator"]["kind"], spec["operator"]["how"]) == ("regular", how)


def test_flinks_state_ttl_setting_bounds_a_regular_joins_state() -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS
        + "SET 'table.exec.state.ttl' = '1 h';\n"
        + "INSERT INTO paid SELECT * FROM orders o JOIN payments p ON o.order_id = p.order_id"
    )
    assert spec["operator"]["state_ttl_ms"] == 3_600_000


def test_each_input_of_a_join_takes_its_sources_format() -> None:
    spec = compiled(
        ORDERS.replace("partitioned_by = 'user'", "format = 'avro'")
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id, p.paid FROM orders o JOIN payments p "
        "ON o.order_id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE"
    )
    assert spec["inputs"]["orders"]["source"]["format"] == "avro"
    assert spec["inputs"]["payments"]["source"]["format"] == "json"


def test_a_lookup_table_takes_a_registry_format() -> None:
    spec = compiled(
        ORDERS.replace("region VARCHAR", "currency VARCHAR")
        + RATES.replace("topic = 'rates'", "topic = 'rates', max_rows = 10, format = 'avro'")
        + "INSERT INTO eur SELECT o.order_id, r.rate FROM orders o "
        "JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency"
    )
    assert spec["inputs"]["rates"]["source"]["format"] == "avro"


_WINDOWS = (
    "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) o "
    "{join} TUMBLE(payments, ts, INTERVAL '1' MINUTE) p ON o.order_id = p.order_id "
    "AND o.window_start = p.window_start AND o.window_end = p.window_end"
)


def test_a_window_joins_select_names_the_rows_window_bounds() -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id, p.window_start AS starttime, window_end "
        + _WINDOWS.format(join="JOIN")
    )
    assert spec["operator"]["select"] == {
        "order_id": "`orders`.`order_id`",
        "starttime": "`window`.`start`",
        "window_end": "`window`.`end`",
    }


def test_a_left_semi_join_of_two_windows_compiles_to_a_semi_window_join() -> None:
    spec = compiled(
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id, o.window_start "
        + _WINDOWS.format(join="LEFT SEMI JOIN")
    )
    assert (spec["operator"]["kind"], spec["operator"]["how"]) == ("window", "semi")
    assert spec["operator"]["select"] == {
        "order_id": "`orders`.`order_id`",
        "window_start": "`window`.`start`",
    }


def test_a_left_anti_join_of_two_windows_compiles_to_an_anti_window_join() -> None:
    spec = compiled(
        ORDERS + PAYMENTS + "INSERT INTO unpaid SELECT o.order_id "
        "" + _WINDOWS.format(join="LEFT ANTI JOIN")
    )
    assert spec["operator"]["how"] == "anti"


def test_a_semi_joins_select_of_the_right_side_is_refused_at_the_item() -> None:
    sql = (
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id, p.paid "
        + _WINDOWS.format(join="LEFT SEMI JOIN")
    )
    problem = only_problem(sql)
    assert problem.type == "sql_unknown_column" and "left rows" in problem.message
    assert (problem.at.line, problem.at.column) == where(sql, "p.paid")


def test_a_semi_join_without_windows_is_refused() -> None:
    problem = only_problem(
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id FROM orders o LEFT SEMI JOIN payments p "
        "ON o.order_id = p.order_id"
    )
    assert problem.type == "how_not_for_kind" and "window join's" in problem.message


def test_window_start_outside_a_window_join_is_an_unknown_column() -> None:
    problem = only_problem(
        ORDERS
        + PAYMENTS
        + "INSERT INTO paid SELECT o.order_id, o.window_start FROM orders o JOIN payments p "
        "ON o.order_id = p.order_id"
    )
    assert problem.type == "sql_unknown_column"


def test_a_where_comparing_the_two_sides_compiles_to_the_joins_where() -> None:
    spec = compiled(
        ORDERS + PAYMENTS + "INSERT INTO paid SELECT o.order_id FROM orders o LEFT JOIN payments p "
        "ON o.order_id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE "
        "WHERE p.paid <= o.amount AND o.amount > 10"
    )
    assert spec["operator"]["where"] == "`payments`.`paid` <= `orders`.`amount`"
    assert spec["inputs"]["orders"]["steps"] == [{"filter": "`amount` > 10"}]


def test_an_inner_joins_on_comparing_the_two_sides_compiles_to_its_where_too() -> None:
    spec = compiled(
        ORDERS + PAYMENTS + "INSERT INTO paid SELECT o.order_id FROM orders o JOIN payments p "
        "ON o.order_id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE "
        "AND p.paid >= o.amount / 2 WHERE p.paid <= o.amount"
    )
    assert spec["operator"]["between"] == {"lower_ms": 0, "upper_ms": 60000}
    assert spec["operator"]["where"] == (
        "(`payments`.`paid` >= `orders`.`amount` / 2) AND (`payments`.`paid` <= `orders`.`amount`)"
    )


def test_a_where_over_both_sides_of_a_regular_join_compiles_to_its_where() -> None:
    spec = compiled(
        ORDERS + PAYMENTS + "INSERT INTO paid SELECT o.order_id FROM orders o JOIN payments p "
        "ON o.order_id = p.order_id WHERE p.ts BETWEEN o.ts AND o.ts + 5"
    )
    assert spec["operator"]["kind"] == "regular"
    assert (
        spec["operator"]["where"] == "`payments`.`ts` BETWEEN `orders`.`ts` AND `orders`.`ts` + 5"
    )


CUSTOMERS = """CREATE TABLE customers (
  id VARCHAR, name VARCHAR, ts BIGINT, PRIMARY KEY (id) NOT ENFORCED, WATERMARK FOR ts AS ts
) WITH (topic = 'customers');
"""


def test_a_table_joined_on_its_primary_key_is_a_table_input_keyed_by_the_kafka_key() -> None:
    spec = compiled(
        ORDERS.replace("region VARCHAR", "customer VARCHAR")
        + CUSTOMERS
        + "INSERT INTO named SELECT o.order_id, c.name FROM orders o "
        "LEFT JOIN customers c ON o.customer = c.id"
    )
    assert spec["operator"]["kind"] == "regular"
    customers = spec["inputs"]["customers"]
    assert customers["source"]["changelog"] == "upsert" and "key" not in customers


def test_a_table_joined_on_another_column_is_refused_at_that_column() -> None:
    sql = (
        ORDERS.replace("region VARCHAR", "customer VARCHAR")
        + CUSTOMERS
        + "INSERT INTO named SELECT o.order_id, c.id FROM orders o "
        "JOIN customers c ON o.customer = c.name"
    )
    problem = only_problem(sql)
    assert problem.type == "table_input_keyed_by_field"
    assert (problem.at.line, problem.at.column) == where(sql, "c.name")
