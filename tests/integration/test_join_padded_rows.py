"""Outer joins keep every padded row, in the shape a user first reported losing one.

3,000 orders in a 4-partition topic keyed by order id, ~2,500 payments in a 3-partition
topic keyed by payment method (so both inputs go through the shuffle to ``order_id``),
each stream at most 2 s out of order, bounded; a left tumbling window join and a left
interval join over them give exactly the relational answer, with nothing late. The
loss was one padded row in some runs, so each join runs as several pipelines at once
on one runtime (each over its own topics and data), every one of which must be exact.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from service.core.partitioner import partition_for
from service.runtime.definition import ShuffleSettings
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.observability.status import PipelineState
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
from tests.integration.test_joins import BASE, BOUND_MS, join_definition, pair_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ORDERS = 3_000
RUNS = 6
Pair = tuple[str, int | None, int | None]


def orders_and_payments(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Orders 10 ms apart (30 s of them) with unique ids; per order 0-2 payments 0-60 s
    later, each with a payment method; both sent in time order within 2 s."""
    rng = random.Random(seed)
    orders, payments = [], []
    for n in range(ORDERS):
        order_id = f"o{n}"
        orders.append({"order_id": order_id, "ts": BASE + n * 10 - rng.randrange(BOUND_MS), "n": n})
        for _ in range(rng.choice((0, 0, 1, 1, 1, 1, 1, 2))):
            paid = BASE + n * 10 + rng.randrange(60_000)
            method = rng.choice(("card", "cash", "voucher", "wallet", "transfer"))
            payments.append({"order": order_id, "paid_at": paid, "method": method})
    payments.sort(key=lambda p: p["paid_at"] + rng.randrange(BOUND_MS))  # sent by arrival
    for n, payment in enumerate(payments):
        payment["n"] = n
    return orders, payments


def window_left(orders: list[dict[str, Any]], payments: list[dict[str, Any]]) -> set[Pair]:
    size = 10_000
    windows: dict[tuple[str, int], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for o in orders:
        windows[(o["order_id"], o["ts"] // size)][0].append(o["n"])
    for p in payments:
        windows[(p["order"], p["paid_at"] // size)][1].append(p["n"])
    rows: set[Pair] = set()
    for (key, _), (lefts, rights) in windows.items():
        rows |= {(key, o, p) for o in lefts for p in rights}
        if not rights:
            rows |= {(key, o, None) for o in lefts}
    return rows


def interval_left(orders: list[dict[str, Any]], payments: list[dict[str, Any]]) -> set[Pair]:
    by_order: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in payments:
        by_order[p["order"]].append(p)
    rows: set[Pair] = set()
    for o in orders:
        matched = [
            p for p in by_order[o["order_id"]] if o["ts"] <= p["paid_at"] <= o["ts"] + 60_000
        ]
        rows |= {(o["order_id"], o["n"], p["n"]) for p in matched}
        if not matched:
            rows.add((o["order_id"], o["n"], None))
    return rows


WINDOW_LEFT = {
    "type": "join",
    "kind": "window",
    "how": "left",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
}
INTERVAL_LEFT = {
    "type": "join",
    "kind": "interval",
    "how": "left",
    "between": {"lower_ms": 0, "upper_ms": 60_000},
}


@pytest.mark.parametrize(
    ("operator", "reference"),
    [(WINDOW_LEFT, window_left), (INTERVAL_LEFT, interval_left)],
    ids=["window", "interval"],
)
async def test_every_padded_row_of_a_left_join_over_two_shuffled_inputs_is_emitted(
    bootstrap_servers: str, operator: dict[str, Any], reference: Any
) -> None:
    runs = []
    for seed in range(RUNS):
        name = unique("padded")
        orders, payments = orders_and_payments(seed)
        await create_topic(bootstrap_servers, f"{name}.orders", 4)
        await create_topic(bootstrap_servers, f"{name}.payments", 3)
        await produce(
            bootstrap_servers,
            f"{name}.orders",
            [
                json_record(partition_for(o["order_id"].encode(), 4), o["order_id"], o)
                for o in orders
            ],
        )
        await produce(
            bootstrap_servers,
            f"{name}.payments",
            [json_record(partition_for(p["method"].encode(), 3), p["method"], p) for p in payments],
        )
        definition = replace(join_definition(name, operator), shuffle=ShuffleSettings(partitions=4))
        runs.append((definition, reference(orders, payments)))
    runtime = Runtime(
        runtime_settings(bootstrap_servers), metrics=build_metrics(CollectorRegistry())
    )
    await runtime.start()
    try:
        for definition, _ in runs:
            runtime.start_pipeline(definition)

        async def all_finished() -> bool:
            return all(runtime.status(d.name).state is PipelineState.FINISHED for d, _ in runs)

        await wait_until(all_finished, timeout_s=180)
    finally:
        await runtime.shutdown()
    for definition, want in runs:
        rows = await read_json(bootstrap_servers, f"{definition.name}.out")
        assert await read_topic(bootstrap_servers, f"{definition.name}.late") == []
        assert await read_topic(bootstrap_servers, f"{definition.name}.dlq") == []
        got = {pair_of(row) for row in rows}
        assert sorted(want - got, key=str) == []  # no padded row (or pair) lost
        assert sorted(got - want, key=str) == []
        assert len(rows) == len(got)  # each once: a bounded run without replays
