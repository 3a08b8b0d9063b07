"""Joins on a real broker: two source topics of other widths, each input with its own
key field, timestamps and out-of-orderness, routed through one shuffle topic to the
join's key; a bounded run gives exactly the rows of a reference join over the whole
inputs (semantics.md section 10), with none late and nothing dead-lettered.
"""

from __future__ import annotations

import random
import signal
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from service.core.time import MAX_TIMESTAMP
from service.runtime.definition import (
    InputSettings,
    PipelineDefinition,
    ShuffleSettings,
    SinkSettings,
    TimestampSettings,
    WatermarkSettings,
)
from service.runtime.factories import join_operator_factory
from service.runtime.lifecycle.manager import Runtime
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    read_json,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
)
from tests.integration.replicas import replicas
from tests.integration.test_shuffle import run_to_finish

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BASE = 1_700_000_000_000
BOUND_MS = 2_000
INPUTS = ("orders", "payments")


def join_definition(name: str, operator: dict[str, Any], table: bool = False) -> PipelineDefinition:
    """``table``: the payments are a versioned table keyed by the Kafka key (a null
    value deletes the key from the record's Kafka timestamp on)."""

    def side(input_name: str, topic: str, key: str | None, ts: str) -> InputSettings:
        return InputSettings(
            name=input_name,
            topics=(topic,),
            key_field=key,
            timestamp=TimestampSettings(source="field", field=ts),
            watermark=WatermarkSettings(max_out_of_orderness_ms=BOUND_MS, interval_ms=50),
            table=table and input_name == "payments",
        )

    inputs = (
        side("orders", f"{name}.orders", "order_id", "ts"),
        side("payments", f"{name}.payments", None if table else "order", "paid_at"),
    )
    return PipelineDefinition(
        name=name,
        topics=(f"{name}.orders", f"{name}.payments"),
        sink=SinkSettings(f"{name}.out", f"{name}.dlq", f"{name}.late"),
        operator_factory=join_operator_factory(name, operator, INPUTS, late_output=True),
        shuffle=ShuffleSettings(partitions=3),
        inputs=inputs,
        bounded=True,
        watermark=WatermarkSettings(interval_ms=50),
        spec={"operator": operator},
    )


