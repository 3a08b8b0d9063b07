"""Tables as sources end to end (#50), on both brokers.

- A compacted topic of orders, upserts and tombstones keyed by order id (each order's
  versions in one partition, as upsert-kafka writes them), read as a table by a running
  aggregate per customer: through the retraction shuffle (orders move between
  customers), and keyed by the order itself (no shuffle). The result topic, folded by
  Kafka key (a tombstone deletes), equals SQL's answer (sqlite) over the final table.
- Exactly-once through the retraction shuffle, the worker killed (SIGKILL) between a
  checkpoint's outputs and its commit: a read_committed reader never sees a group's
  ``seq`` twice, and the restarted worker's results fold to the final table's aggregate.
- A chain: pipeline A's running aggregate (an upsert stream, two waves of input so its
  keys are updated) is pipeline B's table source, B written in SQL over A's
  ``result.<name>`` fields; B's folded output equals the aggregate of A's final table.
"""

from __future__ import annotations

import random
import sqlite3
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.admin import NewTopic

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from service.pipeline_spec.sql.compiler import validate_sql
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.status import PipelineState
from service.runtime.pipeline_topics.names import STATE, changelog_topic, shuffle_topic
from tests.integration.kafka_utils import (
    cluster_of,
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
from tests.integration.test_running_aggregates import (
    crash_before_the_commit,
    folds_to,
    purchases,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BASE = 1_700_000_000_000
PARTITIONS = 3
ORDERS = 60
CUSTOMERS = 7


async def create_compacted(bootstrap: str, name: str, partitions: int) -> None:
    admin = cluster_of(bootstrap).admin()
    await admin.start()
    try:
        topic = NewTopic(name, partitions, 1, topic_configs={"cleanup.policy": "compact"})
        await admin.create_topics([topic])
    finally:
        await admin.close()


def changelog(count: int) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """``count`` records of the orders table, and the table they leave: upserts that
    change an order's customer and amount, and tombstones (some of orders never written,
    some of orders already deleted)."""
    rng = random.Random(50)
    records: list[Any] = []
    table: dict[str, dict[str, Any]] = {}
    for i in range(count):
        number = rng.randrange(ORDERS)
        pk = f"o{number}"
        partition = number % PARTITIONS
        if rng.random() < 0.2:
            records.append((partition, pk.encode(), None, BASE + i))
            table.pop(pk, None)
            continue
        row = {
            "order": pk,
            "customer": f"c{rng.randrange(CUSTOMERS)}",
            "amount": rng.randrange(-5, 50),
        }
        records.append(json_record(partition, pk, row, BASE + i))
        table[pk] = row
    return records, table


def sql_answer(table: dict[str, dict[str, Any]], by: str) -> dict[str, dict[str, Any]]:
    """The aggregate per ``by`` over the final table, as SQL computes it (sqlite)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer TEXT, amount INT)")
    db.executemany(
        "INSERT INTO orders VALUES (?, ?, ?)",
        [(r["order"], r["customer"], r["amount"]) for r in table.values()],
    )
    column = {"customer": "customer", "order": "order_id"}[by]
    rows = db.execute(
        f"SELECT {column}, COUNT(*), SUM(amount), MIN(amount), MAX(amount), AVG(amount), "
        f"COUNT(DISTINCT amount) FROM orders GROUP BY {column}"
    ).fetchall()
    return {
        key: {"n": n, "total": total, "lo": lo, "hi": hi, "mean": mean, "distinct": distinct}
        for key, n, total, lo, hi, mean, distinct in rows
    }


def folded(records: list[Any]) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """The upsert stream folded by Kafka key (a tombstone deletes), and each key's seqs."""
    out: dict[str, Any] = {}
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in records:
        key = record.key.decode()
        if record.value is None:
            out.pop(key, None)
            seqs[key].clear()  # a deleted key is a new row: its seq starts again
            continue
        value = orjson.loads(record.value)
        assert value["key"] == key and value["op"] == "upsert"
        seqs[key].append(value["seq"])
        out[key] = value["result"]
    return out, seqs


async def run_to_the_end(runtime: Runtime, definition: Any) -> None:
    runtime.start_pipeline(definition)
    await runtime.runner(definition.name).wait_for_state(PipelineState.FINISHED, timeout_s=90)
    status = runtime.status(definition.name)
    assert status.state is PipelineState.FINISHED, status.reason


AGGREGATIONS = {
    "n": {"fn": "count"},
    "total": {"fn": "sum", "field": "amount"},
    "lo": {"fn": "min", "field": "amount"},
    "hi": {"fn": "max", "field": "amount"},
    "mean": {"fn": "avg", "field": "amount"},
    "distinct": {"fn": "count_distinct", "field": "amount"},
}


@pytest.mark.parametrize("by", ["customer", "order"])
async def test_a_table_s_aggregate_folds_to_the_sql_answer_over_the_final_table(
    bootstrap_servers: str, by: str
) -> None:
    """Grouped by customer: orders move between customers, so the retraction shuffle
    takes each moved order back from its old customer's partition. Grouped by the order
    (the Kafka key): no shuffle, each group one row, deleted with its row."""
    name = unique("table")
    topic = f"{name}.in"
    await create_compacted(bootstrap_servers, topic, PARTITIONS)
    records, table = changelog(2000)
    await produce(bootstrap_servers, topic, records)
    spec: dict[str, Any] = {
        "name": name,
        "source": {"topics": [topic], "bounded": True, "changelog": "upsert"},
        "operator": {"type": "aggregate", "aggregations": AGGREGATIONS, "emit_interval_ms": 50},
        "sink": {"topic": f"{name}.out"},
    }
    if by == "customer":
        spec["key"] = {"field": "customer", "shuffle_partitions": 2}
    definition = build_definition(validate_spec(spec, ()), ())
    assert (definition.shuffle is not None) == (by == "customer")
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    try:
        await run_to_the_end(runtime, definition)
    finally:
        await runtime.shutdown()
    got, seqs = folded(await read_topic(bootstrap_servers, f"{name}.out"))
    want = sql_answer(table, by)
    assert got.keys() == want.keys()
    for key, row in want.items():
        assert got[key] == {**row, "mean": pytest.approx(row["mean"])}, key
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs


async def test_a_pipeline_s_upserts_are_the_next_pipeline_s_table(
    bootstrap_servers: str,
) -> None:
    name = unique("chain")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    data = purchases(800)
    first: dict[str, Any] = {
        "name": f"{name}-a",
        "source": {"topics": [topic]},
        "key": {"field": "user"},
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "aggregate",
            "aggregations": {
                "orders": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "amount"},
            },
            "emit_interval_ms": 100,
        },
        "sink": {"topic": f"{name}.totals"},
    }
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    try:
        runtime.start_pipeline(build_definition(validate_spec(first, ()), ()))
        totals: dict[str, dict[str, int]] = defaultdict(lambda: {"orders": 0, "revenue": 0})
        for begin, end in ((0, 500), (500, len(data))):  # two waves: keys are updated
            wave = data[begin:end]
            await produce(
                bootstrap_servers, topic, [json_record(i % 2, None, e) for i, e in enumerate(wave)]
            )
            for e in wave:
                totals[e["user"]]["orders"] += 1
                totals[e["user"]]["revenue"] += e["amount"]
            caught_up = partial(
                folds_to, bootstrap_servers, f"{name}.totals", "read_uncommitted", dict(totals)
            )
            await wait_until(caught_up, timeout_s=45, interval_s=0.3)
        upserts = await read_topic(bootstrap_servers, f"{name}.totals")
        assert len(upserts) > len(totals)  # some users' totals were replaced

        sql = (
            "CREATE TABLE totals (key VARCHAR, result STRUCT<orders BIGINT, revenue BIGINT>, "
            f"PRIMARY KEY (key) NOT ENFORCED) WITH (topic = '{name}.totals', bounded = true);\n"
            f'INSERT INTO "{name}.summary" SELECT COUNT(*) AS users, '
            "SUM(result.revenue) AS revenue, MAX(result.orders) AS most, "
            "MIN(result.orders) AS least FROM totals"
        )
        validated, compiled = validate_sql(f"{name}-b", sql, ())
        assert compiled.spec["source"]["changelog"] == "upsert"
        second = build_definition(validated, ())
        await run_to_the_end(runtime, second)
    finally:
        await runtime.shutdown()
    got, _ = folded(await read_topic(bootstrap_servers, f"{name}.summary"))
    assert got == {
        "all": {
            "users": len(totals),
            "revenue": sum(t["revenue"] for t in totals.values()),
            "most": max(t["orders"] for t in totals.values()),
            "least": min(t["orders"] for t in totals.values()),
        }
    }


