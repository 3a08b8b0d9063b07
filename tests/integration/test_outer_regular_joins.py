"""Outer regular joins on a real broker (docs/pipeline-spec.md, "Outer regular joins"):
two source topics routed through one shuffle topic to the join's key; the result topic
is an upsert stream keyed by the output row's name, and folded (the newest value per
Kafka key, a tombstone deleting it) it is the SQL outer join of the whole input,
whatever order the partitions were read in. Exactly-once with kill -9: a
read_committed reader never sees a row's ``seq`` twice.
"""

from __future__ import annotations

import random
import signal
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.contract.result_record import UPSERT_RESULT_FIELDS
from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    read_topic,
    unique,
    wait_until,
)
from tests.integration.replicas import Replica, replicas
from tests.integration.test_joins import join_definition
from tests.integration.test_running_aggregates import committed_or_crashed
from tests.integration.test_shuffle import run_to_finish

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

BASE = 1_700_000_000_000
ORDERS = 300
Pair = tuple[str, int | None, int | None]
"""An output row as compared: (join key, order n or None, payment n or None)."""


def orders_and_payments(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Orders of 80 ids (several per id, some ids never paid), payments of 100 ids (some
    for ids never ordered: a full join pads them)."""
    rng = random.Random(seed)
    orders = [
        {"order_id": f"o{rng.randrange(80)}", "ts": BASE + n * 100, "n": n} for n in range(ORDERS)
    ]
    payments = [
        {"order": f"o{rng.randrange(100)}", "paid_at": BASE + rng.randrange(30_000), "n": n}
        for n in range(200)
    ]
    return orders, payments


def sql_answer(
    orders: list[dict[str, Any]], payments: list[dict[str, Any]], how: str
) -> list[Pair]:
    """``orders <how> JOIN payments ON order_id = order`` over the whole input."""
    rows: list[Pair] = []
    paid: set[int] = set()
    for o in orders:
        matched = [p for p in payments if p["order"] == o["order_id"]]
        rows.extend((o["order_id"], o["n"], p["n"]) for p in matched)
        paid.update(p["n"] for p in matched)
        if not matched and how in ("left", "full"):
            rows.append((o["order_id"], o["n"], None))
    if how in ("right", "full"):
        rows.extend((p["order"], None, p["n"]) for p in payments if p["n"] not in paid)
    return sorted(rows, key=str)


def pair_of(key: str, result: dict[str, Any]) -> Pair:
    left, right = result["left"], result["right"]
    return (key, None if left is None else left["n"], None if right is None else right["n"])


def folded(records: list[Any]) -> list[Pair]:
    """The table the upserts fold to (by Kafka key, in partition and offset order)."""
    table: dict[bytes, Pair] = {}
    for record in records:
        if record.value is None:
            table.pop(record.key, None)
        else:
            value = orjson.loads(record.value)
            table[record.key] = pair_of(value["key"].split("|")[0], value["result"])
    return sorted(table.values(), key=str)


async def produce_inputs(
    bootstrap: str, name: str, orders: list[dict[str, Any]], payments: list[dict[str, Any]]
) -> None:
    await produce(
        bootstrap, f"{name}.orders", [json_record(o["n"] % 2, o["order_id"], o) for o in orders]
    )
    await produce(
        bootstrap, f"{name}.payments", [json_record(p["n"] % 3, p["order"], p) for p in payments]
    )


async def create_inputs(bootstrap: str, name: str) -> None:
    await create_topic(bootstrap, f"{name}.orders", 2)
    await create_topic(bootstrap, f"{name}.payments", 3)


@pytest.mark.parametrize(
    ("how", "delivery"),
    [
        ("left", "at_least_once"),
        ("right", "at_least_once"),
        ("full", "at_least_once"),
        pytest.param("full", "exactly_once", marks=pytest.mark.requires_broker("transactions")),
    ],
)
async def test_an_outer_regular_join_folds_to_the_sql_outer_join_of_the_whole_input(
    bootstrap_servers: str, how: str, delivery: str
) -> None:
    name = unique("outerj")
    orders, payments = orders_and_payments(3)
    await create_inputs(bootstrap_servers, name)
    await produce_inputs(bootstrap_servers, name, orders, payments)
    operator = {"type": "join", "kind": "regular", "how": how}
    definition = replace(join_definition(name, operator), delivery=delivery)
    await run_to_finish(bootstrap_servers, definition)

    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"
    records = await read_topic(bootstrap_servers, f"{name}.out", isolation_level=isolation)
    assert folded(records) == sql_answer(orders, payments, how)
    seqs = Counter()
    for record in records:
        if record.value is None:
            continue
        value = orjson.loads(record.value)
        assert set(value) == set(UPSERT_RESULT_FIELDS)
        assert record.key == value["key"].encode() and value["id"] == f"{name}|{value['key']}"
        assert (value["op"], value["seq"]) == ("upsert", 0)
        seqs[value["id"]] += 1
    assert max(seqs.values()) == 1  # a bounded run without replays: each row upserted once
    assert await read_topic(bootstrap_servers, f"{name}.dlq") == []


async def folds_to(bootstrap: str, topic: str, want: list[Pair]) -> bool:
    try:
        records = await read_topic(bootstrap, topic, isolation_level="read_committed")
    except TimeoutError:  # a transaction open for the whole read: look again
        return False
    return folded(records) == want


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize("at", [1, 2], ids=["first", "second"])
async def test_a_crash_before_the_commit_never_shows_a_row_s_seq_twice(
    bootstrap_servers: str, tmp_path: Path, at: int
) -> None:
    """Exactly-once, a full outer join: the worker kills itself at its first (or second:
    one committed before it) checkpoint of the join's stage with outputs, after the broker
    took them and before the transaction committed. After the restart (from the
    committed state: the rows held and which are padded) a read_committed reader folds
    the topic to the SQL answer and sees no row's (Kafka key, seq) twice, while the
    aborted upserts are in the log beside their replays."""
    await crash_before_the_commit_and_restart(bootstrap_servers, tmp_path, at, {})


async def crash_before_the_commit_and_restart(
    bootstrap_servers: str, tmp_path: Path, at: int, extra: dict[str, Any]
) -> None:
    """:func:`test_a_crash_before_the_commit_never_shows_a_row_s_seq_twice`'s run and
    checks; ``extra``: more worker options (the state backend: test_rocksdb_state.py)."""
    name = unique("outereo")
    orders, payments = orders_and_payments(5)
    await create_inputs(bootstrap_servers, name)
    operator = {"type": "join", "kind": "regular", "how": "full"}
    options: dict[str, Any] = {"delivery": "exactly_once", "join": operator, **extra}
    half_orders, half_payments = len(orders) // 2, len(payments) // 2
    await produce_inputs(bootstrap_servers, name, orders[:half_orders], payments[:half_payments])
    crash = {"stage": "shuffled", "point": "after_outputs", "at": at}
    crashing = Replica(
        bootstrap_servers, name, f"{name}.orders", tmp_path / "crash.json", crash=crash, **options
    )

    async def crashed() -> bool:
        return crashing.exited

    try:
        if at == 2:
            await wait_until(
                partial(committed_or_crashed, bootstrap_servers, f"{name}.out", crashing), 60
            )
        await produce_inputs(
            bootstrap_servers, name, orders[half_orders:], payments[half_payments:]
        )
        await wait_until(crashed, timeout_s=60)
    finally:
        crashing.stop(signal.SIGKILL)
    assert crashing.process.returncode == -signal.SIGKILL
    assert await read_topic(bootstrap_servers, f"{name}.out"), "outputs came before the crash"

    want = sql_answer(orders, payments, "full")
    with replicas(bootstrap_servers, name, f"{name}.orders", tmp_path, 1, **options):
        caught_up = partial(folds_to, bootstrap_servers, f"{name}.out", want)
        await wait_until(caught_up, timeout_s=90, interval_s=0.3)
    committed = await read_topic(bootstrap_servers, f"{name}.out", isolation_level="read_committed")
    shown = Counter((r.key, orjson.loads(r.value)["seq"]) for r in committed if r.value is not None)
    assert max(shown.values()) == 1
    everything = await read_topic(bootstrap_servers, f"{name}.out")
    replayed = Counter(
        (r.key, orjson.loads(r.value)["seq"]) for r in everything if r.value is not None
    )
    assert len(everything) > len(committed)
    assert max(replayed.values()) == 2  # an aborted upsert and its committed replay


def customer_versions(seed: int) -> list[tuple[int, bytes, bytes | None, int]]:
    """Versions of 30 customers' rows (keyed by id, each id in one of 2 partitions), some
    replaced, some deleted (a tombstone), some deleted and written again."""
    rng = random.Random(seed)
    records: list[tuple[int, bytes, bytes | None, int]] = []
    for n in range(120):
        cid = f"c{rng.randrange(30)}"
        ts = BASE + n * 50
        value = None if rng.random() < 0.2 else orjson.dumps({"id": cid, "v": n, "ts": ts})
        records.append((int(cid[1:]) % 2, cid.encode(), value, ts))
    return records


def table_join_answer(orders: list[dict[str, Any]], versions: list[Any]) -> list[Pair]:
    """``orders FULL JOIN customers`` over the final table: each customer's last version,
    none after its tombstone."""
    final: dict[str, int | None] = {}
    for _, key, value, _ in versions:
        final[key.decode()] = None if value is None else orjson.loads(value)["v"]
    rows: list[Pair] = []
    for o in orders:
        rows.append((o["customer"], o["n"], final.get(o["customer"])))
    ordered = {o["customer"] for o in orders}
    rows.extend((cid, None, v) for cid, v in final.items() if v is not None and cid not in ordered)
    return sorted(rows, key=str)


def table_pair_of(key: str, result: dict[str, Any]) -> Pair:
    order, customer = result["left"], result["right"]
    return (key, None if order is None else order["n"], None if customer is None else customer["v"])


def table_join_spec(name: str, bounded: bool, delivery: str) -> dict[str, Any]:
    """Orders (a stream keyed by their customer) FULL JOIN customers (a table: the Kafka
    key is the primary key, and the join key)."""
    return {
        "name": name,
        "inputs": {
            "orders": {
                "source": {"topics": [f"{name}.orders"], "bounded": bounded},
                "key": {"field": "customer"},
                "timestamp": {"field": "ts"},
            },
            "customers": {
                "source": {
                    "topics": [f"{name}.customers"],
                    "bounded": bounded,
                    "changelog": "upsert",
                },
                "timestamp": {"source": "kafka"},
            },
        },
        "operator": {
            "type": "join",
            "kind": "regular",
            "how": "full",
            "left": "orders",
            "right": "customers",
        },
        "sink": {"topic": f"{name}.out"},
        "delivery": delivery,
    }


def table_folded(records: list[Any]) -> list[Pair]:
    table: dict[bytes, Pair] = {}
    for record in records:
        if record.value is None:
            table.pop(record.key, None)
        else:
            value = orjson.loads(record.value)
            table[record.key] = table_pair_of(value["key"].split("|")[0], value["result"])
    return sorted(table.values(), key=str)


def customer_orders(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"customer": f"c{rng.randrange(40)}", "ts": BASE + n * 20, "n": n} for n in range(200)]


@pytest.mark.parametrize(
    "delivery",
    [
        "at_least_once",
        pytest.param("exactly_once", marks=pytest.mark.requires_broker("transactions")),
    ],
)
async def test_a_join_with_a_table_folds_to_the_sql_join_of_the_final_table(
    bootstrap_servers: str, delivery: str
) -> None:
    """Orders (a stream) FULL JOIN customers (a table keyed by the Kafka key, versions
    replaced and deleted): the upserts folded are the join of every order with its
    customer's last version."""
    name = unique("tablej")
    orders = customer_orders(9)
    versions = customer_versions(9)
    await create_topic(bootstrap_servers, f"{name}.orders", 2)
    await create_topic(bootstrap_servers, f"{name}.customers", 2)
    await produce(
        bootstrap_servers, f"{name}.orders", [json_record(o["n"] % 2, None, o) for o in orders]
    )
    await produce(bootstrap_servers, f"{name}.customers", versions)
    spec = table_join_spec(name, bounded=True, delivery=delivery)
    definition = build_definition(validate_spec(spec, ()), ())
    await run_to_finish(bootstrap_servers, definition)

    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"
    records = await read_topic(bootstrap_servers, f"{name}.out", isolation_level=isolation)
    assert table_folded(records) == table_join_answer(orders, versions)
    assert any(r.value is None for r in records)  # versions were retracted
    assert await read_topic(bootstrap_servers, f"{name}.dlq") == []


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize("at", [1, 2], ids=["first", "second"])
async def test_a_crash_before_the_commit_of_a_join_with_a_table_never_repeats_a_seq(
    bootstrap_servers: str, tmp_path: Path, at: int
) -> None:
    """Exactly-once, orders FULL JOIN a table of customers: killed at its first (or
    second) checkpoint of the join's stage with outputs, before the commit. After the
    restart (from the committed state: rows, versions, each join key's seq) the
    read_committed topic folds to the join of the final table, and each row's seq only
    increases until the row's tombstone."""
    name = unique("tableeo")
    orders, versions = customer_orders(13), customer_versions(13)
    await create_topic(bootstrap_servers, f"{name}.orders", 2)
    await create_topic(bootstrap_servers, f"{name}.customers", 2)
    options: dict[str, Any] = {"spec": table_join_spec(name, False, "exactly_once")}

    async def produce_part(start: float, end: float) -> None:
        part = orders[int(len(orders) * start) : int(len(orders) * end)]
        await produce(
            bootstrap_servers, f"{name}.orders", [json_record(o["n"] % 2, None, o) for o in part]
        )
        part_versions = versions[int(len(versions) * start) : int(len(versions) * end)]
        await produce(bootstrap_servers, f"{name}.customers", part_versions)

    await produce_part(0, 0.5)
    crash = {"stage": "shuffled", "point": "after_outputs", "at": at}
    crashing = Replica(
        bootstrap_servers, name, f"{name}.orders", tmp_path / "crash.json", crash=crash, **options
    )

    async def crashed() -> bool:
        return crashing.exited

    try:
        if at == 2:
            await wait_until(
                partial(committed_or_crashed, bootstrap_servers, f"{name}.out", crashing), 60
            )
        await produce_part(0.5, 1)
        await wait_until(crashed, timeout_s=60)
    finally:
        crashing.stop(signal.SIGKILL)
    assert crashing.process.returncode == -signal.SIGKILL

    want = table_join_answer(orders, versions)

    async def caught_up() -> bool:
        try:
            records = await read_topic(
                bootstrap_servers, f"{name}.out", isolation_level="read_committed"
            )
        except TimeoutError:  # a transaction open for the whole read: look again
            return False
        return table_folded(records) == want

    with replicas(bootstrap_servers, name, f"{name}.orders", tmp_path, 1, **options):
        await wait_until(caught_up, timeout_s=90, interval_s=0.3)
    committed = await read_topic(bootstrap_servers, f"{name}.out", isolation_level="read_committed")
    newest: dict[bytes, int] = {}
    for record in committed:  # by partition and offset: each row's in its order
        if record.value is None:
            newest.pop(record.key, None)
            continue
        seq = orjson.loads(record.value)["seq"]
        assert seq > newest.get(record.key, -1), (record.key, seq)
        newest[record.key] = seq
    everything = await read_topic(bootstrap_servers, f"{name}.out")
    assert len(everything) > len(committed)  # the aborted upserts are in the log
