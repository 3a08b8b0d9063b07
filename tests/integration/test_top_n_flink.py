"""Top-N checked against Flink SQL (#50): the same query on the same sales, many of them
tied, gives the same table in Clockwork (its rank rows over the REST API, through the
broker, folded by Kafka key) and in Flink SQL (its changelog, ``+I``/``-U``/``+U``/``-D``
rows folded by ``(category, rn)``).

Flink's Top-N over an append-only input is its ``AppendOnlyTopNFunction``: a tie ranks
after the rows that came first, as Clockwork's (docs/semantics.md section 12). Both read
the sales in one order (one partition; one file with parallelism 1), so ties included,
the two tables must be equal. How the events and Flink are run: test_sql_flink.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.integration.flink_sql import FlinkSql
from tests.integration.test_sql_flink import BASE, Case, Input, _clockwork_records

pytestmark = [pytest.mark.integration, pytest.mark.flink]

N = 3
QUERY = (
    "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY category ORDER BY revenue "
    "{order}) AS rn FROM sales WHERE revenue > 3) WHERE rn <= " + str(N)
)


def sales() -> list[dict[str, Any]]:
    """400 sales over 6 categories, revenues 0 to 40: many ties, and a filter's worth."""
    rng = random.Random(52)
    return [
        {
            "category": f"c{rng.randrange(6)}",
            "product": f"p{i}",
            "revenue": rng.randrange(41),
            "ts": BASE + i * 10,
        }
        for i in range(400)
    ]


def case(order: str) -> Case:
    source = Input(
        "sales",
        "category VARCHAR, product VARCHAR, revenue BIGINT",
        "category",
        "ts",
        sales(),
    )
    return Case(f"top-n-{order.lower()}", (source,), QUERY.format(order=order))


def flink_table(flink: FlinkSql, folder: Path, top: Case) -> dict[str, tuple[str, int]]:
    """Flink's changelog folded by ``(category, rn)``: ``{"<category>|<rn>": (product,
    revenue)}``."""
    path = folder / "sales.json"
    with path.open("w") as out:
        for event in top.inputs[0].events:
            row = {k: v for k, v in event.items() if k != "ts"}
            out.write(json.dumps({**row, "ts_ms": event["ts"]}) + "\n")
    # No time column: a Top-N needs none, and py4j cannot hand a TIMESTAMP_LTZ of an
    # updating result back to Python.
    table_sql = (
        f"CREATE TABLE sales ({top.inputs[0].columns}, ts_ms BIGINT) "
        f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')"
    )
    columns, rows, kinds = flink.changelog([table_sql], top.query)
    at = {name: i for i, name in enumerate(columns)}
    table: dict[str, tuple[str, int]] = {}
    for row, kind in zip(rows, kinds, strict=True):
        key = f"{row[at['category']]}|{row[at['rn']]}"
        if kind in ("INSERT", "UPDATE_AFTER"):
            table[key] = (row[at["product"]], row[at["revenue"]])
        elif kind == "DELETE":
            table.pop(key, None)
    return table


@pytest.mark.parametrize("order", ["DESC", "ASC"])
async def test_a_top_n_folds_to_flink_s_changelog_folded(
    order: str, bootstrap_servers: str, flink: FlinkSql, tmp_path: Path
) -> None:
    top = case(order)
    want = flink_table(flink, tmp_path, top)
    assert len(want) == 6 * N, "Flink gave no full table: the case checks little"
    table: dict[str, tuple[str, int]] = {}
    for record in await _clockwork_records(top, bootstrap_servers):
        row = record["result"]["row"]
        table[record["key"]] = (row["product"], row["revenue"])
    assert table == want
