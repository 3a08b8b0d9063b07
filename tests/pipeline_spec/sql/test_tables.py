"""Tables as sources in SQL (#50): ``CREATE TABLE ... WITH (changelog = 'upsert')`` or a
``PRIMARY KEY (...) NOT ENFORCED`` reads a topic as a table; a GROUP BY over it is the
running aggregate with retractions, keyed by the Kafka key when it groups by the primary
key, through the retraction shuffle otherwise; what cannot retract is refused where it
was written."""

from __future__ import annotations

import pytest

from .scripts import compiled, only_problem, where

ORDERS_TABLE = """CREATE TABLE orders (
  order_id VARCHAR, customer VARCHAR, amount DOUBLE,
  PRIMARY KEY (order_id) NOT ENFORCED
) WITH (topic = 'orders');
"""

TOTALS = (
    "INSERT INTO totals SELECT customer, COUNT(*) AS orders, SUM(amount) AS revenue "
    "FROM orders GROUP BY customer"
)


@pytest.mark.parametrize(
    "declaration",
    [
        ORDERS_TABLE,
        "CREATE TABLE orders (order_id VARCHAR, customer VARCHAR, amount DOUBLE) "
        "WITH (topic = 'orders', changelog = 'upsert');\n",
        "CREATE SOURCE orders (order_id VARCHAR PRIMARY KEY NOT ENFORCED, customer VARCHAR, "
        "amount DOUBLE) WITH (topic = 'orders', 'changelog' = 'upsert');\n",
    ],
)
def test_a_primary_key_or_the_upsert_changelog_declares_a_table(declaration: str) -> None:
    spec = compiled(declaration + TOTALS)
    assert spec["source"] == {"topics": ["orders"], "format": "json", "changelog": "upsert"}
    assert spec["key"] == {"field": "customer"}  # the retraction shuffle
    assert spec["operator"]["type"] == "aggregate"


def test_grouped_by_its_primary_key_a_table_is_keyed_by_the_kafka_key() -> None:
    spec = compiled(
        ORDERS_TABLE + "INSERT INTO t SELECT order_id, MAX(amount) AS top FROM orders "
        "GROUP BY order_id"
    )
    assert "key" not in spec


def test_another_pipelines_upserts_are_a_table_whose_result_fields_are_columns() -> None:
    spec = compiled(
        "CREATE TABLE totals (key VARCHAR, result STRUCT<orders BIGINT, revenue DOUBLE>, "
        "PRIMARY KEY (key) NOT ENFORCED) WITH (topic = 'totals');\n"
        "INSERT INTO big SELECT COUNT(*) AS customers, SUM(result.revenue) AS revenue, "
        "MAX(result.orders) AS most FROM totals"
    )
    assert spec["source"]["changelog"] == "upsert"
    assert spec["operator"]["aggregations"] == {
        "customers": {"fn": "count"},
        "revenue": {"fn": "sum", "field": "result.revenue"},
        "most": {"fn": "max", "field": "result.orders"},
    }
    assert spec["key"] == {"field": "_sql_key"}


def test_an_aggregate_that_cannot_retract_is_refused_where_it_is_written() -> None:
    sql = ORDERS_TABLE + (
        "INSERT INTO t SELECT customer, MAX_BY(order_id, amount) AS biggest FROM orders "
        "GROUP BY customer"
    )
    problem = only_problem(sql)
    assert problem.type == "aggregation_cannot_retract"
    assert problem.at.line == where(sql, "MAX_BY")[0]
    assert problem.spec_loc == ("operator", "aggregations", "biggest", "fn")


def test_a_where_over_a_table_is_a_filter_whose_dropped_versions_are_deletes() -> None:
    spec = compiled(ORDERS_TABLE + TOTALS.replace(" GROUP BY", " WHERE amount > 1 GROUP BY"))
    assert spec["source"]["changelog"] == "upsert"
    assert spec["steps"] == [{"filter": "`amount` > 1"}]


def test_a_primary_key_with_the_append_changelog_is_refused() -> None:
    problem = only_problem(
        "CREATE TABLE orders (order_id VARCHAR, customer VARCHAR, amount DOUBLE, "
        "PRIMARY KEY (order_id) NOT ENFORCED) WITH (topic = 'orders', changelog = 'append');\n"
        + TOTALS
    )
    assert problem.type == "sql_option"
    assert "PRIMARY KEY" in problem.message


def test_a_primary_key_names_a_declared_column() -> None:
    problem = only_problem(
        "CREATE TABLE orders (customer VARCHAR, amount DOUBLE, PRIMARY KEY (id) NOT ENFORCED) "
        "WITH (topic = 'orders');\n" + TOTALS
    )
    assert problem.type == "sql_unknown_column"


def test_a_top_n_over_a_table_ranks_its_rows_by_partition() -> None:
    spec = compiled(
        ORDERS_TABLE + "INSERT INTO top SELECT * FROM (SELECT *, ROW_NUMBER() OVER "
        "(PARTITION BY customer ORDER BY amount DESC) AS rn FROM orders) WHERE rn <= 3"
    )
    assert spec["source"]["changelog"] == "upsert"
    assert spec["key"] == {"field": "customer"}  # the retraction shuffle
    assert spec["operator"] == {
        "type": "top_n",
        "order_by": {"field": "amount", "desc": True},
        "n": 3,
    }
