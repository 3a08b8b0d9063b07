"""Each registered aggregate, payload format and join kind is known wherever a user meets
it: its SQL form compiles to it, the served JSON Schema lists it, and the docs' tables
name it. A new registry entry fails here until each of those says it.

The registries: ``service/operators/window/aggregate_kinds.py`` (aggregates),
``service/runtime/formats/registry.py`` (formats), ``service/operators/join/kinds.py``
(join kinds). The SQL form of each entry is written here, once, as the script that must
compile to it: an entry without one fails (``KeyError``), and so does one whose form SQL
does not compile to it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from service.operators.join.kinds import JOIN_KINDS, KINDS
from service.operators.window.aggregate_kinds import AGGREGATE_NAMES, AGGREGATES, AggKind
from service.pipeline_spec.schema import pipeline_schema
from service.runtime.formats.registry import FORMAT_NAMES, FORMATS
from tests.pipeline_spec.sql.scripts import ORDERS, PAYMENTS, RATES, compiled

DOCS = Path(__file__).resolve().parents[2] / "docs"


@cache
def doc(name: str) -> str:
    return (DOCS / name).read_text()


def table_after(page: str, header: str) -> list[str]:
    """The rows of the Markdown table whose header row starts with ``header``."""
    lines = doc(page).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def first_cells(rows: list[str]) -> set[str]:
    """Every backticked name in the first cell of ``rows``."""
    return {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


def served() -> dict[str, Any]:
    return pipeline_schema(())


# -- aggregates ---------------------------------------------------------------------------

AGGREGATE_SQL = {
    "count": "COUNT(*)",
    "sum": "SUM(amount)",
    "min": "MIN(amount)",
    "max": "MAX(amount)",
    "avg": "AVG(amount)",
    "first": "FIRST_VALUE(amount)",
    "last": "LAST_VALUE(amount)",
    "count_distinct": "COUNT(DISTINCT amount)",
    "collect": "ARRAY_AGG(amount)",
    "max_by": "MAX_BY(amount, ts)",
    "min_by": "MIN_BY(amount, ts)",
}
"""Each aggregate's SQL form (docs/sql.md, "Window aggregations")."""


def test_every_aggregate_kind_has_its_entry() -> None:
    assert tuple(AGGREGATES) == tuple(AggKind)


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
def test_an_aggregates_sql_form_compiles_to_it(name: str) -> None:
    spec = compiled(
        ORDERS + f"INSERT INTO out SELECT region, window_start, window_end, {AGGREGATE_SQL[name]} "
        "AS a FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY region, window_start, "
        "window_end"
    )
    assert spec["operator"]["aggregations"]["a"]["fn"] == name


def test_the_schema_lists_every_aggregate() -> None:
    fn = served()["$defs"]["Aggregation"]["properties"]["fn"]
    assert fn["enum"] == list(AGGREGATE_NAMES)


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
def test_the_docs_name_every_aggregate(name: str) -> None:
    spec_page = doc("pipeline-spec.md")
    functions = spec_page[spec_page.index("The function: `aggregations`") :]
    assert f"`{name}`" in functions[: functions.index("**or**")], "pipeline-spec.md"
    sql_rows = table_after("sql.md", "| aggregate | aggregation |")
    assert any(f"`{name}`" in row or f'"fn": "{name}"' in row for row in sql_rows), "sql.md"
    for header in ("| function | Avro type |", "| function | Protobuf type |"):
        assert name in first_cells(table_after("formats.md", header)), f"formats.md {header}"


# -- payload formats ------------------------------------------------------------------------


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_a_formats_sql_form_compiles_to_it(name: str) -> None:
    source = ORDERS.replace("topic = 'orders'", f"topic = 'orders', format = '{name}'")
    spec = compiled(
        source + f"CREATE SINK out WITH (topic = 'out', format = '{name}');\n"
        "INSERT INTO out SELECT region, window_start, window_end, COUNT(*) AS n "
        "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY region, window_start, window_end"
    )
    assert spec["source"].get("format", "json") == name
    assert spec["sink"].get("format", "json") == name


