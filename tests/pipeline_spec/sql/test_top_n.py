"""Flink's Top-N query compiles to the Top-N operator (#50); the variants it cannot
express are refused where they are written."""

from __future__ import annotations

import pytest

from .scripts import ORDERS, compiled, only_problem, problems, where

TOP = (
    "INSERT INTO top SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY region "
    "ORDER BY amount DESC) AS rn FROM orders WHERE status = 'paid') WHERE rn <= 3"
)


def test_row_number_over_a_partition_with_rn_at_most_n_is_a_top_n() -> None:
    spec = compiled(ORDERS + "SET emit_interval = INTERVAL '250' MILLISECOND;\n" + TOP)
    assert spec["operator"] == {
        "type": "top_n",
        "order_by": {"field": "amount", "desc": True},
        "n": 3,
        "emit_interval_ms": 250,
    }
    assert spec["key"] == {"field": "region"}
    assert spec["steps"] == [{"filter": "`status` = 'paid'"}]
    assert spec["timestamp"]["field"] == "ts"
    assert spec["sink"] == {"topic": "top"}


@pytest.mark.parametrize(
    ("condition", "n"), [("rn < 4", 3), ("rn = 1", 1), ("3 >= rn", 3), ("rn <= 10", 10)]
)
def test_the_bound_may_be_written_as_flink_takes_it(condition: str, n: int) -> None:
    sql = ORDERS + TOP.replace("rn <= 3", condition).replace("DESC", "ASC")
    spec = compiled(sql)
    assert spec["operator"]["n"] == n
    assert spec["operator"]["order_by"] == {"field": "amount", "desc": False}


def test_several_partition_columns_or_none_are_one_key() -> None:
    spec = compiled(ORDERS + TOP.replace("PARTITION BY region", "PARTITION BY region, status"))
    assert spec["key"] == {"field": "_sql_key"}
    assert spec["steps"][-1] == {
        "set": {"_sql_key": "CAST(`region` AS VARCHAR) || '|' || CAST(`status` AS VARCHAR)"}
    }
    everything = compiled(ORDERS + TOP.replace("PARTITION BY region ", ""))
    assert everything["steps"][-1] == {"set": {"_sql_key": "'all'"}}
    same = compiled(ORDERS + TOP.replace("PARTITION BY region", 'PARTITION BY "user"'))
    assert same["key"] == {"field": "user", "partitioned": True}


@pytest.mark.parametrize(
    ("change", "fragment", "says"),
    [
        (("SELECT * FROM (", "SELECT region, rn FROM ("), "region, rn", "selects *"),
        (("SELECT *, ROW", "SELECT amount, ROW"), "amount, ROW", "selects * and one"),
        (("rn <= 3", "rn > 3"), "rn > 3", "first N rows"),
        (("rn <= 3", "rn <= 'x'"), "'x'", "N is an integer"),
        (("rn <= 3", "rn = 2"), "rn = 2", "not the first rows"),
        (("rn <= 3", "amount <= 3"), "amount <= 3", "first N rows"),
        (("ORDER BY amount DESC", "ORDER BY amount * 2"), "amount * 2", "not an expression"),
        (("ORDER BY amount DESC", "ORDER BY amount, ts"), "ORDER BY amount, ts", "one column"),
        (("ORDER BY amount DESC", "ORDER BY nope"), "nope", "unknown column"),
        (("FROM orders WHERE", "FROM nowhere WHERE"), "nowhere", "unknown source"),
    ],
)
def test_what_a_top_n_cannot_express_is_refused_at_its_place(
    change: tuple[str, str], fragment: str, says: str
) -> None:
    sql = ORDERS + TOP.replace(*change)
    problem = only_problem(sql)
    assert says in problem.message
    assert (problem.at.line, problem.at.column) == where(sql, fragment)


def test_window_settings_are_refused_and_emit_interval_elsewhere_too() -> None:
    sql = ORDERS + "SET allowed_lateness = INTERVAL '1' SECOND;\n" + TOP
    problem = only_problem(sql)
    assert problem.type == "sql_option"
    assert "not for a Top-N" in problem.message
    plain = ORDERS + "SET emit_interval = INTERVAL '1' SECOND;\nINSERT INTO t SELECT * FROM orders"
    assert "or a Top-N" in only_problem(plain).message


def test_a_rule_of_the_spec_is_reported_too() -> None:
    found = problems(ORDERS + TOP.replace("rn <= 3", "rn <= 100000"))
    assert [p.type for p in found] == ["less_than_equal"]
    assert found[0].spec_loc == ("operator", "n")
