"""Top-N checked against Flink SQL (#50): the same query on the same sales, many of them
tied, gives the same table in Clockwork (its rank rows over the REST API, through the
broker, folded by Kafka key) and in Flink SQL (its changelog, ``+I``/``-U``/``+U``/``-D``
rows folded by ``(category, rn)``).

Flink's Top-N over an append-only input is its ``AppendOnlyTopNFunction``: a tie ranks
after the rows that came first, as Clockwork's (docs/semantics.md section 12). Both read
the sales in one order (one partition; one file with parallelism 1), so ties included,
the two tables must be equal. How the events and Flink are run: test_sql_flink.py.

Over an upsert table (a ``PRIMARY KEY``), Flink's Top-N is its ``RetractableTopNFunction``:
a row's new version is taken out of its rank and ranked again after its ties, a deleted
row taken out, as Clockwork's (docs/semantics.md section 12, "Over a table").
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.sql.compiler import validate_sql
from service.runtime.lifecycle.manager import Runtime
from tests.integration.flink_sql import FlinkSql
from tests.integration.kafka_utils import (
    create_topic,
    produce,
    read_topic,
    runtime_settings,
    unique,
)
from tests.integration.test_sql_flink import BASE, Case, Input, _clockwork_records
from tests.integration.test_table_sources import run_to_the_end

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


# -- over an upsert table ---------------------------------------------------------------

TABLE_QUERY = (
    "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY category ORDER BY revenue "
    "DESC) AS rn FROM {source} WHERE revenue > 3) WHERE rn <= " + str(N)
)


def versions() -> list[dict[str, Any]]:
    """600 versions of 40 products over 6 categories, revenues 0 to 20 (many ties): a
    product moves between categories, rises and falls, and is deleted (``deleted``:
    Clockwork's tombstone) and written again."""
    rng = random.Random(53)
    out = []
    for i in range(600):
        out.append(
            {
                "product": f"p{rng.randrange(40)}",
                "category": f"c{rng.randrange(6)}",
                "revenue": rng.randrange(21),
                "deleted": rng.random() < 0.1,
                "ts": BASE + i * 10,
            }
        )
    return out


def flink_table_of_versions(
    flink: FlinkSql, folder: Path, events: list[dict[str, Any]]
) -> dict[str, tuple[str, int]]:
    """Flink's answer over the same versions, its changelog folded by ``(category, rn)``.
    Flink reads no upsert changelog from a file, so the table is written as SQL makes it
    from the versions: each product's last version (deduplication on event time, an
    updating result keyed by the product) without the deleted ones (a filter, which
    retracts a product whose last version is a delete); the Top-N over that updating
    input is Flink's ``RetractableTopNFunction``."""
    path = folder / "versions.json"
    with path.open("w") as out:
        for event in events:
            row = {k: v for k, v in event.items() if k != "ts"}
            out.write(json.dumps({**row, "ts_ms": event["ts"]}) + "\n")
    table_sql = (
        "CREATE TABLE versions (product VARCHAR, category VARCHAR, revenue BIGINT, "
        "deleted BOOLEAN, ts_ms BIGINT, ts AS TO_TIMESTAMP_LTZ(ts_ms, 3), "
        "WATERMARK FOR ts AS ts) "
        f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')"
    )
    products = (
        "(SELECT product, category, revenue FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
        "product ORDER BY ts DESC) AS v FROM versions) WHERE v = 1 AND NOT deleted)"
    )
    columns, rows, kinds = flink.changelog([table_sql], TABLE_QUERY.format(source=products))
    at = {name: i for i, name in enumerate(columns)}
    table: dict[str, tuple[str, int]] = {}
    for row, kind in zip(rows, kinds, strict=True):
        key = f"{row[at['category']]}|{row[at['rn']]}"
        if kind in ("INSERT", "UPDATE_AFTER"):
            table[key] = (row[at["product"]], row[at["revenue"]])
        elif kind == "DELETE":
            table.pop(key, None)
    return table


async def test_a_top_n_over_an_upsert_table_folds_to_flink_s_changelog_folded(
    bootstrap_servers: str, flink: FlinkSql, tmp_path: Path
) -> None:
    """The same versions as a table: in Clockwork a topic keyed by product (a delete a
    tombstone; one partition, so the versions keep their order through the retraction
    shuffle), read by ``CREATE TABLE ... PRIMARY KEY``, the inner ``WHERE`` a filter whose
    dropped versions are deletes; in Flink the table SQL makes of the versions. Ties rank
    by the arrival of a row's newest version in both."""
    events = versions()
    want = flink_table_of_versions(flink, tmp_path, events)
    assert len(want) >= 4 * N, "Flink gave no table: the case checks little"
    name = unique("flink-table-top-n")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, partitions=1)
    await produce(
        bootstrap_servers,
        topic,
        [
            (0, e["product"].encode(), None if e["deleted"] else orjson.dumps(e), e["ts"])
            for e in events
        ],
    )
    sql = (
        "CREATE TABLE products (product VARCHAR, category VARCHAR, revenue BIGINT, "
        "deleted BOOLEAN, ts BIGINT, PRIMARY KEY (product) NOT ENFORCED) "
        f"WITH (topic = '{topic}', bounded = true);\n"
        "SET emit_interval = INTERVAL '50' MILLISECOND;\n"
        f'INSERT INTO "{name}.out" ' + TABLE_QUERY.format(source="products")
    )
    validated, _ = validate_sql(name, sql, ())
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    try:
        await run_to_the_end(runtime, build_definition(validated, ()))
    finally:
        await runtime.shutdown()
    table: dict[str, tuple[str, int]] = {}
    for record in await read_topic(bootstrap_servers, f"{name}.out"):
        if record.value is None:
            table.pop(record.key.decode(), None)
            continue
        row = orjson.loads(record.value)["result"]["row"]
        table[record.key.decode()] = (row["product"], row["revenue"])
    assert table == want