def same(got: dict[str, Any], want: dict[str, dict[str, Any]]) -> bool:
    """Whether the folded results are the SQL answer (the average within rounding)."""
    if got.keys() != want.keys():
        return False
    return all(got[k] == {**row, "mean": pytest.approx(row["mean"])} for k, row in want.items())


@pytest.mark.parametrize(
    "delivery",
    [
        "at_least_once",
        pytest.param("exactly_once", marks=pytest.mark.requires_broker("transactions")),
    ],
)
async def test_the_retraction_shuffle_goes_on_after_a_restart(
    bootstrap_servers: str, delivery: str
) -> None:
    """Unbounded: half the changelog, caught up; the runtime stops and another starts
    from the checkpoints (stage 1's map of each order's partition, stage 2's rows and
    groups); the second half moves and deletes orders written in the first, and the
    folded topic equals the SQL answer over the final table again."""
    name = unique("tabler")
    topic = f"{name}.in"
    await create_compacted(bootstrap_servers, topic, PARTITIONS)
    records, _ = changelog(1600)
    spec: dict[str, Any] = {
        "name": name,
        "source": {"topics": [topic], "changelog": "upsert"},
        "key": {"field": "customer", "shuffle_partitions": 2},
        "operator": {"type": "aggregate", "aggregations": AGGREGATIONS, "emit_interval_ms": 50},
        "sink": {"topic": f"{name}.out"},
        "delivery": delivery,
    }
    definition = build_definition(validate_spec(spec, ()), ())
    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"

    async def caught_up(want: dict[str, dict[str, Any]]) -> bool:
        try:
            found = await read_topic(bootstrap_servers, f"{name}.out", isolation_level=isolation)
        except TimeoutError:
            return False
        return same(folded(found)[0], want)

    table: dict[str, dict[str, Any]] = {}
    for wave in (records[:800], records[800:]):
        await produce(bootstrap_servers, topic, wave)
        for _, key, value, _ in wave:
            if value is None:
                table.pop(key.decode(), None)
            else:
                table[key.decode()] = orjson.loads(value)
        runtime = Runtime(runtime_settings(bootstrap_servers))
        await runtime.start()
        runtime.start_pipeline(definition)
        try:
            want = sql_answer(table, "customer")
            await wait_until(partial(caught_up, want), timeout_s=60, interval_s=0.3)
        finally:
            await runtime.shutdown()
        # the checkpoints hold stage 1's map (order -> shuffle partition) and stage 2's rows
        entries = await read_topic(bootstrap_servers, changelog_topic(name, 0))
        keys = [r.key.decode() for r in entries if r.key is not None]
        assert any(k.startswith(f"{topic}|") and f"|{STATE}|p" in k for k in keys)
        assert any(k.startswith(f"{shuffle_topic(name, 0)}|") and f"|{STATE}|r" in k for k in keys)


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize("at", [1, 2], ids=["first", "second"])
async def test_a_crash_before_the_commit_never_shows_a_group_s_seq_twice(
    bootstrap_servers: str, tmp_path: Path, at: int
) -> None:
    """Exactly-once over a table, through the retraction shuffle: each user's row (its
    Kafka key the primary key) is replaced again and again, moving between the groups of
    its ``amount``. The worker kills itself (SIGKILL) at its first (or second: one
    committed before it) checkpoint with outputs of the shuffled stage, after the broker
    took them and before the transaction committed; a new worker goes on from the
    committed state (stage 1's map, stage 2's rows and groups). A read_committed reader
    never sees a group's seq twice (each group's seqs go 0, 1, 2, ..., from 0 again after
    its delete) and folds to the aggregate of the final table."""
    name = unique("tableeo")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, CRASH_PARTITIONS)
    options: dict[str, Any] = {"spec": crash_spec(name, CRASH_AGGREGATE)}
    data = await crash_before_the_commit(
        bootstrap_servers, name, topic, tmp_path, options, at, stage="shuffled"
    )
    assert await read_topic(bootstrap_servers, f"{name}.out"), "outputs came before the crash"
    rows = {e["user"]: e for _, e in data}  # each user's last version (its partition's order)
    want: dict[str, dict[str, int]] = {}
    for e in rows.values():
        group = want.setdefault(str(e["amount"]), {"n": 0, "latest": e["ts"]})
        group["n"] += 1
        group["latest"] = max(group["latest"], e["ts"])

    async def caught_up() -> bool:
        try:
            found = await read_topic(
                bootstrap_servers, f"{name}.out", isolation_level="read_committed"
            )
        except TimeoutError:
            return False
        return folded(found)[0] == want

    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options):
        await wait_until(caught_up, timeout_s=90, interval_s=0.3)
    committed = await read_topic(bootstrap_servers, f"{name}.out", isolation_level="read_committed")
    each_seq_once(committed)
    everything = await read_topic(bootstrap_servers, f"{name}.out")
    assert len(everything) > len(committed)  # the aborted upserts are in the log


