"""A join declared in a spec and run through the REST API (#31): a bounded interval
left join of two topics, each input with its own key field, timestamps and
out-of-orderness, finishes with exactly the rows of a reference join; a bad join spec
is one 422 with every problem at its path."""

from __future__ import annotations

import random
import uuid
from typing import Any

import httpx
import pytest

from tests.api.server import (
    TopicReader,
    app_settings,
    create_topic,
    eventually,
    produce,
    running_app,
    wait_ready,
)
from tests.integration.kafka_utils import read_json, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BASE = 1_700_000_000_000
ORDERS_BOUND_MS, PAYMENTS_BOUND_MS = 2_000, 3_000
UPPER_MS = 10_000


def join_spec(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "inputs": {
            "orders": {
                "source": {"topics": [f"{name}.orders"], "bounded": True},
                "key": {"field": "order_id", "shuffle_partitions": 3},
                "timestamp": {"field": "ts"},
                "watermark": {"max_out_of_orderness_ms": ORDERS_BOUND_MS, "interval_ms": 50},
            },
            "payments": {
                "source": {"topics": [f"{name}.payments"], "bounded": True},
                "steps": [{"filter": "amount > 0"}],
                "key": {"field": "order"},
                "timestamp": {"field": "paid_at"},
                "watermark": {"max_out_of_orderness_ms": PAYMENTS_BOUND_MS, "interval_ms": 50},
            },
        },
        "operator": {
            "type": "join",
            "kind": "interval",
            "how": "left",
            "left": "orders",
            "right": "payments",
            "between": {"lower_ms": 0, "upper_ms": UPPER_MS},
            "select": {
                "order": "orders.n",
                "payment": "payments.n",
                "delay_ms": "payments.paid_at - orders.ts",
            },
        },
        "sink": {"topic": f"{name}.out", "late_topic": f"{name}.late"},
    }


