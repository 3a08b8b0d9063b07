"""Updating results checked against Flink SQL (#50): a FULL OUTER regular join and a
GROUP BY without a window, the same query on the same events, give the same table in
Clockwork (its upsert stream over the REST API, through the broker, folded by Kafka
key, a tombstone deleting) and in Flink SQL (its changelog, ``+I``/``-U``/``+U``/``-D``
rows folded).

Flink's changelog of a regular join is a multiset of rows (a padded row is ``+I`` and
later ``-D``, the joined rows ``+I``), so both sides fold to a multiset of rows, not to
a keyed table; a group aggregate's folds by its group key. The result of neither
depends on how the two engines interleave the inputs (both are folded over the whole
input). How the events and Flink are run: test_sql_flink.py.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.flink_sql import FlinkSql
from tests.integration.kafka_utils import read_topic
from tests.integration.test_sql_flink import BASE, Case, Input, run_case

pytestmark = [pytest.mark.integration, pytest.mark.flink]

Row = tuple[Any, ...]


def orders_and_payments() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """60 orders of ids o0 to o19 (o0 to o4 never paid), 50 payments of ids o5 to o24
    (o20 to o24 never ordered), each input in time order."""
    rng = random.Random(50)
    orders = [
        {"order_id": f"o{rng.randrange(20)}", "amount": float(n), "ts": BASE + n * 300}
        for n in range(60)
    ]
    payments = [
        {"order_id": f"o{rng.randrange(5, 25)}", "paid": n + 0.5, "ts": BASE + n * 350 + 100}
        for n in range(50)
    ]
    return orders, payments


_ORDERS, _PAYMENTS = orders_and_payments()

FULL_OUTER_JOIN = Case(
    "full-outer-regular-join",
    (
        Input("orders", "order_id VARCHAR, amount DOUBLE", "order_id", "ts", _ORDERS),
        Input("payments", "order_id VARCHAR, paid DOUBLE", "order_id", "ts", _PAYMENTS),
    ),
    "SELECT o.order_id AS order_id, o.amount AS amount, p.order_id AS paid_for, "
    "p.paid AS paid FROM orders o FULL OUTER JOIN payments p ON o.order_id = p.order_id",
)
JOIN_COLUMNS = ("order_id", "amount", "paid_for", "paid")


def purchases() -> list[dict[str, Any]]:
    rng = random.Random(51)
    return [
        {"customer": f"c{rng.randrange(7)}", "qty": rng.randrange(1, 9), "ts": BASE + i * 10}
        for i in range(300)
    ]


GROUP_BY = Case(
    "group-by",
    (Input("purchases", "customer VARCHAR, qty BIGINT", "customer", "ts", purchases()),),
    "SELECT customer, COUNT(*) AS orders, SUM(qty) AS qty, MAX(qty) AS most "
    "FROM purchases GROUP BY customer",
)
GROUP_COLUMNS = ("orders", "qty", "most")


def write_files(case: Case, folder: Path) -> dict[str, Path]:
    """Each input's events as JSON lines, the time as ``ts_ms`` (Flink's table computes
    ``ts`` from it)."""
    paths: dict[str, Path] = {}
    for source in case.inputs:
        path = paths[source.name] = folder / f"{source.name}.json"
        with path.open("w") as out:
            for event in source.events:
                row = {k: v for k, v in event.items() if k != "ts"}
                out.write(json.dumps({**row, "ts_ms": event["ts"]}) + "\n")
    return paths


def flink_changelog(flink: FlinkSql, folder: Path, case: Case) -> list[tuple[dict[str, Any], str]]:
    """Flink's changelog of the case's query: each row by column name, with its kind."""
    statements, query = case.flink_sql(write_files(case, folder))
    columns, rows, kinds = flink.changelog(statements, query)
    return [
        (dict(zip(columns, row, strict=True)), kind) for row, kind in zip(rows, kinds, strict=True)
    ]


async def clockwork_table(case: Case, bootstrap: str) -> dict[bytes, dict[str, Any]]:
    """The case's upsert stream folded by Kafka key: each key's newest result."""
    topic = await run_case(case, bootstrap)
    table: dict[bytes, dict[str, Any]] = {}
    for record in await read_topic(bootstrap, topic):
        if record.value is None:
            table.pop(record.key, None)
        else:
            table[record.key] = json.loads(record.value)["result"]
    return table


async def test_a_full_outer_regular_join_folds_to_flink_s_changelog_folded(
    bootstrap_servers: str, flink: FlinkSql, tmp_path: Path
) -> None:
    want: Counter[Row] = Counter()
    kinds: Counter[str] = Counter()
    for row, kind in flink_changelog(flink, tmp_path, FULL_OUTER_JOIN):
        kinds[kind] += 1
        values = tuple(row[c] for c in JOIN_COLUMNS)
        if kind in ("INSERT", "UPDATE_AFTER"):
            want[values] += 1
        else:
            want[values] -= 1
    want = +want
    assert kinds["DELETE"], "Flink retracted no padded row: the case checks little"
    assert any(r[0] is None for r in want) and any(r[2] is None for r in want)
    table = await clockwork_table(FULL_OUTER_JOIN, bootstrap_servers)
    got = Counter(tuple(result[c] for c in JOIN_COLUMNS) for result in table.values())
    assert got == want


async def test_a_group_by_without_a_window_folds_to_flink_s_changelog_folded(
    bootstrap_servers: str, flink: FlinkSql, tmp_path: Path
) -> None:
    want: dict[str, Row] = {}
    for row, kind in flink_changelog(flink, tmp_path, GROUP_BY):
        if kind in ("INSERT", "UPDATE_AFTER"):
            want[row["customer"]] = tuple(row[c] for c in GROUP_COLUMNS)
        elif kind == "DELETE":
            want.pop(row["customer"], None)
    assert len(want) == 7, "Flink gave no full table: the case checks little"
    table = await clockwork_table(GROUP_BY, bootstrap_servers)
    got = {key.decode(): tuple(result[c] for c in GROUP_COLUMNS) for key, result in table.items()}
    assert got == want