def each_seq_once(records: list[Any]) -> None:
    """Each key's upserts in ``records`` have seq 0, 1, 2, ... in order, from 0 again
    after its delete (a tombstone): no seq seen twice, none skipped."""
    expected_seq: dict[str, int] = {}
    for record in records:
        key = record.key.decode()
        if record.value is None:  # the key's delete: a later upsert is a new row
            expected_seq.pop(key, None)
            continue
        seq = orjson.loads(record.value)["seq"]
        assert seq == expected_seq.get(key, 0), (key, seq)
        expected_seq[key] = seq + 1


CRASH_AGGREGATE = {
    "type": "aggregate",
    "aggregations": {"n": {"fn": "count"}, "latest": {"fn": "max", "field": "ts"}},
    "emit_interval_ms": 100,
}


def crash_spec(name: str, operator: dict[str, Any]) -> dict[str, Any]:
    """``operator`` over a table of users (``test_replica_loss.dataset``'s records, keyed
    by user), keyed by ``amount``: every version moves its user to another key."""
    return {
        "name": name,
        "source": {"topics": [f"{name}.in"], "changelog": "upsert"},
        "key": {"field": "amount", "shuffle_partitions": 2},
        "timestamp": {"field": "ts"},
        "operator": operator,
        "sink": {"topic": f"{name}.out"},
        "delivery": "exactly_once",
    }
