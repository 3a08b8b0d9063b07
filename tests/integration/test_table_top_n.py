"""Top-N over a table source end to end (#50), on both brokers: a compacted topic of
products, upserts and tombstones keyed by product (each product's versions in one
partition, as upsert-kafka writes them), ranked per category by revenue as SQL says
(``ROW_NUMBER() OVER (PARTITION BY category ORDER BY revenue DESC) <= 3`` over a ``CREATE
TABLE ... PRIMARY KEY``). Products move between categories (the retraction shuffle takes
each moved product back from its old category's partition), fall out of the top 3 and
are deleted; the result topic, folded by Kafka key (a tombstone deletes), equals the same
query's answer (sqlite) over the final table; under a WHERE too (a version it drops is
its product's delete). Exactly-once with the worker killed between a checkpoint's outputs
and its commit: a read_committed reader never sees a rank row's seq twice."""

from __future__ import annotations

import random
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.sql.compiler import validate_sql
from service.runtime.lifecycle.manager import Runtime
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
)
from tests.integration.replicas import replicas
from tests.integration.test_replica_loss import PARTITIONS as CRASH_PARTITIONS
from tests.integration.test_running_aggregates import crash_before_the_commit
from tests.integration.test_table_sources import (
    crash_spec,
    create_compacted,
    each_seq_once,
    folded,
    run_to_the_end,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BASE = 1_700_000_000_000
PARTITIONS = 3
PRODUCTS = 50
CATEGORIES = 5
N = 3

SQL = """CREATE TABLE products (
  product VARCHAR, category VARCHAR, revenue BIGINT,
  PRIMARY KEY (product) NOT ENFORCED
) WITH (topic = '{source}', bounded = true);
SET emit_interval = INTERVAL '50' MILLISECOND;
INSERT INTO "{sink}"
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY category ORDER BY revenue DESC) AS rn
  FROM products{where})
WHERE rn <= {n};
"""


def changelog(count: int) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """``count`` versions of the products table and the table they leave: upserts that
    change a product's category and revenue (every revenue distinct, so the ranking is
    the same whatever order the shuffle interleaves ties in), and tombstones."""
    rng = random.Random(5053)
    revenues = rng.sample(range(1, 1_000_000), count)
    records: list[Any] = []
    table: dict[str, dict[str, Any]] = {}
    for i in range(count):
        number = rng.randrange(PRODUCTS)
        pk = f"p{number}"
        partition = number % PARTITIONS
        if rng.random() < 0.15:
            records.append((partition, pk.encode(), None, BASE + i))
            table.pop(pk, None)
            continue
        row = {"product": pk, "category": f"c{rng.randrange(CATEGORIES)}", "revenue": revenues[i]}
        records.append(json_record(partition, pk, row, BASE + i))
        table[pk] = row
    return records, table


def sql_answer(table: dict[str, dict[str, Any]], where: str) -> dict[str, dict[str, Any]]:
    """The query's answer over the final table (sqlite's ROW_NUMBER), as rank rows."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE products (product TEXT PRIMARY KEY, category TEXT, revenue INT)")
    db.executemany(
        "INSERT INTO products VALUES (?, ?, ?)",
        [(r["product"], r["category"], r["revenue"]) for r in table.values()],
    )
    rows = db.execute(
        "SELECT * FROM (SELECT product, category, revenue, ROW_NUMBER() OVER "
        "(PARTITION BY category ORDER BY revenue DESC) AS rn FROM products" + where + ") "
        f"WHERE rn <= {N}"
    ).fetchall()
    return {
        f"{category}|{rn}": {
            "partition": category,
            "rank": rn,
            "row": {"product": product, "category": category, "revenue": revenue},
        }
        for product, category, revenue, rn in rows
    }


@pytest.mark.parametrize("where", ["", " WHERE revenue > 400000"], ids=["all", "filtered"])
@pytest.mark.parametrize(
    "delivery",
    [
        "at_least_once",
        pytest.param("exactly_once", marks=pytest.mark.requires_broker("transactions")),
    ],
)
async def test_a_top_n_over_a_table_folds_to_the_sql_answer_over_the_final_table(
    bootstrap_servers: str, delivery: str, where: str
) -> None:
    """Filtered (an inner WHERE): a product's version the filter drops is its delete, so
    a product whose revenue falls below the bound leaves its category's ranking."""
    name = unique("tabletopn")
    topic = f"{name}.in"
    await create_compacted(bootstrap_servers, topic, PARTITIONS)
    records, table = changelog(2000)
    await produce(bootstrap_servers, topic, records)
    sql = SQL.format(source=topic, sink=f"{name}.out", n=N, where=where)
    if delivery == "exactly_once":
        sql = "SET delivery = 'exactly_once';\n" + sql
    validated, compiled = validate_sql(name, sql, ())
    assert compiled.spec["source"]["changelog"] == "upsert"
    assert compiled.spec["key"] == {"field": "category"}
    definition = build_definition(validated, ())
    assert definition.table and definition.shuffle is not None  # the retraction shuffle
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    try:
        await run_to_the_end(runtime, definition)
    finally:
        await runtime.shutdown()
    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"
    found = await read_topic(bootstrap_servers, f"{name}.out", isolation_level=isolation)
    got, seqs = folded(found)
    assert got == sql_answer(table, where)
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs


@pytest.mark.requires_broker("transactions")
async def test_a_crash_before_the_commit_never_shows_a_rank_row_s_seq_twice(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Exactly-once: a Top-N of the latest users per ``amount`` over a table of users
    (each version moves its user to another amount), the worker killed (SIGKILL) at its
    second checkpoint with outputs of the shuffled stage, after the broker took them and
    before the transaction committed, then restarted from the committed state. A
    read_committed reader never sees a rank row's seq twice, and the rank rows fold to
    the Top-N of the final table (compared by the ranked ``ts``: users of different
    source partitions may tie, and the shuffle interleaves them as they come)."""
    name = unique("tabletopneo")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, CRASH_PARTITIONS)
    operator = {"type": "top_n", "order_by": {"field": "ts"}, "n": 2, "emit_interval_ms": 100}
    options: dict[str, Any] = {"spec": crash_spec(name, operator)}
    data = await crash_before_the_commit(
        bootstrap_servers, name, topic, tmp_path, options, 2, stage="shuffled"
    )
    assert await read_topic(bootstrap_servers, f"{name}.out"), "outputs came before the crash"
    rows = {e["user"]: e for _, e in data}  # each user's last version
    held: dict[str, list[int]] = defaultdict(list)
    for e in rows.values():
        held[str(e["amount"])].append(e["ts"])
    want = {
        f"{amount}|{rank}": ts
        for amount, stamps in held.items()
        for rank, ts in enumerate(sorted(stamps, reverse=True)[:2], start=1)
    }

    async def caught_up() -> bool:
        try:
            found = await read_topic(
                bootstrap_servers, f"{name}.out", isolation_level="read_committed"
            )
        except TimeoutError:
            return False
        got = folded(found)[0]
        return {key: result["row"]["ts"] for key, result in got.items()} == want

    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options):
        await wait_until(caught_up, timeout_s=90, interval_s=0.3)
    committed = await read_topic(bootstrap_servers, f"{name}.out", isolation_level="read_committed")
    each_seq_once(committed)
    everything = await read_topic(bootstrap_servers, f"{name}.out")
    assert len(everything) > len(committed)  # the aborted rank rows are in the log
