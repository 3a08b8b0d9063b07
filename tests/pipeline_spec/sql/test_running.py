"""A GROUP BY without a window compiles to the running aggregate (#50)."""

from __future__ import annotations

from .scripts import ORDERS, compiled, problems


def test_a_group_by_without_a_window_is_a_running_aggregate() -> None:
    spec = compiled(
        ORDERS + 'INSERT INTO totals SELECT "user", COUNT(*) AS orders, SUM(amount) AS revenue '
        "FROM orders WHERE status = 'paid' GROUP BY \"user\""
    )
    assert spec["operator"] == {
        "type": "aggregate",
        "aggregations": {"orders": {"fn": "count"}, "revenue": {"fn": "sum", "field": "amount"}},
    }
    assert spec["key"] == {"field": "user", "partitioned": True}
    assert spec["steps"] == [{"filter": "`status` = 'paid'"}]
    assert spec["timestamp"]["field"] == "ts"
    assert spec["sink"] == {"topic": "totals"}


def test_the_emit_interval_and_state_ttl_are_set_as_flink_names_them_too() -> None:
    spec = compiled(
        ORDERS
        + "SET 'table.exec.mini-batch.allow-latency' = '250 ms';\n"
        + "SET state_ttl = INTERVAL '1' HOUR;\n"
        + "SET delivery = 'exactly_once';\n"
        + "INSERT INTO totals SELECT region, MAX(amount) AS top FROM orders GROUP BY region"
    )
    assert spec["operator"]["emit_interval_ms"] == 250
    assert spec["operator"]["state_ttl_ms"] == 3_600_000
    assert spec["delivery"] == "exactly_once"
    assert spec["key"] == {"field": "region"}  # not the source's partitioning: shuffled


def test_several_keys_or_none() -> None:
    spec = compiled(
        ORDERS + "INSERT INTO t SELECT region, status, COUNT(*) AS n FROM orders "
        "GROUP BY region, status"
    )
    assert spec["key"] == {"field": "_sql_key"}
    assert spec["steps"] == [
        {"set": {"_sql_key": "CAST(`region` AS VARCHAR) || '|' || CAST(`status` AS VARCHAR)"}}
    ]
    everything = compiled(ORDERS + "INSERT INTO t SELECT COUNT(*) AS n FROM orders")
    assert everything["key"] == {"field": "_sql_key"}
    assert everything["steps"] == [{"set": {"_sql_key": "'all'"}}]
    assert everything["operator"]["type"] == "aggregate"


def test_a_column_that_is_no_key_nor_aggregate_is_refused() -> None:
    sql = ORDERS + "INSERT INTO t SELECT region, amount, COUNT(*) AS n FROM orders GROUP BY region"
    (problem,) = problems(sql)
    assert "neither a group key nor an aggregate" in problem.message
    assert "a running aggregate's result" in problem.message