def test_the_schema_lists_every_format_for_sources_and_sinks() -> None:
    defs = served()["$defs"]
    for model in ("SourceSpec", "SinkSpec"):
        assert defs[model]["properties"]["format"]["enum"] == list(FORMAT_NAMES), model


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_the_docs_name_every_format(name: str) -> None:
    assert name in first_cells(table_after("formats.md", "| `format` | the value is |"))
    sql_options = doc("sql.md")[doc("sql.md").index("- `WITH` options:") :]
    assert f"'{name}'" in sql_options[: sql_options.index("\n- ")], "sql.md WITH options"
    for field in ("source", "sink"):  # (the sink's row lists them as "json" | "avro" ...)
        row = next(r for r in doc("pipeline-spec.md").splitlines() if r.startswith(f"| `{field}`"))
        assert f"`{name}`" in row or f'"{name}"' in row, f"pipeline-spec.md, {field}"


def test_every_format_with_a_schema_has_its_column_in_the_compatibility_table() -> None:
    header = next(r for r in doc("formats.md").splitlines() if r.startswith("| change |"))
    typed = [f.name for f in FORMATS if f.schema_type is not None]
    assert re.findall(r"`([a-z_]+)`", header) == typed


# -- join kinds ---------------------------------------------------------------------------

_WINDOWED = (
    "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) o "
    "JOIN TUMBLE(payments, ts, INTERVAL '1' MINUTE) p ON o.order_id = p.order_id "
    "AND o.window_start = p.window_start AND o.window_end = p.window_end"
)
JOIN_SQL = {
    "interval": ORDERS
    + PAYMENTS
    + "INSERT INTO out SELECT o.order_id, p.paid FROM orders o JOIN payments p "
    "ON o.order_id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE",
    "window": ORDERS + PAYMENTS + "INSERT INTO out SELECT o.order_id, p.paid " + _WINDOWED,
    "temporal": ORDERS.replace("region VARCHAR", "currency VARCHAR")
    + RATES
    + "INSERT INTO out SELECT o.order_id, r.rate FROM orders o "
    "JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency",
    "lookup": ORDERS.replace("region VARCHAR", "currency VARCHAR")
    + RATES.replace("topic = 'rates'", "topic = 'rates', max_rows = 10")
    + "INSERT INTO out SELECT o.order_id, r.rate FROM orders o "
    "JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency",
    "regular": ORDERS
    + PAYMENTS
    + "INSERT INTO out SELECT o.order_id, p.paid FROM orders o JOIN payments p "
    "ON o.order_id = p.order_id",
}
"""Each join kind's SQL form (docs/sql.md, "Joins")."""


@pytest.mark.parametrize("name", KINDS)
def test_a_join_kinds_sql_form_compiles_to_it(name: str) -> None:
    assert compiled(JOIN_SQL[name])["operator"]["kind"] == name


def test_the_schema_lists_every_join_kind_and_the_how_each_takes() -> None:
    join = served()["$defs"]["JoinOperator"]
    assert join["properties"]["kind"]["enum"] == list(KINDS)
    hows = {
        case["if"]["properties"]["kind"]["const"]: case["then"]["properties"]["how"]["enum"]
        for fragment in join["allOf"]
        for case in fragment.get("allOf", [])
        if "how" in case.get("then", {}).get("properties", {})
    }
    assert hows == {name: list(kind.how_names) for name, kind in JOIN_KINDS.items()}


@pytest.mark.parametrize("name", KINDS)
def test_the_docs_name_every_join_kind(name: str) -> None:
    rows = doc("pipeline-spec.md").splitlines()
    kind_row = next(r for r in rows if r.startswith("| `kind` |"))
    how_row = next(r for r in rows if r.startswith("| `how` |"))
    assert f"`{name}`" in kind_row and f"`{name}`" in how_row, "pipeline-spec.md"
    joins = doc("sql.md")[doc("sql.md").index("### Joins") :]
    assert f'"kind": "{name}"' in joins[: joins.index("\n## ")], "sql.md Joins"
