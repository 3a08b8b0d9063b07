"""Window aggregations compile to the window operator, key and aggregations they name."""

from __future__ import annotations

import pytest

from .scripts import ORDERS, compiled, only_problem, where


def test_the_issue_example_compiles_to_a_tumbling_window_with_steps_and_a_partitioned_key() -> None:
    spec = compiled(
        ORDERS
        + """
INSERT INTO revenue_per_user
SELECT "user", window_start, window_end, COUNT(*) AS orders, SUM(amount * 1.1) AS revenue
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)
WHERE status = 'paid'
GROUP BY "user", window_start, window_end;
""",
        name="revenue-per-user",
    )
    assert spec == {
        "name": "revenue-per-user",
        "source": {"topics": ["orders"], "format": "json"},
        "steps": [
            {"filter": "`status` = 'paid'"},
            {"set": {"_sql_revenue": "`amount` * 1.1"}},
        ],
        "key": {"field": "user", "partitioned": True},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {"strategy": "bounded_out_of_orderness", "max_out_of_orderness_ms": 1999},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 60000},
            "time": "event",
            "aggregations": {
                "orders": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "_sql_revenue"},
            },
        },
        "sink": {"topic": "revenue_per_user"},
    }


def window_of(query: str) -> dict[str, object]:
    return compiled(ORDERS + query)


def test_hop_compiles_to_a_sliding_assigner_slide_first() -> None:
    spec = window_of(
        "INSERT INTO out SELECT region, window_start, window_end, MAX(amount) AS top "
        "FROM HOP(orders, ts, INTERVAL '10' SECOND, INTERVAL '1' MINUTE) "
        "GROUP BY region, window_start, window_end"
    )
    assert spec["operator"]["assigner"] == {  # type: ignore[index]
        "type": "sliding",
        "size_ms": 60000,
        "slide_ms": 10000,
    }
    assert spec["key"] == {"field": "region"}
    assert spec["operator"]["aggregations"] == {"top": {"fn": "max", "field": "amount"}}  # type: ignore[index]


def test_session_compiles_to_a_session_assigner() -> None:
    spec = window_of(
        'INSERT INTO out SELECT "user", window_start, window_end, COUNT(*) AS n '
        "FROM SESSION(orders, ts, INTERVAL '30' SECOND) GROUP BY \"user\", window_start, window_end"
    )
    assert spec["operator"]["assigner"] == {"type": "session", "gap_ms": 30000}  # type: ignore[index]


def test_tumble_with_an_offset_compiles_to_offset_ms() -> None:
    spec = window_of(
        "INSERT INTO out SELECT window_start, window_end, COUNT(*) AS n "
        "FROM TUMBLE(orders, ts, INTERVAL '1' DAY, INTERVAL '2' HOUR) "
        "GROUP BY window_start, window_end"
    )
    assert spec["operator"]["assigner"] == {  # type: ignore[index]
        "type": "tumbling",
        "size_ms": 86_400_000,
        "offset_ms": 7_200_000,
    }


def test_no_group_key_is_one_constant_key_a_non_keyed_window() -> None:
    spec = window_of(
        "INSERT INTO out SELECT window_start, window_end, COUNT(*) AS n "
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY window_start, window_end"
    )
    assert spec["steps"] == [{"set": {"_sql_key": "'all'"}}]
    assert spec["key"] == {"field": "_sql_key"}


def test_a_composite_group_key_is_one_field_joining_both_columns() -> None:
    spec = window_of(
        'INSERT INTO out SELECT "user", region, window_start, window_end, COUNT(*) AS n '
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) "
        'GROUP BY "user", region, window_start, window_end'
    )
    assert spec["steps"] == [
        {"set": {"_sql_key": "CAST(`user` AS VARCHAR) || '|' || CAST(`region` AS VARCHAR)"}}
    ]
    assert spec["key"] == {"field": "_sql_key"}


def test_a_nested_field_group_key_is_a_dotted_key_path() -> None:
    spec = window_of(
        "INSERT INTO out SELECT payload.a.b, window_start, window_end, COUNT(*) AS n "
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) "
        "GROUP BY payload.a.b, window_start, window_end"
    )
    assert spec["key"] == {"field": "payload.a.b"}


def test_every_aggregate_function_maps_to_its_operator_function() -> None:
    spec = window_of(
        "INSERT INTO out SELECT region, window_start, window_end, COUNT(*) AS n, "
        'COUNT(DISTINCT "user") AS users, COUNT(status) AS with_status, SUM(amount) AS total, '
        "MIN(amount) AS low, MAX(amount) AS high, AVG(amount) AS mean, "
        "FIRST_VALUE(order_id) AS first_id, LAST_VALUE(order_id) AS last_id, "
        "ARRAY_AGG(order_id) AS ids "
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY region, window_start, window_end"
    )
    assert spec["operator"]["aggregations"] == {  # type: ignore[index]
        "n": {"fn": "count"},
        "users": {"fn": "count_distinct", "field": "user"},
        "with_status": {"fn": "sum", "field": "_sql_with_status"},
        "total": {"fn": "sum", "field": "amount"},
        "low": {"fn": "min", "field": "amount"},
        "high": {"fn": "max", "field": "amount"},
        "mean": {"fn": "avg", "field": "amount"},
        "first_id": {"fn": "first", "field": "order_id"},
        "last_id": {"fn": "last", "field": "order_id"},
        "ids": {"fn": "collect", "field": "order_id"},
    }
    assert spec["steps"] == [
        {"set": {"_sql_with_status": "CASE WHEN `status` IS NULL THEN 0 ELSE 1 END"}}
    ]


