"""A JSON spec and its SQL twin are refused alike (issue 49): where a script compiles to
a spec, the spec's rules refuse it, so the 422 entry has the rule's type and message,
at the spec's path (``spec_loc``) and at the statement, line and column it was written
from. SQL refuses by itself only what the spec cannot express."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from service.pipeline_spec.models import validate_spec

from .scripts import ORDERS, PAYMENTS, RATES, compiled, problems, where

REGULAR = (
    "INSERT INTO paid SELECT o.order_id, p.paid FROM orders o {join} payments p "
    "ON o.order_id = p.order_id"
)
INTERVAL = REGULAR + " AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE"
TTL = "SET state_ttl = INTERVAL '1' HOUR;\n"


def json_entries(spec: dict[str, Any]) -> list[tuple[tuple[Any, ...], str, str]]:
    """A JSON spec's 422: each problem's path, type and message."""
    with pytest.raises(ValidationError) as caught:
        validate_spec(spec, ())
    return [(tuple(e["loc"]), e["type"], e["msg"]) for e in caught.value.errors()]


def sql_entries(sql: str) -> list[tuple[tuple[Any, ...] | None, str, str]]:
    """A script's 422: each problem's spec path, type and message (without the path
    SQL appends to a spec problem's message)."""
    return [(p.spec_loc, p.type, p.message.split(" (the spec's ")[0]) for p in problems(sql)]


def twin(sql: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The spec the valid ``sql`` compiles to, changed as its refused twin script is."""
    spec = copy.deepcopy(compiled(sql))
    change(spec)
    return spec


def test_a_right_temporal_join_is_refused_alike_in_json_and_sql() -> None:
    orders = ORDERS.replace("region VARCHAR", "currency VARCHAR")
    temporal = (
        "INSERT INTO eur SELECT o.order_id, r.rate FROM orders o "
        "{join} rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency"
    )
    valid = orders + RATES + temporal.format(join="JOIN")
    refused = orders + RATES + temporal.format(join="RIGHT JOIN")
    spec = twin(valid, lambda s: s["operator"].update(how="right"))
    assert sql_entries(refused) == json_entries(spec)
    assert [e[:2] for e in json_entries(spec)] == [(("operator", "how"), "how_not_for_kind")]
    problem = problems(refused)[0]
    assert (problem.at.statement, problem.at.line, problem.at.column) == (
        3,
        *where(refused, "RIGHT JOIN"),
    )


def test_a_semi_join_of_two_streams_is_refused_alike_in_json_and_sql() -> None:
    valid = ORDERS + PAYMENTS + REGULAR.format(join="JOIN").replace(", p.paid", "")
    refused = ORDERS + PAYMENTS + REGULAR.format(join="LEFT SEMI JOIN").replace(", p.paid", "")
    spec = twin(valid, lambda s: s["operator"].update(how="semi"))
    assert sql_entries(refused) == json_entries(spec)
    assert "window join's" in json_entries(spec)[0][2]


def test_a_state_ttl_on_an_interval_join_is_refused_alike_in_json_and_sql() -> None:
    valid = ORDERS + PAYMENTS + INTERVAL.format(join="JOIN")
    refused = ORDERS + PAYMENTS + TTL + INTERVAL.format(join="JOIN")
    spec = twin(valid, lambda s: s["operator"].update(state_ttl_ms=3_600_000))
    assert sql_entries(refused) == json_entries(spec)
    assert [e[:2] for e in json_entries(spec)] == [
        (("operator", "state_ttl_ms"), "state_ttl_unused")
    ]
    problem = problems(refused)[0]
    assert (problem.at.statement, problem.at.line, problem.at.column) == (
        3,
        *where(refused, "'1' HOUR"),
    )


def test_a_scripts_own_problem_does_not_hide_a_rules_problem() -> None:
    """An unknown column (SQL's own problem: no spec comes out) and a state TTL on an
    interval join (the rule's) in one answer, each at its place."""
    sql = ORDERS + PAYMENTS + TTL + INTERVAL.format(join="JOIN").replace("p.paid", "p.price")
    assert [(p.type, p.at.statement, p.at.line, p.at.column) for p in problems(sql)] == [
        ("state_ttl_unused", 3, *where(sql, "'1' HOUR")),
        ("sql_unknown_column", 4, *where(sql, "p.price")),
    ]


def test_a_lookup_join_without_max_rows_is_refused_alike_in_json_and_sql() -> None:
    """The table's CREATE SOURCE is where the script leaves max_rows out: the rule's
    problem is placed there, and says how SQL writes it."""
    lookup = (
        ORDERS.replace("region VARCHAR", "currency VARCHAR")
        + "{rates}INSERT INTO eur SELECT o.order_id FROM orders o "
        "JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency"
    )
    valid = lookup.format(rates=RATES.replace("topic = 'rates'", "topic = 'rates', max_rows = 9"))
    refused = lookup.format(rates=RATES)
    spec = twin(valid, lambda s: s["operator"].pop("max_rows"))
    assert sql_entries(refused) == json_entries(spec)
    assert [e[:2] for e in json_entries(spec)] == [(("operator", "max_rows"), "missing")]
    problem = problems(refused)[0]
    assert (problem.at.statement, problem.at.line) == (2, where(refused, "rates (")[0])
    assert "WITH (max_rows = N) on CREATE SOURCE rates" in problem.message


def test_a_refused_clause_does_not_hide_a_windows_rule_problem() -> None:
    """HAVING (SQL's own refusal) and a HOP whose slide exceeds its size (the rule's),
    and a sink that is the source (another rule's): one answer, each at its place."""
    sql = ORDERS + (
        "INSERT INTO orders SELECT window_start, window_end, COUNT(*) AS n\n"
        "FROM HOP(orders, ts, INTERVAL '2' MINUTE, INTERVAL '1' MINUTE)\n"
        "GROUP BY window_start, window_end HAVING COUNT(*) > 1"
    )
    assert [(p.type, p.at.statement, p.at.line, p.at.column) for p in problems(sql)] == [
        ("sink_is_source", 2, *where(sql, "orders SELECT")),
        ("slide_greater_than_size", 2, *where(sql, "HOP(")),
        ("sql_unsupported", 2, *where(sql, "HAVING")),
    ]


TOP_N = (
    "INSERT INTO top SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY region "
    "ORDER BY amount DESC) AS rn FROM orders) WHERE rn <= {n}"
)


def test_a_top_n_beyond_its_largest_n_is_refused_alike_in_json_and_sql() -> None:
    refused = ORDERS + TOP_N.format(n=20000)
    spec = twin(ORDERS + TOP_N.format(n=3), lambda s: s["operator"].update(n=20000))
    assert sql_entries(refused) == json_entries(spec)
    assert [e[:2] for e in json_entries(spec)] == [(("operator", "n"), "less_than_equal")]
    problem = problems(refused)[0]
    assert (problem.at.line, problem.at.column) == where(refused, "20000")