def orders_and_payments(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Orders ~100 ms apart; for most a payment 0-60 s later, some paid twice, some
    never; each input within its 2 s out-of-orderness in the order it is sent."""
    rng = random.Random(seed)
    orders, payments = [], []
    for n in range(600):
        ts = BASE + n * 100 - rng.randrange(BOUND_MS)
        order_id = f"o{rng.randrange(150)}"  # ids repeat: several orders per key
        orders.append({"order_id": order_id, "ts": ts, "n": n})
        for _ in range(rng.choice((0, 1, 1, 1, 2))):
            paid = BASE + n * 100 + rng.randrange(60_000)
            payments.append({"order": order_id, "paid_at": paid, "n": len(payments)})
    payments.sort(key=lambda p: p["paid_at"] + rng.randrange(BOUND_MS))  # sent by arrival
    return orders, payments


async def bounded_inputs(bootstrap: str, name: str, seed: int) -> tuple[Any, ...]:
    """The topics of :func:`orders_and_payments` (2 and 3 partitions), not produced yet:
    ``(orders, payments, order records, payment records, end offsets)``, the ends as a
    worker's ``bounded`` option takes them (what the API pins)."""
    orders, payments = orders_and_payments(seed)
    await create_topic(bootstrap, f"{name}.orders", 2)
    await create_topic(bootstrap, f"{name}.payments", 3)
    order_records = [json_record(o["n"] % 2, o["order_id"], o) for o in orders]
    payment_records = [json_record(p["n"] % 3, p["order"], p) for p in payments]
    ends = [[f"{name}.orders", p, sum(1 for r in order_records if r[0] == p)] for p in range(2)]
    ends += [
        [f"{name}.payments", p, sum(1 for r in payment_records if r[0] == p)] for p in range(3)
    ]
    return orders, payments, order_records, payment_records, ends


async def run_join(bootstrap: str, operator: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    name = unique("join")
    orders, payments = orders_and_payments(7)
    await create_topic(bootstrap, f"{name}.orders", 2)
    await create_topic(bootstrap, f"{name}.payments", 3)
    await produce(
        bootstrap,
        f"{name}.orders",
        [json_record(o["n"] % 2, o["order_id"], o) for o in orders],
    )
    await produce(
        bootstrap,
        f"{name}.payments",
        [json_record(p["n"] % 3, p["order"], p) for p in payments],
    )
    registry = CollectorRegistry()
    status = await run_to_finish(bootstrap, join_definition(name, operator), registry)
    # every input read to its end, nothing held any more
    for part in status.partitions:
        if part.stage == "shuffled":
            assert part.shuffle is not None
            inputs = part.shuffle["inputs"]
            assert set(inputs) == set(INPUTS)
            assert all(i["watermark"] == MAX_TIMESTAMP for i in inputs.values()), inputs
            if operator["kind"] != "temporal":  # a table keeps its newest versions
                assert all(i["rows_held"] == 0 for i in inputs.values()), inputs
    if operator["kind"] != "temporal":
        for input_name in INPUTS:
            labels = {"pipeline": name, "input": input_name}
            assert registry.get_sample_value("clockwork_join_state_rows", labels) == 0.0
    rows = await read_json(bootstrap, f"{name}.out")
    assert await read_topic(bootstrap, f"{name}.late") == []
    assert await read_topic(bootstrap, f"{name}.dlq") == []
    assert len({r["id"] for r in rows}) == len(rows)  # a bounded run without replays
    return rows, (orders, payments, status)


def pair_of(row: dict[str, Any]) -> tuple[str, int | None, int | None]:
    left, right = row["value"]["left"], row["value"]["right"]
    return (row["key"], None if left is None else left["n"], None if right is None else right["n"])


INTERVAL_LEFT = {
    "type": "join",
    "kind": "interval",
    "how": "left",
    "between": {"lower_ms": 0, "upper_ms": 30_000},
}


def interval_left(
    orders: list[dict[str, Any]], payments: list[dict[str, Any]]
) -> set[tuple[str, int | None, int | None]]:
    """INTERVAL_LEFT's rows over the whole inputs, as (key, order n, payment n)."""
    want: set[tuple[str, int | None, int | None]] = set()
    for o in orders:
        matched = False
        for p in payments:
            if p["order"] == o["order_id"] and o["ts"] <= p["paid_at"] <= o["ts"] + 30_000:
                want.add((o["order_id"], o["n"], p["n"]))
                matched = True
        if not matched:
            want.add((o["order_id"], o["n"], None))
    return want


async def test_an_interval_left_join_gives_each_match_and_each_unpaid_order_once(
    bootstrap_servers: str,
) -> None:
    rows, (orders, payments, status) = await run_join(bootstrap_servers, INTERVAL_LEFT)
    assert sorted(map(pair_of, rows), key=str) == sorted(interval_left(orders, payments), key=str)
    by_pair = {pair_of(r): r for r in rows}
    for o in orders:  # a padded row at its order's time, a match at the later one
        for p in payments:
            row = by_pair.get((o["order_id"], o["n"], p["n"]))
            if row is not None:
                assert row["ts"] == max(o["ts"], p["paid_at"])
    assert [s.name for s in status.stages] == ["route", "shuffled"]


async def test_a_tumbling_window_join_pairs_the_rows_of_each_window_and_key(
    bootstrap_servers: str,
) -> None:
    operator = {
        "type": "join",
        "kind": "window",
        "how": "inner",
        "assigner": {"type": "tumbling", "size_ms": 10_000},
        "select": {"order": "orders.n", "payment": "payments.n", "key": "orders.order_id"},
    }
    rows, (orders, payments, _) = await run_join(bootstrap_servers, operator)
    by_window: dict[tuple[str, int], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for o in orders:
        by_window[(o["order_id"], o["ts"] - o["ts"] % 10_000)][0].append(o["n"])
    for p in payments:
        by_window[(p["order"], p["paid_at"] - p["paid_at"] % 10_000)][1].append(p["n"])
    want = {
        (key, start, o, p) for (key, start), (os_, ps) in by_window.items() for o in os_ for p in ps
    }
    got = {
        (r["key"], r["window"]["start"], r["value"]["order"], r["value"]["payment"]) for r in rows
    }
    assert got == want
    assert all(r["ts"] == r["window"]["end"] - 1 and r["value"]["key"] == r["key"] for r in rows)


async def test_a_temporal_join_takes_the_version_valid_at_each_order_s_time(
    bootstrap_servers: str,
) -> None:
    operator = {"type": "join", "kind": "temporal", "how": "left"}
    rows, (orders, payments, _) = await run_join(bootstrap_servers, operator)
    want = set()
    for o in orders:
        versions = [p for p in payments if p["order"] == o["order_id"] and p["paid_at"] <= o["ts"]]
        # of one time, the later arrival: the payments' order in the input is arrival
        best = max(versions, key=lambda p: (p["paid_at"], payments.index(p)), default=None)
        want.add((o["order_id"], o["n"], None if best is None else best["n"]))
    assert {pair_of(r) for r in rows} == want
    assert len(rows) == len(orders)
    assert all(r["kind"] == "temporal" for r in rows)


async def test_a_replica_killed_mid_join_leaves_every_row_once_after_dedupe(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Two replicas (worker processes) run an interval left join; one is killed with
    kill -9 once both processed some of the first 40 %; the survivor takes its source
    and shuffle partitions over from their checkpoints and finishes the bounded input.
    After de-duplication by id (at-least-once), exactly the reference's rows."""
    await run_with_a_killed_replica(bootstrap_servers, tmp_path, "at_least_once")


@pytest.mark.requires_broker("transactions")
async def test_exactly_once_over_both_inputs_leaves_every_row_once_with_a_replica_killed(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """The same with ``exactly_once``: each source partition of either input has its own
    transaction, so a read_committed reader sees every row once, without de-duplication."""
    rows = await run_with_a_killed_replica(bootstrap_servers, tmp_path, "exactly_once")
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))  # not one duplicate


async def run_with_a_killed_replica(
    bootstrap_servers: str, tmp_path: Path, delivery: str
) -> list[dict[str, Any]]:
    """Returns every row a read_committed reader sees, checked against the reference
    after de-duplication by id."""
    name = unique("joinkill")
    orders, payments, order_records, payment_records, ends = await bounded_inputs(
        bootstrap_servers, name, 11
    )
    first_orders, first_payments = len(order_records) * 2 // 5, len(payment_records) * 2 // 5
    options = {"bounded": ends, "join": INTERVAL_LEFT, "delivery": delivery}
    with replicas(bootstrap_servers, name, f"{name}.orders", tmp_path, 2, **options) as pair:

        async def both_hold_partitions() -> bool:
            return all(len(r.status()["partitions"]) > 0 for r in pair)

        await wait_until(both_hold_partitions, timeout_s=60)
        await produce(bootstrap_servers, f"{name}.orders", order_records[:first_orders])
        await produce(bootstrap_servers, f"{name}.payments", payment_records[:first_payments])

        async def first_part_joined() -> bool:
            """Each replica holds shuffle partitions, and all three are read to their
            end past records (records_in counts only since a partition's assignment, and
            a rebalance may have moved one that was read already)."""
            held = [[p for p in r.status()["partitions"] if p["stage"] == "shuffled"] for r in pair]
            shuffled = [p for parts in held for p in parts]
            return (
                all(held)
                and len(shuffled) == 3
                and all(p["offset"] and p["lag"] == 0 for p in shuffled)
            )

        await wait_until(first_part_joined, timeout_s=60)
        dead, survivor = pair
        dead.stop(signal.SIGKILL)
        await produce(bootstrap_servers, f"{name}.orders", order_records[first_orders:])
        await produce(bootstrap_servers, f"{name}.payments", payment_records[first_payments:])

        async def survivor_finished() -> bool:
            return survivor.exited

        await wait_until(survivor_finished, timeout_s=90)
    final = survivor.status()
    assert final["state"] == "finished"
    # it holds everything: the dead replica's source and shuffle partitions too (counted
    # as taken over only if their last checkpoint was not a handover at a rebalance)
    assert len(final["partitions"]) == 2 + 3 + 3
    everything = await read_json(bootstrap_servers, f"{name}.out", "read_committed")
    rows = list({r["id"]: r for r in everything}.values())  # a replayed row is the same row
    assert sorted(map(pair_of, rows), key=str) == sorted(interval_left(orders, payments), key=str)
    assert await read_topic(bootstrap_servers, f"{name}.dlq") == []
    return everything


async def test_a_table_tombstone_deletes_its_key_from_its_time_on(
    bootstrap_servers: str,
) -> None:
    """The payments as a versioned table keyed by the Kafka key: a null value at t deletes
    the key from t on, so an order after it finds nothing (left: padded) and an order
    after a later version finds that version."""
    name = unique("jointomb")
    await create_topic(bootstrap_servers, f"{name}.orders", 1)
    await create_topic(bootstrap_servers, f"{name}.payments", 1)
    versions: list[tuple[int, bytes | None, bytes | None, int | None]] = [
        json_record(0, "o1", {"order": "o1", "paid_at": BASE + 1_000, "n": 0}),
        (0, b"o1", None, BASE + 2_000),  # deleted from 2 s on
        json_record(0, "o1", {"order": "o1", "paid_at": BASE + 3_000, "n": 2}),
    ]
    await produce(bootstrap_servers, f"{name}.payments", versions)
    orders = [
        {"order_id": "o1", "ts": BASE + ts, "n": n}
        for n, ts in enumerate((500, 1_500, 2_000, 2_500, 3_000, 9_000))
    ]
    await produce(
        bootstrap_servers, f"{name}.orders", [json_record(0, o["order_id"], o) for o in orders]
    )
    operator = {"type": "join", "kind": "temporal", "how": "left"}
    await run_to_finish(bootstrap_servers, join_definition(name, operator, table=True))
    rows = await read_json(bootstrap_servers, f"{name}.out")
    assert sorted(pair_of(r) for r in rows) == sorted(
        [
            ("o1", 0, None),
            ("o1", 1, 0),
            ("o1", 2, None),
            ("o1", 3, None),
            ("o1", 4, 2),
            ("o1", 5, 2),
        ],
        key=str,
    )
    assert await read_topic(bootstrap_servers, f"{name}.dlq") == []


async def test_an_idle_input_is_left_out_of_the_join_s_watermark(
    bootstrap_servers: str,
) -> None:
    """No payment ever comes (the payments topic stays empty, its partitions idle after
    ``idle_timeout_ms``): the join's watermark follows the orders alone, so orders whose
    interval has passed are emitted padded while the pipeline runs, unbounded."""
    name = unique("joinidle")
    await create_topic(bootstrap_servers, f"{name}.orders", 2)
    await create_topic(bootstrap_servers, f"{name}.payments", 2)
    orders = [{"order_id": f"o{n % 7}", "ts": BASE + n * 1_000, "n": n} for n in range(60)]
    await produce(
        bootstrap_servers,
        f"{name}.orders",
        [json_record(o["n"] % 2, o["order_id"], o) for o in orders],
    )
    definition = join_definition(name, INTERVAL_LEFT)
    idle = WatermarkSettings(max_out_of_orderness_ms=BOUND_MS, interval_ms=50, idle_timeout_ms=500)
    assert definition.inputs is not None
    definition = replace(
        definition,
        bounded=False,
        inputs=(
            replace(definition.inputs[0], watermark=idle),
            replace(definition.inputs[1], watermark=idle),
        ),
        watermark=replace(definition.watermark, idle_timeout_ms=500),
    )
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(definition)
    # each partition's watermark is its max_ts - 2 s - 1; once the orders' partitions
    # are idle too, every source is, and the watermark flushes to the largest (section 8)
    watermark = max(o["ts"] for o in orders) - 2_001
    due = [o for o in orders if o["ts"] + 30_000 <= watermark]
    try:

        async def padded() -> bool:
            return len(await read_json(bootstrap_servers, f"{name}.out")) >= len(due)

        await wait_until(padded, timeout_s=60)
    finally:
        await runtime.shutdown()
    rows = await read_json(bootstrap_servers, f"{name}.out")
    assert sorted(map(pair_of, rows), key=str) == sorted(
        ((o["order_id"], o["n"], None) for o in due), key=str
    )
    assert all(r["ts"] == orders[r["value"]["left"]["n"]]["ts"] for r in rows)