def test_cast_and_case_in_an_aggregate_become_a_set_step() -> None:
    spec = window_of(
        "INSERT INTO out SELECT region, window_start, window_end, "
        "SUM(CASE WHEN status = 'paid' THEN CAST(amount AS INT) ELSE 0 END) AS paid "
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY region, window_start, window_end"
    )
    assert spec["steps"] == [
        {"set": {"_sql_paid": "CASE WHEN `status` = 'paid' THEN CAST(`amount` AS INT) ELSE 0 END"}}
    ]


def test_set_statements_give_lateness_early_firing_and_delivery() -> None:
    spec = window_of(
        "SET allowed_lateness = INTERVAL '5' SECOND;\n"
        "SET early_fire = '10 seconds';\n"
        "SET delivery = 'exactly_once';\n"
        "INSERT INTO out SELECT region, window_start, window_end, COUNT(*) AS n "
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY region, window_start, window_end"
    )
    assert spec["operator"]["allowed_lateness_ms"] == 5000  # type: ignore[index]
    assert spec["operator"]["trigger"] == {"type": "continuous", "interval_ms": 10000}  # type: ignore[index]
    assert spec["delivery"] == "exactly_once"


def test_create_sink_gives_the_topics_and_emit_on_window_close_is_accepted() -> None:
    spec = window_of(
        "CREATE SINK revenue WITH (topic = 'revenue-per-user', late_topic = 'revenue.late', "
        "dead_letter_topic = 'revenue.dlq');\n"
        "INSERT INTO revenue SELECT region, window_start, window_end, COUNT(*) AS n "
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY region, window_start, window_end "
        "EMIT ON WINDOW CLOSE"
    )
    assert spec["sink"] == {
        "topic": "revenue-per-user",
        "late_topic": "revenue.late",
        "dead_letter_topic": "revenue.dlq",
    }


def test_insert_into_a_quoted_name_writes_to_that_topic() -> None:
    spec = window_of(
        'INSERT INTO "revenue-per-user" SELECT window_start, window_end, COUNT(*) AS n '
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY window_start, window_end"
    )
    assert spec["sink"] == {"topic": "revenue-per-user"}


def test_max_by_and_min_by_compile_to_aggregations_with_their_by_field() -> None:
    spec = compiled(
        ORDERS + "INSERT INTO top SELECT MAX_BY(order_id, amount) AS biggest, "
        'MIN_BY(order_id, amount * 2) AS smallest, ARG_MAX("user", amount) AS who, '
        "window_start, window_end FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) "
        "GROUP BY window_start, window_end"
    )
    assert spec["operator"]["aggregations"] == {
        "biggest": {"fn": "max_by", "field": "order_id", "by": "amount"},
        "smallest": {"fn": "min_by", "field": "order_id", "by": "_sql_smallest_by"},
        "who": {"fn": "max_by", "field": "user", "by": "amount"},
    }
    assert spec["steps"][-1]["set"]["_sql_smallest_by"] == "`amount` * 2"


FLINK_FORMS = [
    (
        "TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))",
        "TUMBLE(orders, ts, INTERVAL '1' MINUTE)",
    ),
    (
        "TABLE(HOP(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND, INTERVAL '1' MINUTE))",
        "HOP(orders, ts, INTERVAL '10' SECOND, INTERVAL '1' MINUTE)",
    ),
    (
        "TABLE(\n  SESSION(TABLE orders, DESCRIPTOR(ts), INTERVAL '30' SECOND)\n)",
        "SESSION(orders, ts, INTERVAL '30' SECOND)",
    ),
]


@pytest.mark.parametrize(("flink", "ours"), FLINK_FORMS)
def test_flink_s_window_table_function_syntax_compiles_as_the_short_form(
    flink: str, ours: str
) -> None:
    query = (
        'INSERT INTO out SELECT "user", window_start, window_end, COUNT(*) AS n '
        'FROM {} GROUP BY "user", window_start, window_end'
    )
    assert window_of(query.format(flink)) == window_of(query.format(ours))


def test_a_problem_after_flink_s_syntax_is_at_its_place_in_the_script() -> None:
    sql = (
        ORDERS + 'INSERT INTO out SELECT "user", window_start, window_end, SUM(nope) AS n\n'
        "FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n"
        'GROUP BY "user", window_start, window_end'
    )
    found = only_problem(sql)
    assert (found.at.line, found.at.column) == where(sql, "nope")
