"""A plain SELECT (no window, no join) compiles to the stateless map operator."""

from __future__ import annotations

from .scripts import ORDERS, compiled


def test_a_plain_select_filters_computes_and_keeps_the_listed_columns_in_order() -> None:
    spec = compiled(
        ORDERS + "INSERT INTO big SELECT order_id, amount * 2 AS twice, o.status "
        "FROM orders o WHERE amount > 10"
    )
    assert spec["operator"] == {"type": "map", "fields": ["order_id", "twice", "status"]}
    assert spec["steps"] == [{"filter": "`amount` > 10"}, {"set": {"twice": "`amount` * 2"}}]
    assert spec["source"]["topics"] == ["orders"]
    assert spec["timestamp"]["field"] == "ts"
    assert "key" not in spec  # the outputs keep the source record's Kafka key


def test_select_star_keeps_the_whole_record() -> None:
    spec = compiled(ORDERS + "INSERT INTO paid SELECT * FROM orders WHERE status = 'paid'")
    assert spec["operator"] == {"type": "map"}
    assert spec["steps"] == [{"filter": "`status` = 'paid'"}]


def test_a_nested_field_is_selected_under_its_last_name() -> None:
    spec = compiled(ORDERS + "INSERT INTO out SELECT order_id, payload.a.b FROM orders")
    assert spec["steps"] == [{"set": {"b": "`payload`.`a`.`b`"}}]
    assert spec["operator"]["fields"] == ["order_id", "b"]