def orders_and_payments(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """200 orders ~100 ms apart (ids repeat); 0 to 2 payments each within 15 s (so some
    fall outside the 10 s interval), a few with amount 0 (filtered out by the payments'
    step); each input sent within its out-of-orderness bound."""
    rng = random.Random(seed)
    orders, payments = [], []
    for n in range(200):
        order_id = f"o{rng.randrange(40)}"
        orders.append({"order_id": order_id, "ts": BASE + n * 100 - rng.randrange(1_900), "n": n})
        for _ in range(rng.choice((0, 1, 1, 2))):
            payments.append(
                {
                    "order": order_id,
                    "paid_at": BASE + n * 100 + rng.randrange(15_000),
                    "amount": rng.choice((0, 5, 10, 20)),
                    "n": len(payments),
                }
            )
    payments.sort(key=lambda p: p["paid_at"] + rng.randrange(PAYMENTS_BOUND_MS))
    return orders, payments


def reference(
    orders: list[dict[str, Any]], payments: list[dict[str, Any]]
) -> list[tuple[str, int, int | None, int | None, int]]:
    """(key, order, payment, delay, ts) of every row of the left interval join."""
    rows = []
    paid = [p for p in payments if p["amount"] > 0]
    for o in orders:
        matches = [
            p
            for p in paid
            if p["order"] == o["order_id"] and o["ts"] <= p["paid_at"] <= o["ts"] + UPPER_MS
        ]
        for p in matches:
            delay = p["paid_at"] - o["ts"]
            rows.append((o["order_id"], o["n"], p["n"], delay, max(o["ts"], p["paid_at"])))
        if not matches:
            rows.append((o["order_id"], o["n"], None, None, o["ts"]))
    return sorted(rows, key=str)


def row(record: dict[str, Any]) -> tuple[str, int, int | None, int | None, int]:
    value = record["value"]
    return (record["key"], value["order"], value["payment"], value["delay_ms"], record["ts"])


async def test_a_bounded_interval_left_join_over_the_api_gives_exactly_the_reference_rows(
    bootstrap_servers: str,
) -> None:
    name = f"paid-{uuid.uuid4().hex[:8]}"
    orders, payments = orders_and_payments(31)
    await create_topic(bootstrap_servers, f"{name}.orders", partitions=2)
    await create_topic(bootstrap_servers, f"{name}.payments", partitions=3)
    await produce(bootstrap_servers, f"{name}.orders", [(o["order_id"], o) for o in orders])
    await produce(bootstrap_servers, f"{name}.payments", [(p["order"], p) for p in payments])
    want = reference(orders, payments)
    assert any(r[2] is None for r in want) and any(r[2] is not None for r in want)
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        created = await client.post("/pipelines", json=join_spec(name))
        assert created.status_code == 201, created.text
        ends = created.json()["end_offsets"]  # pinned over both inputs' topics
        assert {topic for topic, _, _ in ends} == {f"{name}.orders", f"{name}.payments"}
        assert sum(end for _, _, end in ends) == len(orders) + len(payments)

        async def finished() -> Any:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            assert status["state"] != "failed", status
            return status if status["state"] == "finished" else None

        await eventually(finished, timeout_s=60)
        async with TopicReader(bootstrap_servers, f"{name}.out") as reader:

            async def all_rows() -> list[dict[str, Any]] | None:
                records = await reader.poll()
                return records if len(records) >= len(want) else None

            records = await eventually(all_rows, timeout_s=30)
            await reader.poll()  # nothing more
    assert len(records) == len(want)
    assert sorted(map(row, records), key=str) == want
    assert len({r["id"] for r in records}) == len(records)
    assert all(r["pipeline"] == name and r["kind"] == "interval" for r in records)
    assert await read_topic(bootstrap_servers, f"{name}.late") == []  # within the bounds
    assert await read_topic(bootstrap_servers, f"{name}.out.dlq") == []


async def test_a_bad_join_spec_is_one_422_with_every_problem_at_its_path(
    bootstrap_servers: str,
) -> None:
    name = f"bad-{uuid.uuid4().hex[:8]}"
    spec = join_spec(name)
    spec["operator"].update(left="customers", how="semi", between={"lower_ms": 5, "upper_ms": 1})
    spec["operator"]["select"]["who"] = "customers.name"
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        answer = await client.post("/pipelines", json=spec)
        assert (await client.get(f"/pipelines/{name}")).status_code == 404
    assert answer.status_code == 422, answer.text
    assert [(p["loc"], p["type"]) for p in answer.json()["detail"]] == [
        (["body", "operator", "left"], "unknown_input"),
        (["body", "operator", "how"], "how_not_for_kind"),
        (["body", "operator", "between", "lower_ms"], "lower_above_upper"),
        (["body", "operator", "select", "who"], "invalid_select"),
    ]


async def test_a_bounded_lookup_join_over_the_api_pins_the_left_ends_and_finishes(
    bootstrap_servers: str,
) -> None:
    """A lookup join created over the API: the end offsets are pinned over the orders
    alone (the table is never bounded), the pipeline finishes when the orders are read,
    every order enriched with its customer, and status shows the table loaded."""
    name = f"enrich-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, f"{name}.orders", partitions=2)
    await create_topic(bootstrap_servers, f"{name}.customers", partitions=2)
    await produce(
        bootstrap_servers,
        f"{name}.customers",
        [(f"c{i}", {"name": f"name{i}"}) for i in range(4)],
    )
    orders = [{"customer": f"c{n % 5}", "ts": BASE + n, "n": n} for n in range(30)]
    await produce(bootstrap_servers, f"{name}.orders", [(o["customer"], o) for o in orders])
    spec = {
        "name": name,
        "inputs": {
            "orders": {
                "source": {"topics": [f"{name}.orders"], "bounded": True},
                "key": {"field": "customer"},
                "timestamp": {"field": "ts"},
            },
            "customers": {"source": {"topics": [f"{name}.customers"]}},
        },
        "operator": {
            "type": "join",
            "kind": "lookup",
            "how": "left",
            "left": "orders",
            "right": "customers",
            "max_rows": 10,
            "select": {"n": "orders.n", "who": "customers.name"},
        },
        "sink": {"topic": f"{name}.out"},
    }
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        created = await client.post("/pipelines", json=spec)
        assert created.status_code == 201, created.text
        ends = created.json()["end_offsets"]
        assert {topic for topic, _, _ in ends} == {f"{name}.orders"}

        async def finished() -> Any:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            assert status["state"] != "failed", status
            return status if status["state"] == "finished" else None

        status = await eventually(finished, timeout_s=60)
        assert status["lookup_table"] == {
            "input": "customers",
            "rows": 4,
            "max_rows": 10,
            "loaded": True,
            "updates": 4,
        }
    rows = await read_json(bootstrap_servers, f"{name}.out")
    assert {r["value"]["n"]: r["value"]["who"] for r in rows} == {
        o["n"]: (None if o["customer"] == "c4" else f"name{o['customer'][1:]}") for o in orders
    }
